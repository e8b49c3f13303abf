/**
 * Wires the pieces together; no logic of its own. Starts the daemon (after a probe that turns a
 * missing daemon into one helpful notification), the gauge and its quick menu, the activity-bar
 * trees, the commands and the breakdown panel; restarts the daemon (debounced) when a start-up
 * setting or the workspace trust changes; returns the API for agent extensions.
 */
import { randomBytes } from 'node:crypto';
import { CtxdService, type CtxdApi } from './api';
import { BreakdownController } from './breakdownPanel';
import { COMMANDS } from './commandIds';
import { attempt } from './ui';
import { compactFlow, restoreFlow, rollbackFlow, snapshotFlow } from './commands';
import { createClient } from './client';
import { Daemon, DaemonStartError } from './daemon';
import { ACTIONS, FailureNotices } from './failures';
import { Debouncer, GaugeController } from './gauge';
import { describe, interpreterOf, notInstalledMessage, probeDaemon } from './probe';
import { INSTRUCTIONS } from './install';
import { type WaysOutHost, installFlow, setPathFlow } from './waysOut';
import { type GhostCommit } from './protocol';
import { isFollowed, readOnlyText } from './followed';
import { menuItems } from './quickMenu';
import {
  RESTART_SETTINGS,
  SECTION,
  findOnPath,
  initializationOptions,
  readSettings,
  resolveDaemonCommand,
  shouldNotify,
} from './settings';
import { statusMarkdown } from './statusReport';
import { deleteSnapshotFlow, restoreSnapshotFlow, showChangesFlow, undoRestoreFlow } from './snapshots';
import { TIER_ACTIONS, TierWatcher, tierActions, tierMessage } from './tierNotices';
import { RestoreMemory, undoFlow, undoLastFlow } from './timeMachine';
import { CompactionsModel, SnapshotsModel, ThreadsModel, archivedBy, threadNode, type TreeNode } from './trees';
import * as vsc from './vscodeapi';

/** The Switch Thread pick that unpins (no thread is named this: it is not a valid name). */
const FOLLOW_LATEST = '\u0000follow';

const MESSAGE_SEVERITY: Record<number, 'error' | 'warning' | 'info'> = { 1: 'error', 2: 'warning', 3: 'info', 4: 'info' };

function nonce(): string {
  return randomBytes(16).toString('hex');
}

/** A snapshot from a Snapshots tree node (context menus pass the node) or the snapshot itself. */
function snapshotOf(arg: unknown): GhostCommit | undefined {
  const a = arg as (GhostCommit & TreeNode) | undefined;
  if (a && typeof a.fileCount === 'number') return a;
  return a?.command?.arguments?.[0] as GhostCommit | undefined;
}

let running: Daemon | undefined;

