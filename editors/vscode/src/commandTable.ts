/**
 * What each registered command does, over a small host (dialogs, the views, the editor's own
 * documents), so extension.ts only registers them and the tests run them against the real daemon.
 * The flows themselves live in commands.ts, snapshots.ts, timeMachine.ts, recall.ts and waysOut.ts;
 * this table picks the thread they act on and passes what the tree nodes carry.
 */
import type { CtxdService } from './api';
import { COMMANDS } from './commandIds';
import { compactFlow, restoreFlow, rollbackFlow, snapshotFlow } from './commands';
import type { StopReason } from './daemon';
import { isFollowed, readOnlyText } from './followed';
import type { FolderInfo } from './gauge';
import type { DiffFile, GhostCommit } from './protocol';
import { menuItems } from './quickMenu';
import { type LiveSearch, searchHistoryFlow } from './recall';
import { deleteSnapshotFlow, restoreSnapshotFlow, showChangesFlow, undoRestoreFlow } from './snapshots';
import { statusMarkdown } from './statusReport';
import { type RestoreMemory, undoFlow, undoLastFlow } from './timeMachine';
import { type TreeNode, archivedBy, threadNode } from './trees';
import { type Ui, attempt } from './ui';
import { type WaysOutHost, installFlow, setPathFlow } from './waysOut';

/** The Switch Thread pick that unpins (no thread is named this: it is not a valid name). */
export const FOLLOW_LATEST = '\u0000follow';

export interface CommandHost {
  ui: Ui;
  service: CtxdService;
  /** The folder and thread the gauge shows. */
  shown(): (FolderInfo & { thread: string }) | undefined;
  /** Why the daemon is not running, or undefined while it runs. */
  stopped(): StopReason | undefined;
  memory: RestoreMemory;
  /** Redraws the gauge, the trees and the breakdown (another thread is shown). */
  redraw(): void;
  /** Lists the trees again. */
  refreshTrees(): void;
  /** The Snapshots tree's "Undo restore" row. */
  setUndoRestore(undoId: string | undefined, conversation?: boolean): void;
  openBreakdown(): Promise<void>;
  /** Hides an open tier notice (the compaction it asked for reports itself). */
  closeTierNotice(): Promise<void>;
  execute(command: string): unknown;
  restart(): unknown;
  showLog(): void;
  waysOut: WaysOutHost;
  liveSearch: LiveSearch;
  openReadOnly(name: string, content: string, language: string): Promise<void>;
  openSnapshotDiff(file: DiffFile, snapshotId: string, workspace: string): Promise<void>;
  now(): number;
}

/** A snapshot from a Snapshots tree node (context menus pass the node) or the snapshot itself. */
export function snapshotOf(arg: unknown): GhostCommit | undefined {
  const a = arg as (GhostCommit & TreeNode) | undefined;
  if (a && typeof a.fileCount === 'number') return a;
  return a?.command?.arguments?.[0] as GhostCommit | undefined;
}

export type CommandTable = Record<string, (...args: any[]) => unknown>;

