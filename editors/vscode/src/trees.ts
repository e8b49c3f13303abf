/**
 * The ctxd activity-bar view's three trees (Threads, Snapshots, Compactions) as plain node lists.
 * Each model knows how to fetch its nodes and when they change; vscodeapi.ts turns a model into a
 * TreeDataProvider. Free of `vscode`, tested against the real daemon.
 */
import type { CtxdService } from './api';
import { Emitter } from './emitter';
import { COMMANDS } from './commandIds';
import { formatAge, toMillis } from './age';
import { shortId } from './text';
import { Debouncer, type Shown } from './gauge';
import {
  type CompactedParams,
  type CompactionRecord,
  type Disposable,
  type GhostCommit,
  type HistoryResult,
  type Item,
  Method,
  type OperationRecord,
  type ThreadInfo,
} from './protocol';
import { formatTokens } from './numbers';
import { agentOf } from './agents';
import { costCents } from './breakdownView';
import { type ThreadFacts, isFollowed, readOnlyText, threadFacts, threadName } from './followed';
import { strategyText, usagePercent } from './status';
import { operationDescription, operationLabel } from './timeMachine';
import { friendlyError } from './errors';

export interface TreeNode {
  id: string;
  label: string;
  description?: string;
  tooltip?: string;
  /** A codicon id. */
  icon?: string;
  /** For the view's context menus (package.json `view/item/context`). */
  contextValue?: string;
  command?: { command: string; title: string; arguments: unknown[] };
  /** Shown under this node (the checkpoints of one turn), expanded unless `collapsed`. */
  children?: TreeNode[];
  collapsed?: boolean;
  /** A History row's operation (its Undo action reads it). */
  operation?: OperationRecord;
}

export interface TreeModel extends Disposable {
  /** The rows; a failed listing is one row that says so in plain words (`errorNode`), never a rejection. */
  nodes(): Promise<TreeNode[]>;
  readonly onDidChange: (listener: () => void) => Disposable;
}

type Where = () => Shown | undefined;

/** Fires (debounced) on the service events that can change a tree. */
abstract class BaseModel implements TreeModel {
  protected readonly changed = new Emitter<void>();
  private readonly debounce: Debouncer;
  protected readonly subs: Disposable[] = [];
  readonly onDidChange = (listener: () => void) => this.changed.event(listener);

  constructor(protected readonly service: CtxdService, protected readonly where: Where, debounceMs: number) {
    this.debounce = new Debouncer(debounceMs, () => this.changed.fire());
  }

  refresh(): void {
    this.debounce.schedule();
  }

  /** What listing this tree is, for the row a failure shows ("Listing threads failed: …"). */
  protected abstract readonly what: string;

  /** The rows, read from the daemon (may reject: `nodes` shows the failure as a row). */
  protected abstract read(): Promise<TreeNode[]>;

  async nodes(): Promise<TreeNode[]> {
    try {
      return await this.read();
    } catch (err) {
      return [errorNode(this.what, err)];
    }
  }

  dispose(): void {
    this.debounce.dispose();
    this.subs.forEach((s) => s.dispose());
    this.changed.dispose();
  }
}

/**
 * An empty view shows its welcome content (package.json `viewsWelcome`: Install, Take Snapshot,
 * Install Agent Hooks…), which VS Code draws only for a tree with no rows at all.
 */
const EMPTY: TreeNode[] = [];

/**
 * The one row a tree shows when its listing failed: the failure in one sentence for people
 * (errors.ts: what failed and what to do, never the raw JSON-RPC text); a click opens the ctxd
 * menu, where the way out is (Restart daemon, Show log, Install).
 */
export function errorNode(what: string, err: unknown): TreeNode {
  const text = friendlyError(what, err);
  return {
    id: 'error',
    label: text,
    tooltip: `${text}\nClick for the ctxd menu.`,
    icon: 'warning',
    contextValue: 'error',
    command: { command: COMMANDS.menu, title: 'Open the ctxd menu', arguments: [] },
  };
}

/** "$0.42" (whole cents, as the breakdown rounds them), or undefined when no price is known. */
export function costLabel(cost: ThreadInfo['cost']): string | undefined {
  if (!cost?.priced) return undefined;
  const cents = costCents(cost).total;
  return `$${(cents / 100).toFixed(2)}`;
}

