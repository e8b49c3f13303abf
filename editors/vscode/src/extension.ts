/**
 * Wires the pieces together; no logic of its own. Starts the daemon, the gauge, the commands and
 * the breakdown panel, restarts the daemon (debounced) when a start-up setting changes, and
 * returns the API for agent extensions.
 */
import { randomBytes } from 'node:crypto';
import { CtxdService, type CtxdApi } from './api';
import { BreakdownController } from './breakdownPanel';
import { COMMANDS, compactFlow, restoreFlow, rollbackFlow, snapshotFlow } from './commands';
import { createClient } from './client';
import { Daemon } from './daemon';
import { Debouncer, GaugeController } from './gauge';
import type { Disposable } from './protocol';
import { formatTokens } from './status';
import {
  RESTART_SETTINGS,
  SECTION,
  findOnPath,
  initializationOptions,
  readSettings,
  resolveDaemonCommand,
  shouldNotify,
} from './settings';
import * as vsc from './vscodeapi';

const MESSAGE_SEVERITY: Record<number, 'error' | 'warning' | 'info'> = { 1: 'error', 2: 'warning', 3: 'info', 4: 'info' };

function nonce(): string {
  return randomBytes(16).toString('hex');
}

let running: Daemon | undefined;

export async function activate(context: vsc.ExtensionContext): Promise<CtxdApi> {
  const output = vsc.createOutputChannel('ctxd');
  const track = (d: Disposable) => context.subscriptions.push(d);
  track(output);

  let attached: Disposable | undefined;
  // The service and the daemon refer to each other through these closures only.
  let daemon: Daemon | undefined;
  const service = new CtxdService(
    () => (daemon ? daemon.rpc() : Promise.reject(new Error('ctxd is not started'))),
    () => vsc.activeFolder()?.uri,
  );
  track(service);

  const item = vsc.createGaugeItem(COMMANDS.showUsage);
  track(item);
  const gauge = new GaugeController(service, item, vsc.activeFolder);
  track(gauge);
  track(vsc.onDidChangeActiveFolder(() => gauge.refresh()));

  const notifyLevel = () => readSettings(vsc.getConfiguration(SECTION)).notifications;
  track(
    service.onDidCompact((e) => {
      if (shouldNotify('info', notifyLevel())) {
        vsc.showMessage(
          'info',
          `ctxd compacted the conversation (${e.strategy}): ${formatTokens(e.tokensBefore)} → ${formatTokens(e.tokensAfter)} tokens.`,
        );
      }
    }),
  );

  daemon = new Daemon(
    async () => {
      const settings = readSettings(vsc.getConfiguration(SECTION));
      const command = resolveDaemonCommand(settings, {
        ctxdOnPath: settings.daemonCommand.length ? undefined : findOnPath('ctxd', process.env.PATH),
        interpreter: settings.daemonCommand.length ? undefined : await vsc.pythonInterpreter(),
      });
      output.info(`starting ${[command.command, ...command.args].join(' ')} --stdio`);
      return createClient({
        command,
        initializationOptions: initializationOptions(settings),
        outputChannel: output,
        cwd: vsc.workspaceFolderPaths()[0],
        onShowMessage: (type, message) => {
          const severity = MESSAGE_SEVERITY[type] ?? 'info';
          output.appendLine(`[${severity}] ${message}`);
          if (shouldNotify(severity, notifyLevel())) vsc.showMessage(severity, message);
        },
      });
    },
    {
      started: (rpc) => {
        attached?.dispose();
        attached = service.attach(rpc);
        gauge.setDown(undefined);
      },
      stopped: (reason) => {
        output.error(reason);
        gauge.setDown(reason);
      },
    },
  );
  track(daemon);
  running = daemon;
  track({ dispose: () => attached?.dispose() });

  const restarts = new Debouncer(500, () => void daemon?.restart());
  track(restarts);
  track(
    vsc.onDidChangeConfiguration((affects) => {
      if (RESTART_SETTINGS.some((s) => affects(s))) restarts.schedule();
    }),
  );

  let panel: { controller: BreakdownController; reveal(): void } | undefined;
  const showUsage = async () => {
    if (panel) {
      panel.reveal();
      await panel.controller.refresh();
      return;
    }
    const handle = vsc.createBreakdownPanel();
    const controller = new BreakdownController(service, handle, () => gauge.where(), nonce);
    const current = { controller, reveal: () => handle.reveal() };
    panel = current;
    handle.onDidDispose(() => {
      controller.dispose();
      if (panel === current) panel = undefined;
    });
    await controller.refresh();
  };

  const ui = vsc.createUi();
  const where = () => {
    const w = gauge.where();
    return w ? { workspace: w.uri, thread: w.thread } : undefined;
  };
  track(vsc.registerCommand(COMMANDS.showUsage, showUsage));
  track(vsc.registerCommand(COMMANDS.compact, () => compactFlow(ui, service, where())));
  track(vsc.registerCommand(COMMANDS.snapshot, () => snapshotFlow(ui, service, where())));
  track(vsc.registerCommand(COMMANDS.restore, () => restoreFlow(ui, service, where())));
  track(vsc.registerCommand(COMMANDS.rollback, () => rollbackFlow(ui, service, where())));
  track(vsc.registerCommand(COMMANDS.restart, () => daemon?.restart()));

  gauge.refresh();
  // Not awaited: activation must not wait for the daemon; API calls wait for it instead.
  void daemon.restart();
  return service.exports();
}

/** VS Code waits for this promise: the daemon gets its shutdown/exit before the window goes. */
export function deactivate(): Promise<void> | undefined {
  return running?.stop();
}