export function commandTable(h: CommandHost): CommandTable {
  const { ui, service, memory } = h;
  const where = () => {
    const w = h.shown();
    return w ? { workspace: w.uri, thread: w.thread } : undefined;
  };
  /** A followed thread is compacted by its agent: say so rather than fail (true when refused). */
  const refuseFollowed = (): boolean => {
    const thread = h.shown()?.thread;
    if (!isFollowed(thread)) return false;
    ui.notify('info', readOnlyText(thread as string));
    return true;
  };
  /** Pins `thread` (a pick in the Threads tree or Switch Thread); undefined only redraws. */
  const showThread = (workspace: string, thread: string | undefined) => {
    if (thread !== undefined) service.setActiveThread(thread, workspace);
    h.redraw();
  };
  const restoreFromTree = (arg: unknown, conversation: boolean) => {
    const snap = snapshotOf(arg);
    if (snap) return restoreSnapshotFlow(ui, service, snap.id, conversation, where(), (undoId, both) => h.setUndoRestore(undoId, both), memory);
  };

  return {
    [COMMANDS.menu]: async () => {
      const w = h.shown();
      const choice = await ui.pick(menuItems({ down: h.stopped(), supports: (m) => service.supports(m), thread: w?.thread }), {
        title: 'ctxd',
        placeHolder: w ? `${w.name} · thread ${w.thread}` : 'ctxd',
      });
      if (choice) await h.execute(choice);
    },
    [COMMANDS.showUsage]: () => h.openBreakdown(),
    // The tier notice asked for this: it goes before the compaction's own message comes.
    [COMMANDS.compact]: async () => (await h.closeTierNotice(), refuseFollowed() ? undefined : compactFlow(ui, service, where())),
    [COMMANDS.compactNow]: async () => (await h.closeTierNotice(), refuseFollowed() ? undefined : compactFlow(ui, service, where(), 'auto')),
    [COMMANDS.snapshot]: () => snapshotFlow(ui, service, where()),
    [COMMANDS.restore]: () => restoreFlow(ui, service, where()),
    [COMMANDS.rollback]: () => rollbackFlow(ui, service, where(), memory),
    [COMMANDS.undoLast]: () => undoLastFlow(ui, service, where(), memory),
    [COMMANDS.undoOperation]: async (arg: unknown) => {
      const op = (arg as TreeNode | undefined)?.operation;
      const w = where();
      if (!op || !w) return undefined;
      const snapshot = op.kind === 'restore' ? memory.recall(service.target(w), op.id) : undefined;
      return undoFlow(ui, service, { kind: op.kind, id: op.id, snapshot }, w, memory);
    },
    [COMMANDS.restart]: () => h.restart(),
    [COMMANDS.showLog]: () => h.showLog(),
    [COMMANDS.setDaemonPath]: () => setPathFlow(h.waysOut),
    [COMMANDS.install]: () => installFlow(h.waysOut),
    [COMMANDS.switchThread]: async () => {
      const w = h.shown();
      if (!w) return;
      const list = await service.listThreads(w.uri).catch(() => []);
      const nodes = list.map((t) => threadNode(t, w.uri, w.thread, h.now()));
      const thread = await ui.pick(
        [
          { label: '$(sync) Follow the latest thread', description: service.threads.isPinned(w.uri) ? '' : 'current', value: FOLLOW_LATEST },
          ...nodes.map((n, i) => ({ label: n.label, description: n.description, detail: list[i].thread, value: list[i].thread })),
        ],
        { title: 'ctxd: Switch Thread', placeHolder: 'Thread to show in the status bar' },
      );
      if (thread === FOLLOW_LATEST) {
        await service.threads.unpin(w.uri);
        showThread(w.uri, undefined);
      } else if (thread) showThread(w.uri, thread);
    },
    [COMMANDS.showThread]: (workspace: string, thread: string) => showThread(workspace, thread),
    [COMMANDS.showSnapshotChanges]: (arg: unknown) => {
      const snap = snapshotOf(arg);
      const w = where();
      if (snap && w) return showChangesFlow(ui, service, snap.id, (file, id) => h.openSnapshotDiff(file, id, w.workspace), w);
    },
    [COMMANDS.restoreFiles]: (arg: unknown) => restoreFromTree(arg, false),
    [COMMANDS.restoreFilesAndConversation]: (arg: unknown) => restoreFromTree(arg, true),
    [COMMANDS.deleteSnapshot]: async (arg: unknown) => {
      const snap = snapshotOf(arg);
      if (snap) return deleteSnapshotFlow(ui, service, snap, where());
    },
    [COMMANDS.undoRestore]: async (arg: unknown, withConversation?: boolean) => {
      const args = typeof arg === 'string' ? [arg, withConversation] : ((arg as TreeNode)?.command?.arguments ?? []);
      const id = args[0] as string | undefined;
      if (id && (await undoRestoreFlow(ui, service, id, where(), args[1] === true))) h.setUndoRestore(undefined);
    },
    [COMMANDS.openArchived]: async (workspace: string, thread: string, compaction?: number) => {
      const history = await attempt(ui, 'Reading the archived items', () => service.getHistory({ workspace, thread, includeArchived: true }));
      if (!history) return;
      const archived = compaction === undefined ? history.items.filter((i) => i.archived === true) : archivedBy(history, compaction);
      const name = compaction === undefined ? thread : `${thread}-compaction-${compaction}`;
      await h.openReadOnly(`archived/${name}.json`, JSON.stringify(archived, null, 2), 'json');
    },
    [COMMANDS.showStatus]: async () => {
      const status = await attempt(ui, 'Reading the status', () => service.status());
      if (status) await h.openReadOnly('ctxd-status.md', statusMarkdown(status), 'markdown');
    },
    [COMMANDS.searchHistory]: () =>
      searchHistoryFlow(ui, service, h.liveSearch, (name, content) => h.openReadOnly(name, content, 'markdown'), h.shown()?.uri, h.now),
    [COMMANDS.refreshViews]: () => h.refreshTrees(),
  };
}