export function threadNode(t: ThreadInfo, workspace: string, shown: string, now: number): TreeNode {
  const facts = threadFacts(t.thread, t);
  const agent = agentOf(t.source);
  const parts = [agent.name];
  if (t.usage) parts.push(`${usagePercent(t.usage)}% · ${formatTokens(t.usage.usedTokens)}`);
  const cost = costLabel(t.cost);
  if (cost) parts.push(cost);
  const when = t.lastActivity ?? t.updatedAt;
  if (when !== undefined) parts.push(formatAge(when, now));
  const isShown = t.thread === shown;
  const spent = t.cost && !t.cost.priced ? `\nCost: no price is known for ${t.model ?? 'its model'}.` : cost ? `\nCost so far: ${cost}.` : '';
  return {
    id: `thread:${t.thread}`,
    label: threadName(facts),
    description: parts.join(' · '),
    tooltip:
      `${agent.name}${t.model ? ` · ${t.model}` : ''} · ${t.itemCount} items${spent}` +
      (isFollowed(facts) ? `\n${readOnlyText(facts)}` : '') +
      (isShown ? '\nShown in the status bar.' : '\nClick to show it in the status bar.'),
    icon: isShown ? 'pass-filled' : agent.icon,
    contextValue: isFollowed(facts) ? 'thread.readOnly' : 'thread',
    command: { command: COMMANDS.showThread, title: 'Show in the status bar', arguments: [workspace, t.thread] },
  };
}

export class ThreadsModel extends BaseModel {
  constructor(service: CtxdService, where: Where, debounceMs = 300, private readonly now: () => number = Date.now) {
    super(service, where, debounceMs);
    this.subs.push(service.onDidChangeThreads(() => this.refresh()), service.onDidChangeUsage(() => this.refresh()));
  }

  protected readonly what = 'Listing threads';

  protected async read(): Promise<TreeNode[]> {
    const w = this.where();
    if (!w || !this.service.supports(Method.threads)) return EMPTY;
    const threads = await this.service.listThreads(w.uri);
    if (threads.length === 0) return EMPTY;
    const sorted = [...threads].sort((a, b) => toMillis(b.lastActivity ?? b.updatedAt) - toMillis(a.lastActivity ?? a.updatedAt));
    return sorted.map((t) => threadNode(t, w.uri, w.thread, this.now()));
  }
}

export class SnapshotsModel extends BaseModel {
  private undo: { id: string; workspace: string; conversation: boolean } | undefined;

  constructor(service: CtxdService, where: Where, debounceMs = 300, private readonly now: () => number = Date.now) {
    super(service, where, debounceMs);
    this.subs.push(
      service.onDidChangeThreads(() => this.refresh()),
      service.onDidChangeUsage(() => this.refresh()),
      service.onDidChangeSnapshots(() => this.refresh()),
    );
  }

  /** After a restore: offer its undo at the top of the tree. */
  setUndo(id: string | undefined, conversation = false): void {
    const w = this.where();
    this.undo = id && w ? { id, workspace: w.uri, conversation } : undefined;
    this.changed.fire();
  }

  protected readonly what = 'Listing snapshots';

  protected async read(): Promise<TreeNode[]> {
    const w = this.where();
    if (!w || !this.service.supports(Method.ghostList)) return EMPTY;
    const snapshots = await this.service.listSnapshots({ workspace: w.uri, thread: w.thread });
    const nodes: TreeNode[] = [];
    if (this.undo && this.undo.workspace === w.uri) {
      nodes.push({
        id: `undo:${this.undo.id}`,
        label: 'Undo restore',
        description: this.undo.conversation ? 'files and conversation, as before the restore' : 'files as before the restore',
        tooltip: 'Puts back what the last restore changed, after a confirmation.',
        icon: 'discard',
        contextValue: 'undoRestore',
        command: { command: COMMANDS.undoRestore, title: 'Undo restore', arguments: [this.undo.id, this.undo.conversation] },
      });
    }
    if (snapshots.length === 0) return nodes;
    // A followed session's conversation is its agent's: only its files can go back.
    return [
      ...nodes,
      ...snapshotTree(snapshots, this.now(), {
        contextValue: isFollowed(w) ? 'snapshot.filesOnly' : 'snapshot',
        threadName: (thread) => threadName(this.service.threads.facts(w.uri, thread)),
      }),
    ];
  }
}

/** What took a snapshot, in plain words (v3 `trigger`). */
export function triggerText(s: Pick<GhostCommit, 'trigger' | 'tool'>): string {
  switch (s.trigger) {
    case 'turn':
      return 'when the turn began';
    case 'tool':
      return s.tool ? `before ${s.tool.name} ran` : 'before a tool ran';
    case 'restore':
      return 'before a restore (its undo)';
    default:
      return 'taken by you';
  }
}

