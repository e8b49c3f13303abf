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
import { conversationDocument } from './conversation';
import { isFollowed, readOnlyText, threadLabel, threadName, threadPhrase } from './followed';
import type { Shown } from './gauge';
import type { DiffFile, GhostCommit } from './protocol';
import { type HooksRunner, hooksMarkdown, installHooksFlow, readHooksStatus } from './hooks';
import { menuItems } from './quickMenu';
import { type LiveSearch, searchHistoryFlow } from './recall';
import { deleteSnapshotFlow, restoreSnapshotFlow, showChangesFlow, undoRestoreFlow } from './snapshots';
import { statusMarkdown } from './statusReport';
import { type RestoreMemory, undoFlow, undoLastFlow } from './timeMachine';
import { noIcons, shortId } from './text';
import { type TreeNode, archivedBy, threadNode } from './trees';
import { type Ui, attempt } from './ui';
import { type WaysOutHost, installFlow, setPathFlow } from './waysOut';

/** The Switch Thread pick that unpins (no thread is named this: it is not a valid name). */
export const FOLLOW_LATEST = '\u0000follow';

export interface CommandHost {
  ui: Ui;
  service: CtxdService;
  /** The folder and thread the gauge shows. */
  shown(): Shown | undefined;
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
  /** Runs the daemon's `ctxd hooks …` command line. */
  hooks: HooksRunner;
  /** Shows the walkthrough (Install / Set path / Install hooks). */
  openWelcome(): unknown;
  /** Brings the History view forward. */
  focusHistory(): unknown;
  log(line: string): void;
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
  /** A followed session's conversation is its agent's: say what works rather than fail (true when refused). */
  const refuseFollowed = (): boolean => {
    const shown = h.shown();
    if (!shown || !isFollowed(shown)) return false;
    ui.notify('info', readOnlyText(shown));
    return true;
  };
  /** An Undo restore already asked for or done: a second click on the row or its icon does nothing. */
  const undoingRestores = new Set<string>();
  /** Pins `thread` (a pick in the Threads tree or Switch Thread); undefined only redraws. */
  const showThread = (workspace: string, thread: string | undefined) => {
    if (thread !== undefined) service.setActiveThread(thread, workspace);
    h.redraw();
  };
  const restoreFromTree = (arg: unknown, conversation: boolean) => {
    if (conversation && refuseFollowed()) return undefined;
    const snap = snapshotOf(arg);
    if (snap) return restoreSnapshotFlow(ui, service, snap.id, conversation, where(), (undoId, both) => h.setUndoRestore(undoId, both), memory);
  };

  return {
    [COMMANDS.menu]: async () => {
      const w = h.shown();
      const choice = await ui.pick(menuItems({ down: h.stopped(), supports: (m) => service.supports(m), thread: w }), {
        title: 'ctxd',
        placeHolder: w ? `${w.name} · ${threadLabel(w)}${isFollowed(w) ? ' (read-only)' : ''}` : 'ctxd',
      });
      if (choice) await h.execute(choice);
    },
    [COMMANDS.showUsage]: () => h.openBreakdown(),
    // The tier notice asked for this: it goes before the compaction's own message comes.
    [COMMANDS.compact]: async () => (await h.closeTierNotice(), refuseFollowed() ? undefined : compactFlow(ui, service, where())),
    [COMMANDS.compactNow]: async () => (await h.closeTierNotice(), refuseFollowed() ? undefined : compactFlow(ui, service, where(), 'auto')),
    [COMMANDS.snapshot]: () => snapshotFlow(ui, service, where()),
    // The menu's "Restore files…" of a followed session: its conversation is the agent's, so files only.
    [COMMANDS.restore]: () => restoreFlow(ui, service, where(), h.now, isFollowed(h.shown())),
    [COMMANDS.rollback]: () => (refuseFollowed() ? undefined : rollbackFlow(ui, service, where(), memory)),
    [COMMANDS.undoLast]: () => (refuseFollowed() ? undefined : undoLastFlow(ui, service, where(), memory, h.now, h.shown())),
    [COMMANDS.undoOperation]: async (arg: unknown) => {
      if (refuseFollowed()) return undefined;
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
          ...nodes.map((n, i) => ({ label: `$(${n.icon}) ${noIcons(n.label)}`, description: n.description, detail: list[i].model ?? undefined, value: list[i].thread })),
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
    // The row's click and its inline icon both land here: one confirmation, one undo, whatever is clicked.
    [COMMANDS.undoRestore]: async (arg: unknown, withConversation?: boolean) => {
      const args = typeof arg === 'string' ? [arg, withConversation] : ((arg as TreeNode)?.command?.arguments ?? []);
      const id = args[0] as string | undefined;
      if (!id || undoingRestores.has(id)) return undefined;
      undoingRestores.add(id);
      let undone = false;
      try {
        const conversation = args[1] === true;
        const ok = await ui.confirm(
          `Undo the restore (back to ${shortId(id)})?`,
          conversation
            ? 'The files and the conversation go back to how they were before the restore.'
            : 'The files go back to how they were before the restore; the conversation is kept.',
          'Undo Restore',
        );
        if (!ok) return undefined;
        undone = (await undoRestoreFlow(ui, service, id, where(), conversation)) !== undefined;
        if (undone) h.setUndoRestore(undefined);
        return undone;
      } finally {
        if (!undone) undoingRestores.delete(id);
      }
    },
    [COMMANDS.openArchived]: async (workspace: string, thread: string, compaction?: number) => {
      const history = await attempt(ui, 'Reading the archived items', () => service.getHistory({ workspace, thread, includeArchived: true }));
      if (!history) return;
      const archived = compaction === undefined ? history.items.filter((i) => i.archived === true) : archivedBy(history, compaction);
      const facts = service.threads.facts(workspace, thread);
      const op = compaction === undefined ? undefined : history.operations?.find((o) => o.id === compaction);
      const heading = op ? `What the ${op.kind === 'restore' ? 'restore' : op.kind} of ${threadPhrase(facts)} took out` : `Archived items of ${threadPhrase(facts)}`;
      const doc = conversationDocument(heading, archived, { source: facts.source ?? undefined, note: 'Read-only: the model no longer sees these items; ctxd keeps them (Undo in the History view puts them back).' });
      const name = `${threadName(facts, 40).replace(/[^\w.-]+/g, '_')}${compaction === undefined ? '' : `-${compaction}`}`;
      await h.openReadOnly(`archived/${name}.md`, doc, 'markdown');
    },
    [COMMANDS.showStatus]: async () => {
      const [status, hooks] = await Promise.all([attempt(ui, 'Reading the status', () => service.status()), readHooksStatus(h.hooks)]);
      if (status) await h.openReadOnly('ctxd-status.md', `${statusMarkdown(status)}\n${hooksMarkdown(hooks).join('\n')}\n`, 'markdown');
    },
    [COMMANDS.installHooks]: () =>
      installHooksFlow({ ui, run: h.hooks, openDiff: (diff) => h.openReadOnly('ctxd-hooks-install.diff', diff, 'diff'), log: h.log }),
    [COMMANDS.showHistory]: () => h.focusHistory(),
    [COMMANDS.welcome]: () => h.openWelcome(),
    [COMMANDS.searchHistory]: () =>
      searchHistoryFlow(ui, service, h.liveSearch, (name, content) => h.openReadOnly(name, content, 'markdown'), h.shown()?.uri, h.now),
    [COMMANDS.refreshViews]: () => h.refreshTrees(),
  };
}
