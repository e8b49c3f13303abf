/**
 * Wires the pieces together; no logic of its own. Starts the daemon (launch.ts: a probe turns a
 * missing daemon into one helpful notification), the gauge and its tier notices, the activity-bar
 * trees, the commands (commandTable.ts) and the breakdown tab; restarts the daemon (debounced) when
 * a start-up setting or the workspace trust changes; returns the API for agent extensions.
 */
import { randomBytes } from 'node:crypto';
import { CtxdService, type CtxdApi } from './api';
import { BreakdownTab } from './breakdownPanel';
import { createClient } from './client';
import { COMMANDS } from './commandIds';
import { commandTable } from './commandTable';
import { Daemon } from './daemon';
import { Debouncer, GaugeController } from './gauge';
import { INSTRUCTIONS } from './install';
import { daemonCommand, daemonEvents, launchDaemon } from './launch';
import { hooksRunner } from './hooks';
import { isFollowed } from './followed';
import { interpreterOf } from './probe';
import { RESTART_SETTINGS, SECTION, readSettings, shouldNotify } from './settings';
import { TierNotices } from './tierNotices';
import { RestoreMemory } from './timeMachine';
import { CompactionsModel, SnapshotsModel, ThreadsModel } from './trees';
import * as vsc from './vscodeapi';
import type { WaysOutHost } from './waysOut';

let running: Daemon | undefined;