/** A checkpoint's own words: the hook's label, else what its tool or turn says. */
function checkpointLabel(s: GhostCommit, now: number): string {
  const message = s.message?.trim();
  if (message && !(s.trigger === 'turn' && s.turn && message === s.turn.text.trim())) return message;
  if (s.trigger === 'turn') return 'start of the turn';
  if (s.tool) return `before ${s.tool.name}${s.tool.paths?.length ? ` ${s.tool.paths.join(', ')}` : ''}`;
  return formatAge(s.createdAt, now);
}

/** How the Snapshots tree names things it does not hold itself. */
export interface SnapshotNaming {
  /** The row's context value: `snapshot`, or `snapshot.filesOnly` when the shown thread is an agent's (read-only). */
  contextValue?: string;
  /** A thread's name for people (its title), by its id. */
  threadName?: (thread: string) => string;
}

/** The restore a safety snapshot was taken before ("before restoring 2adb3c4d5e6f"): that snapshot, if listed. */
export function restoredBy(s: GhostCommit, all: readonly GhostCommit[]): GhostCommit | undefined {
  if (s.trigger !== 'restore') return undefined;
  const prefix = /^before restoring ([0-9a-f]{4,40})\b/.exec(s.message?.trim() ?? '')?.[1];
  return prefix ? all.find((o) => o.id !== s.id && o.id.startsWith(prefix)) : undefined;
}

/** A snapshot's name: the hook's or the user's words, else what its tool or turn says, else its age. */
function snapshotLabel(s: GhostCommit, now: number): string {
  return s.turn ? checkpointLabel(s, now) : s.message?.trim() || formatAge(s.createdAt, now);
}

export function snapshotNode(s: GhostCommit, now: number, naming: SnapshotNaming = {}, restored?: GhostCommit): TreeNode {
  // A safety snapshot is named by what was restored, never by a hash.
  const label = s.trigger === 'restore' ? `before restoring “${restored ? snapshotLabel(restored, now) : 'a snapshot'}”` : snapshotLabel(s, now);
  const by = s.trigger && s.trigger !== 'manual' && s.trigger !== 'restore' ? `${triggerText(s)} · ` : '';
  const turn = s.turn ? `\nTurn ${s.turn.index}: ${s.turn.text}` : '';
  const tool = s.tool?.paths?.length ? `\n${s.tool.name}: ${s.tool.paths.join(', ')}` : '';
  const thread = s.thread ? `\n${naming.threadName?.(s.thread) ?? threadName(threadFacts(s.thread))}` : '';
  return {
    id: `snapshot:${s.id}`,
    label,
    description: `${by}${formatAge(s.createdAt, now)} · ${s.fileCount} files`,
    tooltip:
      `${s.createdAt ? new Date(toMillis(s.createdAt)).toLocaleString() : 'time unknown'} · ${triggerText(s)}${turn}${tool}\n` +
      `${s.fileCount} files${s.skipped?.length ? `, ${s.skipped.length} skipped` : ''}${thread}\nSnapshot ${shortId(s.id)}`,
    icon: s.trigger === 'tool' ? 'tools' : s.trigger === 'turn' ? 'comment' : s.trigger === 'restore' ? 'discard' : 'device-camera',
    contextValue: naming.contextValue ?? 'snapshot',
    command: { command: COMMANDS.showSnapshotChanges, title: 'Show changes', arguments: [s] },
  };
}

/**
 * The Snapshots tree: snapshots newest first, except that the checkpoints of one agent turn (v3
 * `turn`) sit under one "Turn 3: fix the tests" node, in the order they were taken, where the
 * turn's newest checkpoint would be; a restore's safety snapshot sits under the turn of the
 * snapshot it restored, and those of no turn under one collapsed "Safety snapshots" node, so that
 * they do not pile up at the top.
 */
