/**
 * How the daemon is started and what the window does when it starts or stops: the command from the
 * settings (or `ctxd` on PATH, or the Python extension's interpreter), a `--version` probe that
 * turns a missing daemon into one `notInstalled` reason, then the client; on start the service
 * attaches, on a stop the gauge and breakdown say why and one notification offers the way out.
 * Free of `vscode`: the client factory and the dialogs are passed in.
 */
import type { CtxdService } from './api';
import { COMMANDS } from './commandIds';
import { type DaemonEvents, DaemonStartError, type ManagedClient, type StopReason } from './daemon';
import { ACTIONS, FailureNotices } from './failures';
import { describe, notInstalledMessage, probeDaemon } from './probe';
import type { Disposable } from './protocol';
import { type DaemonCommand, type ExtensionSettings, findOnPath, initializationOptions, resolveDaemonCommand, shouldNotify } from './settings';
import type { Severity } from './ui';

const MESSAGE_SEVERITY: Record<number, Severity> = { 1: 'error', 2: 'warning', 3: 'info', 4: 'info' };

export interface Log {
  info(line: string): void;
  warn(line: string): void;
  error(line: string): void;
}

export interface LaunchHost {
  settings(): ExtensionSettings;
  /** The Python extension's interpreter (program and arguments), if any. */
  pythonInterpreter(): Promise<string[] | undefined>;
  isTrusted(): boolean;
  /** The first workspace folder on disk: the daemon's working folder. */
  cwd(): string | undefined;
  log: Log;
  createClient(config: { command: DaemonCommand; initializationOptions: unknown; cwd: string | undefined; onShowMessage: (type: number, message: string) => void }): ManagedClient;
  /** True while a compaction the user asked for runs: its own message is the only one shown. */
  compactingNow(): boolean;
  showMessage(severity: Severity, message: string): void;
}

/** The daemon's command as the settings, PATH and the Python extension give it (`ctxd hooks` runs it too). */
export async function daemonCommand(h: Pick<LaunchHost, 'settings' | 'pythonInterpreter'>): Promise<DaemonCommand> {
  const s = h.settings();
  return resolveDaemonCommand(s, {
    ctxdOnPath: s.daemonCommand.length ? undefined : findOnPath('ctxd', process.env.PATH),
    interpreter: s.daemonCommand.length ? undefined : await h.pythonInterpreter(),
  });
}

/** Probes the configured daemon and builds its client; throws a DaemonStartError saying why it cannot. */
export async function launchDaemon(h: LaunchHost): Promise<ManagedClient> {
  const s = h.settings();
  const command = await daemonCommand(h);
  const probe = await probeDaemon(command);
  if (!probe.ok) {
    h.log.error(`\`${describe(command)} --version\` failed: ${probe.detail}`);
    throw new DaemonStartError(
      probe.notInstalled
        ? { kind: 'notInstalled', message: notInstalledMessage(command), command }
        : { kind: 'failed', message: `ctxd could not start (${describe(command)}): ${probe.detail}` },
    );
  }
  h.log.info(`starting ${describe(command)} --stdio (${probe.version}); workspace trusted: ${h.isTrusted()}`);
  return h.createClient({
    command,
    initializationOptions: initializationOptions(s, h.isTrusted()),
    cwd: h.cwd(),
    onShowMessage: (type, message) => {
      const severity = MESSAGE_SEVERITY[type] ?? 'info';
      h.log[severity === 'warning' ? 'warn' : severity](`daemon: ${message}`);
      // A manual compaction reports itself once, in its own words.
      if (h.compactingNow()) return;
      if (shouldNotify(severity, h.settings().notifications)) h.showMessage(severity, message);
    },
  });
}

export interface LifecycleHost {
  service: CtxdService;
  log: Log;
  /** The gauge, the breakdown and the quick menu: running (undefined) or why not. */
  setDown(reason: StopReason | undefined): void;
  ask(severity: Severity, message: string, actions: string[]): Promise<string | undefined>;
  execute(command: string): unknown;
  showLog(): void;
  restart(): unknown;
}

/** What the window does on each start and stop of the daemon; one notice per distinct failure. */
export function daemonEvents(h: LifecycleHost): DaemonEvents & Disposable {
  const failures = new FailureNotices();
  let attached: Disposable | undefined;
  return {
    started: (rpc, methods) => {
      attached?.dispose();
      attached = h.service.attach(rpc, methods);
      failures.started();
      h.setDown(undefined);
    },
    stopped: (reason) => {
      h.log.error(reason.kind === 'failed' && reason.detail ? `${reason.message} (${reason.detail})` : reason.message);
      h.service.detach();
      h.setDown(reason);
      const notice = failures.stopped(reason);
      if (!notice) return;
      void h.ask('error', notice.message, notice.actions).then((choice) => {
        if (choice === ACTIONS.install) void h.execute(COMMANDS.install);
        if (choice === ACTIONS.setPath) void h.execute(COMMANDS.setDaemonPath);
        if (choice === ACTIONS.showLog) h.showLog();
        if (choice === ACTIONS.restart) void h.restart();
      });
    },
    dispose: () => attached?.dispose(),
  };
}