export async function activate(context: vsc.ExtensionContext): Promise<CtxdApi> {
  const track = (d: { dispose(): unknown }) => context.subscriptions.push(d as never);
  const output = vsc.createOutputChannel('ctxd');
  track(output);
  const ui = vsc.createUi();
  const settings = () => readSettings(vsc.getConfiguration(SECTION));

  let daemon: Daemon | undefined;
  const service = new CtxdService(
    () => (daemon ? daemon.rpc() : Promise.reject(new Error('ctxd is not started'))),
    () => vsc.activeFolder()?.uri,
  );
  track(service);

  const gauge = new GaugeController(service, vsc.createGaugeItem(COMMANDS.menu), vsc.activeFolder);
  track(gauge);
  track(vsc.onDidChangeActiveFolder(() => gauge.refresh()));
  const where = () => gauge.where();

  const tierNotices = new TierNotices({
    shown: where,
    warningsShown: () => shouldNotify('warning', settings().notifications),
    ask: (severity, message, actions) => ui.ask(severity, message, actions),
    hideToasts: () => vsc.hideToasts(),
    execute: (command) => vsc.executeCommand(command),
  });
  track(service.onDidChangeUsage((e) => tierNotices.observe(e)));

  const breakdown = new BreakdownTab(
    service,
    vsc.createBreakdownPanel,
    where,
    () => randomBytes(16).toString('hex'),
    () => gauge.stopped(),
    (workspace, thread) => gauge.heldBreakdown(workspace, thread),
  );
  track(breakdown);
  // After a window reload VS Code gives the tab back to draw again.
  track(vsc.registerBreakdownSerializer((restored) => breakdown.open(restored)));

  const events = daemonEvents({
    service,
    log: output,
    setDown: (reason) => {
      gauge.setDown(reason);
      breakdown.refresh();
      // The views' welcome content (Install, Restart) follows the daemon's state.
      void vsc.setContext('ctxd.daemonState', reason === undefined ? 'running' : reason.kind === 'notInstalled' ? 'notInstalled' : 'stopped');
    },
    ask: (severity, message, actions) => ui.ask(severity, message, actions),
    execute: (command) => vsc.executeCommand(command),
    showLog: () => output.show(),
    restart: () => daemon?.restart(),
  });
  track(events);
  daemon = new Daemon(
    () =>
      launchDaemon({
        settings,
        pythonInterpreter: () => vsc.pythonInterpreter(),
        isTrusted: () => vsc.isTrusted(),
        cwd: () => vsc.workspaceFolderPaths()[0],
        log: output,
        createClient: (config) => createClient({ ...config, outputChannel: output }),
        compactingNow: () => service.compactingNow(),
        showMessage: (severity, message) => void vsc.showMessage(severity, message),
      }),
    events,
  );
  track(daemon);
  running = daemon;

  const restarts = new Debouncer(500, () => void daemon?.restart());
  track(restarts);
  track(vsc.onDidChangeConfiguration((affects) => RESTART_SETTINGS.some((s) => affects(s)) && restarts.schedule()));
  // The daemon takes a repository's risky settings only from a trusted workspace: tell it.
  track(vsc.onDidGrantTrust(() => restarts.schedule()));

  // The activity-bar view.
  const threads = new ThreadsModel(service, where);
  const snapshots = new SnapshotsModel(service, where);
  const compactions = new CompactionsModel(service, where);
  const trees = [threads, snapshots, compactions];
  // Menus hide what cannot be done on a followed session (package.json `when`: ctxd.shownReadOnly).
  const noteReadOnly = () => void vsc.setContext('ctxd.shownReadOnly', isFollowed(where()));
  track(service.onDidChangeUsage(noteReadOnly));
  track(service.onDidChangeThreads(noteReadOnly));
  track(vsc.onDidChangeActiveFolder(noteReadOnly));
  noteReadOnly();
  const refreshTrees = () => trees.forEach((m) => m.refresh());
  for (const [id, model] of [['ctxd.threads', threads], ['ctxd.snapshots', snapshots], ['ctxd.compactions', compactions]] as const) {
    track(model);
    track(vsc.registerTree(id, model));
  }
  track(vsc.registerVirtualDocuments());
  // Another client's threads and snapshots (a terminal agent, another editor): read again on return.
  track(vsc.onDidFocusWindow(refreshTrees));

  const waysOut: WaysOutHost = {
    ui,
    pickPath: async (o) => vsc.pickPath(o),
    setDaemonCommand: async (c) => vsc.setDaemonCommand(c),
    currentCommand: () => settings().daemonCommand,
    storage: vsc.storagePath(context),
    basePython: async () => {
      const down = gauge.stopped();
      return (down?.kind === 'notInstalled' ? interpreterOf(down.command) : undefined) ?? (await vsc.pythonInterpreter())?.[0] ?? 'python3';
    },
    log: (line) => output.info(line),
    progress: async (title, task) => vsc.withProgress(title, task),
    openInstructions: () => void vsc.openInstructions(context.extensionUri, INSTRUCTIONS),
    openSettings: () => void vsc.openSettings('ctxd.daemon.command'),
    showLog: () => output.show(),
    restart: async () => daemon?.restart(),
  };

  const commands = commandTable({
    ui,
    service,
    shown: where,
    stopped: () => gauge.stopped(),
    memory: new RestoreMemory(),
    redraw: () => {
      gauge.refresh();
      refreshTrees();
      breakdown.refresh();
    },
    refreshTrees,
    setUndoRestore: (undoId, conversation) => snapshots.setUndo(undoId, conversation),
    openBreakdown: () => breakdown.open(),
    closeTierNotice: () => tierNotices.close(),
    execute: (command) => vsc.executeCommand(command),
    restart: () => daemon?.restart(),
    showLog: () => output.show(),
    waysOut,
    liveSearch: vsc.liveSearch,
    openReadOnly: (name, content, language) => vsc.openReadOnly(name, content, language),
    hooks: hooksRunner(() => daemonCommand({ settings, pythonInterpreter: () => vsc.pythonInterpreter() }), () => vsc.activeFolderPath() ?? vsc.workspaceFolderPaths()[0]),
    openWelcome: () => vsc.executeCommand('workbench.action.openWalkthrough', `${context.extension.id}#ctxd.welcome`, false),
    focusHistory: () => vsc.executeCommand('ctxd.compactions.focus'),
    log: (line) => output.info(line),
    openSnapshotDiff: (file, id, workspace) => vsc.openSnapshotDiff(file, id, workspace),
    now: Date.now,
  });
  for (const [id, run] of Object.entries(commands)) track(vsc.registerCommand(id, run));

  gauge.refresh();
  void vsc.setContext('ctxd.daemonState', 'starting');
  // Not awaited: activation must not wait for the daemon; API calls wait for it instead.
  void daemon.restart();
  return service.exports();
}

/** VS Code waits for this promise: the daemon gets its shutdown/exit before the window goes. */
export function deactivate(): Promise<void> | undefined {
  return running?.stop();
}