export function snapshotTree(snapshots: readonly GhostCommit[], now: number, naming: SnapshotNaming = {}): TreeNode[] {
  const sorted = [...snapshots].sort((a, b) => toMillis(b.createdAt) - toMillis(a.createdAt));
  const nodes: TreeNode[] = [];
  const turns = new Map<string, { node: TreeNode; members: GhostCommit[]; thread: string | null | undefined; text: string }>();
  let safety: { node: TreeNode; members: GhostCommit[] } | undefined;
  for (const s of sorted) {
    const restored = restoredBy(s, sorted);
    const owner = s.turn ? s : restored?.turn ? restored : undefined;
    if (owner?.turn) {
      const key = `${owner.thread ?? ''}\u0000${owner.turn.index}`;
      let group = turns.get(key);
      if (!group) {
        const text = owner.turn.text.replace(/\s+/g, ' ').trim();
        group = {
          node: { id: `turn:${owner.thread ?? ''}:${owner.turn.index}`, label: `Turn ${owner.turn.index}: ${text || '(no words)'}`, icon: 'comment-discussion', children: [] },
          members: [],
          thread: owner.thread,
          text: owner.turn.text,
        };
        turns.set(key, group);
        nodes.push(group.node);
      }
      group.members.push(s);
    } else if (s.trigger === 'restore') {
      if (!safety) {
        safety = { node: { id: 'safety', label: 'Safety snapshots', icon: 'discard', collapsed: true, children: [] }, members: [] };
        nodes.push(safety.node);
      }
      safety.members.push(s);
    } else {
      nodes.push(snapshotNode(s, now, naming));
    }
  }
  const child = (m: GhostCommit) => snapshotNode(m, now, naming, restoredBy(m, sorted));
  for (const group of turns.values()) {
    const { node, members, thread } = group;
    members.reverse(); // oldest first: the turn as it happened
    node.children = members.map(child);
    const checkpoints = members.filter((m) => m.trigger !== 'restore').length;
    const safe = members.length - checkpoints;
    const name = thread ? (naming.threadName?.(thread) ?? threadName(threadFacts(thread))) : undefined;
    node.description =
      `${checkpoints} checkpoint${checkpoints === 1 ? '' : 's'}${safe ? `, ${safe} safety` : ''} · ${formatAge(members.at(-1)!.createdAt, now)}` + (name ? ` · ${name}` : '');
    node.tooltip = `${group.text}\nCheckpoints taken during this turn${name ? ` of ${name}` : ''}; each restores the files as they were then.`;
  }
  if (safety) {
    safety.node.children = safety.members.map(child);
    safety.node.description = `${safety.members.length} · the files as they were before each restore`;
    safety.node.tooltip = 'Each restore first takes one, so that it can be undone: restoring one puts the files back as they were before that restore.';
  }
  return nodes;
}

/** A compaction seen on the wire while this window is open (what an older daemon leaves us). */
export interface SeenCompaction extends CompactedParams {
  at: number;
}

/** `before → after tokens`, or what is known of a compaction when its figures were not recorded. */
export function compactionLabel(c: Pick<CompactionRecord, 'tokensBefore' | 'tokensAfter' | 'archivedItems'>): string {
  if (c.tokensBefore !== null && c.tokensAfter !== null) return `${formatTokens(c.tokensBefore)} → ${formatTokens(c.tokensAfter)} tokens`;
  // An agent's compaction: the fill after it is known once the agent reports again.
  if (c.tokensBefore !== null) return `${formatTokens(c.tokensBefore)} → … tokens`;
  return `${c.archivedItems} items replaced`;
}

/**
 * The items compaction `id` replaced: those a protocol 3 daemon marks `archivedBy` it (rollbacks,
 * restores and undos archive items too); from an older daemon, the archived items in order, each
 * compaction's `archivedItems` in turn.
 */
export function archivedBy(history: HistoryResult, id: number): Item[] {
  const archived = history.items.filter((i) => i.archived === true);
  if (archived.some((i) => typeof i.archivedBy === 'number')) return archived.filter((i) => i.archivedBy === id);
  let start = 0;
  for (const c of history.compactions ?? []) {
    if (c.id === id) return archived.slice(start, start + c.archivedItems);
    start += c.archivedItems;
  }
  return [];
}

/**
 * The shown thread's compactions, newest first: every past one from `ctxd/history`'s
 * `compactions` (protocol v2), else those seen while this window is open. Each opens the items it
 * replaced, read-only.
 */
export class CompactionsModel extends BaseModel {
  private readonly seen: SeenCompaction[] = [];
  /** The workspace and thread last listed, and its history version: a usage change redraws when either moved. */
  private listed: string | undefined;
  private listedVersion: number | undefined;