export async function activate(context: vsc.ExtensionContext): Promise<CtxdApi> {
  const output = vsc.createOutputChannel('ctxd');
  const track = (d: { dispose(): unknown }) => context.subscriptions.push(d as never);
  track(output);
  const ui = vsc.createUi();
  const settings = () => readSettings(vsc.getConfiguration(SECTION));
  const notify = (severity: 'info' | 'warning' | 'error') => shouldNotify(severity, settings().notifications);

  let attached: { dispose(): void } | undefined;
  let daemon: Daemon | undefined;
  const service = new CtxdService(
    () => (daemon ? daemon.rpc() : Promise.reject(new Error('ctxd is not started'))),
    () => vsc.activeFolder()?.uri,
  );
  track(service);

  const item = vsc.createGaugeItem(COMMANDS.menu);
  track(item);
  const gauge = new GaugeController(service, item, vsc.activeFolder);
  track(gauge);
  track(vsc.onDidChangeActiveFolder(() => gauge.refresh()));
  /** A followed thread is compacted by its agent: say so rather than fail (true when refused). */
  const refuseFollowed = (): boolean => {
    const thread = gauge.where()?.thread;
    if (!isFollowed(thread)) return false;
    ui.notify('info', readOnlyText(thread as string));
    return true;
  };
  const where = () => {
    const w = gauge.where();
    return w ? { workspace: w.uri, thread: w.thread } : undefined;
  };

  // One notification per crossing into warn or compact, for the thread the gauge shows.
  // A notice that no longer holds (the tier changed again) is hidden before anything else shows.
  const tiers = new TierWatcher();
  let tierNoticeOpen = false;
  const closeTierNotice = async () => {
    if (!tierNoticeOpen) return;
    tierNoticeOpen = false;
    await vsc.hideToasts();
  };
  track(
    service.onDidChangeUsage((e) => {
      const w = gauge.where();
      if (!w || e.workspace !== w.uri || e.thread !== w.thread) return;
      const change = tiers.observe(`${e.workspace}\u0000${e.thread}`, e.tier);
      // The stale notice is hidden before the new one shows (hiding is not instant).
      const hidden = change.changed ? closeTierNotice() : Promise.resolve();
      const up = change.up;
      if (!up || !notify('warning')) return;
      void hidden.then(() => {
        tierNoticeOpen = true;
        return ui.ask('warning', tierMessage(up, e.thread, e), tierActions(e.thread));
      }).then((choice) => {
        tierNoticeOpen = false;
        if (choice === TIER_ACTIONS.compact) void vsc.executeCommand(COMMANDS.compactNow);
        if (choice === TIER_ACTIONS.breakdown) void vsc.executeCommand(COMMANDS.showUsage);
      });
    }),
  );

  const failures = new FailureNotices();
  let panel: { controller: BreakdownController; reveal(): void } | undefined;
  daemon = new Daemon(
    async () => {
      const s = settings();
      const command = resolveDaemonCommand(s, {
        ctxdOnPath: s.daemonCommand.length ? undefined : findOnPath('ctxd', process.env.PATH),
        interpreter: s.daemonCommand.length ? undefined : await vsc.pythonInterpreter(),
      });
      const probe = await probeDaemon(command);
      if (!probe.ok) {
        output.error(`\`${describe(command)} --version\` failed: ${probe.detail}`);
        throw new DaemonStartError(
          probe.notInstalled
            ? { kind: 'notInstalled', message: notInstalledMessage(command), command }
            : { kind: 'failed', message: `ctxd could not start (${describe(command)}): ${probe.detail}` },
        );
      }
      output.info(`starting ${describe(command)} --stdio (${probe.version}); workspace trusted: ${vsc.isTrusted()}`);
      return createClient({
        command,
        initializationOptions: initializationOptions(s, vsc.isTrusted()),
        outputChannel: output,
        cwd: vsc.workspaceFolderPaths()[0],
        onShowMessage: (type, message) => {
          const severity = MESSAGE_SEVERITY[type] ?? 'info';
          output[severity === 'warning' ? 'warn' : severity](`daemon: ${message}`);
          // A manual compaction reports itself once, in its own words.
          if (service.compactingNow()) return;
          if (notify(severity)) vsc.showMessage(severity, message);
        },
      });
    },
    {
      started: (rpc, methods) => {
        attached?.dispose();
        attached = service.attach(rpc, methods);
        failures.started();
        gauge.setDown(undefined);
        void panel?.controller.refresh();
      },
      stopped: (reason) => {
        output.error(reason.kind === 'failed' && reason.detail ? `${reason.message} (${reason.detail})` : reason.message);
        service.detach();
        gauge.setDown(reason);
        void panel?.controller.refresh();
        const notice = failures.stopped(reason);
        if (!notice) return;
        void ui.ask('error', notice.message, notice.actions).then((choice) => {
          if (choice === ACTIONS.install) void vsc.executeCommand(COMMANDS.install);
          if (choice === ACTIONS.setPath) void vsc.executeCommand(COMMANDS.setDaemonPath);
          if (choice === ACTIONS.showLog) output.show();
          if (choice === ACTIONS.restart) void daemon?.restart();
        });
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
  // The daemon takes a repository's risky settings only from a trusted workspace: tell it.
  track(vsc.onDidGrantTrust(() => restarts.schedule()));

  const openPanel = async (restored?: vsc.WebviewPanel) => {
    if (panel && !restored) {
      panel.reveal();
      await panel.controller.refresh();
      return;
    }
    const handle = vsc.createBreakdownPanel(restored);
    const controller = new BreakdownController(service, handle, () => gauge.where(), nonce, 150, () => gauge.stopped());
    const current = { controller, reveal: () => handle.reveal() };
    panel = current;
    handle.onDidDispose(() => {
      controller.dispose();
      if (panel === current) panel = undefined;
    });
    await controller.refresh();
  };
  const showUsage = () => openPanel();
  // After a window reload VS Code gives the tab back to draw again.
  track(vsc.registerBreakdownSerializer((restored) => openPanel(restored)));

  // The activity-bar view.
  const threads = new ThreadsModel(service, () => gauge.where());
  const snapshots = new SnapshotsModel(service, () => gauge.where());
  const compactions = new CompactionsModel(service, () => gauge.where());
  for (const [id, model] of [['ctxd.threads', threads], ['ctxd.snapshots', snapshots], ['ctxd.compactions', compactions]] as const) {
    track(model);
    track(vsc.registerTree(id, model));
  }
  track(vsc.registerVirtualDocuments());
  // Another client's threads and snapshots (a terminal agent, another editor): read again on return.
  track(vsc.onDidFocusWindow(() => [threads, snapshots, compactions].forEach((m) => m.refresh())));
  /** Pins `thread` (a pick in the Threads tree or Switch Thread); undefined only redraws. */
  const showThread = (workspace: string, thread: string | undefined) => {
    if (thread !== undefined) service.setActiveThread(thread, workspace);
    gauge.refresh();
    [threads, snapshots, compactions].forEach((m) => m.refresh());
    void panel?.controller.refresh();
  };
  const memory = new RestoreMemory();
  const restoreFromTree = (arg: unknown, conversation: boolean) => {
    const snap = snapshotOf(arg);
    if (snap) void restoreSnapshotFlow(ui, service, snap.id, conversation, where(), (undoId, both) => snapshots.setUndo(undoId, both), memory);
  };

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

  const commands: Record<string, (...args: any[]) => unknown> = {
    [COMMANDS.menu]: async () => {
      const w = gauge.where();
      const choice = await ui.pick(menuItems({ down: gauge.stopped(), supports: (m) => service.supports(m), thread: w?.thread }), {
        title: 'ctxd',
        placeHolder: w ? `${w.name} · thread ${w.thread}` : 'ctxd',
      });
      if (choice) await vsc.executeCommand(choice);
    },
    [COMMANDS.showUsage]: showUsage,
    // The tier notice asked for this: it goes before the compaction's own message comes.
    [COMMANDS.compact]: async () => (await closeTierNotice(), refuseFollowed() ? undefined : compactFlow(ui, service, where())),
    [COMMANDS.compactNow]: async () =>
      (await closeTierNotice(), refuseFollowed() ? undefined : compactFlow(ui, service, where(), 'auto')),
    [COMMANDS.snapshot]: () => snapshotFlow(ui, service, where()),
    [COMMANDS.restore]: () => restoreFlow(ui, service, where()),
    [COMMANDS.rollback]: () => rollbackFlow(ui, service, where(), memory),
    [COMMANDS.undoLast]: () => undoLastFlow(ui, service, where(), memory),
    [COMMANDS.undoOperation]: async (arg: unknown) => {
      const op = (arg as TreeNode | undefined)?.operation;
      const w = where();
      if (!op || !w) return;
      const snapshot = op.kind === 'restore' ? memory.recall(service.target(w), op.id) : undefined;
      await undoFlow(ui, service, { kind: op.kind, id: op.id, snapshot }, w, memory);
    },
    [COMMANDS.restart]: () => daemon?.restart(),
    [COMMANDS.showLog]: () => output.show(),
    [COMMANDS.setDaemonPath]: () => setPathFlow(waysOut),
    [COMMANDS.install]: () => installFlow(waysOut),
    [COMMANDS.switchThread]: async () => {
      const w = gauge.where();
      if (!w) return;
      const list = await service.listThreads(w.uri).catch(() => []);
      const nodes = list.map((t) => threadNode(t, w.uri, w.thread, Date.now()));
      const thread = await ui.pick(
        [
          { label: '$(sync) Follow the latest thread', description: service.isPinned(w.uri) ? '' : 'current', value: FOLLOW_LATEST },
          ...nodes.map((n, i) => ({ label: n.label, description: n.description, detail: list[i].thread, value: list[i].thread })),
        ],
        { title: 'ctxd: Switch Thread', placeHolder: 'Thread to show in the status bar' },
      );
      if (thread === FOLLOW_LATEST) {
        await service.clearActiveThread(w.uri);
        showThread(w.uri, undefined);
      } else if (thread) showThread(w.uri, thread);
    },
    [COMMANDS.showThread]: (workspace: string, thread: string) => showThread(workspace, thread),
    [COMMANDS.showSnapshotChanges]: (arg: unknown) => {
      const snap = snapshotOf(arg);
      const w = where();
      if (snap && w) void showChangesFlow(ui, service, snap.id, (file, id) => vsc.openSnapshotDiff(file, id, w.workspace), w);
    },
    [COMMANDS.restoreFiles]: (arg: unknown) => restoreFromTree(arg, false),
    [COMMANDS.restoreFilesAndConversation]: (arg: unknown) => restoreFromTree(arg, true),
    [COMMANDS.deleteSnapshot]: async (arg: unknown) => {
      const snap = snapshotOf(arg);
      if (snap) await deleteSnapshotFlow(ui, service, snap, where());
    },
    [COMMANDS.undoRestore]: async (arg: unknown, withConversation?: boolean) => {
      const args = typeof arg === 'string' ? [arg, withConversation] : ((arg as TreeNode)?.command?.arguments ?? []);
      const id = args[0] as string | undefined;
      if (id && (await undoRestoreFlow(ui, service, id, where(), args[1] === true))) snapshots.setUndo(undefined);
    },
    [COMMANDS.openArchived]: async (workspace: string, thread: string, compaction?: number) => {
      const history = await attempt(ui, 'Reading the archived items', () => service.getHistory({ workspace, thread, includeArchived: true }));
      if (!history) return;
      const archived = compaction === undefined ? history.items.filter((i) => i.archived === true) : archivedBy(history, compaction);
      const name = compaction === undefined ? thread : `${thread}-compaction-${compaction}`;
      await vsc.openReadOnly(`archived/${name}.json`, JSON.stringify(archived, null, 2), 'json');
    },
    [COMMANDS.showStatus]: async () => {
      const status = await attempt(ui, 'Reading the status', () => service.status());
      if (status) await vsc.openReadOnly('ctxd-status.md', statusMarkdown(status), 'markdown');
    },
    [COMMANDS.refreshViews]: () => [threads, snapshots, compactions].forEach((m) => m.refresh()),
  };
  for (const [id, run] of Object.entries(commands)) track(vsc.registerCommand(id, run));

  gauge.refresh();
  // Not awaited: activation must not wait for the daemon; API calls wait for it instead.
  void daemon.restart();
  return service.exports();
}

/** VS Code waits for this promise: the daemon gets its shutdown/exit before the window goes. */
export function deactivate(): Promise<void> | undefined {
  return running?.stop();
}