  constructor(service: CtxdService, where: Where, debounceMs = 100, private readonly now: () => number = Date.now) {
    super(service, where, debounceMs);
    this.subs.push(
      service.onDidCompact((e) => {
        this.seen.unshift({ ...e, at: this.now() });
        this.refresh();
      }),
      service.onDidChangeThreads(() => this.refresh()),
      service.onDidChangeUsage((e) => {
        const mine = this.shown() === `${e.workspace}\n${e.thread}`;
        if (this.shown() !== this.listed || (mine && e.historyVersion !== this.listedVersion)) this.refresh();
      }),
    );
  }

  private shown(): string | undefined {
    const w = this.where();
    return w && `${w.uri}\n${w.thread}`;
  }

  protected readonly what = 'Reading the history';

  protected async read(): Promise<TreeNode[]> {
    const w = this.where();
    this.listed = this.shown();
    if (!w || !this.service.supports(Method.history)) return EMPTY;
    // limit 0: the compactions only, not the items.
    const history = await this.service.getHistory({ workspace: w.uri, thread: w.thread, includeArchived: true, limit: 0 });
    this.listedVersion = history.historyVersion;
    if (history.operations) return operationNodes(history, w.uri, w, this.now());
    if (history.compactions) {
      if (history.compactions.length === 0) return EMPTY;
      return [...history.compactions].reverse().map((c) => ({
        id: `compaction:${w.uri}:${w.thread}:${c.id}`,
        label: compactionLabel(c),
        description: [strategyText(c.strategy), c.automatic ? 'automatic' : '', formatAge(c.createdAt, this.now())].filter(Boolean).join(' · '),
        tooltip: `${c.archivedItems} items replaced by ${c.writtenItems}.\nClick to open the items this compaction replaced (read-only).`,
        icon: 'fold',
        contextValue: 'compaction',
        command: { command: COMMANDS.openArchived, title: 'Open archived items', arguments: [w.uri, w.thread, c.id] },
      }));
    }
    const mine = this.seen.filter((c) => c.workspace === w.uri);
    if (mine.length === 0) return EMPTY;
    return mine.map((c, i) => ({
      id: `compaction:${i}:${c.at}`,
      label: `${formatTokens(c.tokensBefore)} → ${formatTokens(c.tokensAfter)} tokens`,
      description: `${c.thread} · ${strategyText(c.strategy)} · ${formatAge(c.at, this.now())}`,
      tooltip: 'Click to open the items this compaction replaced (read-only).',
      icon: 'fold',
      contextValue: 'compaction',
      command: { command: COMMANDS.openArchived, title: 'Open archived items', arguments: [c.workspace, c.thread] },
    }));
  }
}

/**
 * (v3) The History tree: every operation of the thread, newest first (kind, items before → after,
 * tokens, when, undone or not). One still in effect offers Undo; a click opens what it took out.
 */
export function operationNodes(history: HistoryResult, workspace: string, shown: string | ThreadFacts, now: number): TreeNode[] {
  const facts = typeof shown === 'string' ? threadFacts(shown) : shown;
  const thread = facts.thread;
  const followed = isFollowed(facts);
  const ops = history.operations ?? [];
  if (ops.length === 0) return EMPTY;
  const compactions = new Map((history.compactions ?? []).map((c) => [c.id, c]));
  return [...ops].reverse().map((op) => {
    const c = compactions.get(op.id);
    const how = c ? `${strategyText(c.strategy)}${c.automatic ? ', automatic' : ''} · ` : '';
    const undone = op.undoneBy !== undefined;
    return {
      id: `operation:${workspace}:${thread}:${op.id}`,
      label: operationLabel(op),
      description: how + operationDescription(op, now),
      tooltip:
        `${operationLabel(op)} (${op.itemsBefore} → ${op.itemsAfter} items)` +
        (undone
          ? '\nUndone.'
          : op.kind === 'undo'
            ? ''
            : followed
              ? `\n${readOnlyText(facts)}`
              : '\nIn effect: Undo puts back the history it replaced.') +
        '\nClick to open what it took out of the conversation (read-only).',
      icon: undone ? 'circle-slash' : OPERATION_ICONS[op.kind],
      // A followed session's history is its agent's: no Undo on it.
      contextValue: undone ? 'operation.undone' : followed ? 'operation.readOnly' : 'operation',
      command: { command: COMMANDS.openArchived, title: 'Open archived items', arguments: [workspace, thread, op.id] },
      operation: op,
    };
  });
}

const OPERATION_ICONS: Record<string, string> = { compaction: 'fold', rollback: 'discard', restore: 'history', undo: 'redo' };
