/**
 * The time machine (protocol v3): every compaction, rollback and restore with the conversation is
 * an operation the user can undo. After each one the flows offer Undo; "Undo Last History
 * Operation" finds the thread's latest operation still in effect. A restore with the conversation
 * is undone by restoring its safety snapshot with the conversation (files and conversation come
 * back together), which only this window knows: it remembers the snapshot per operation.
 */
import type { CtxdService, TargetOptions } from './api';
import { type Ui, attempt } from './ui';
import { formatAge } from './age';
import { Method, type OperationRecord, type RestoreResult, type UndoResult } from './protocol';
import { formatTokens } from './numbers';
import { type ThreadFacts, threadFacts, threadPhrase } from './followed';

export const UNDO = 'Undo';
export const REDO = 'Redo';

export type OperationKind = OperationRecord['kind'];

/** An operation this window ran, as its Undo button needs it. */
export interface Done {
  kind: OperationKind;
  id: number;
  /** A restore with the conversation: its safety snapshot (`undoId`), restored to undo it. */
  snapshot?: string;
}

const KIND_WORDS: Record<OperationKind, string> = {
  compaction: 'compaction',
  rollback: 'rollback',
  restore: 'restore of the conversation',
  undo: 'undo',
};

export function kindWords(kind: OperationKind): string {
  return KIND_WORDS[kind] ?? kind;
}

function plural(n: number, one: string): string {
  return `${n} ${one}${n === 1 ? '' : 's'}`;
}

/** Safety snapshots of the restores with the conversation run in this window, by thread and operation. */
export class RestoreMemory {
  private readonly snapshots = new Map<string, string>();
  private key(t: TargetOptions, id: number): string {
    return `${t.workspace ?? ''}\u0000${t.thread ?? ''}\u0000${id}`;
  }
  remember(t: TargetOptions, id: number, snapshot: string): void {
    this.snapshots.set(this.key(t, id), snapshot);
  }
  recall(t: TargetOptions, id: number): string | undefined {
    return this.snapshots.get(this.key(t, id));
  }
}

/** The operation "Undo Last" undoes: the newest one still in effect that is not itself an undo. */
export function lastUndoable(ops: readonly OperationRecord[] | undefined): OperationRecord | undefined {
  for (let i = (ops?.length ?? 0) - 1; i >= 0; i--) {
    const op = ops![i];
    if (op.kind !== 'undo' && op.undoneBy === undefined) return op;
  }
  return undefined;
}

/** "48k → 6.1k tokens", or, when the figures were not recorded, how many items it took out. */
export function operationTokens(op: OperationRecord): string {
  if (op.tokensBefore !== null && op.tokensAfter !== null) return `${formatTokens(op.tokensBefore)} → ${formatTokens(op.tokensAfter)} tokens`;
  if (op.tokensBefore !== null) return `${formatTokens(op.tokensBefore)} → … tokens`;
  const out = op.itemsBefore - op.itemsAfter;
  return out >= 0 ? `${plural(out, 'item')} taken out` : `${plural(-out, 'item')} put back`;
}

/** "Compaction: 48k → 6.1k tokens" as the History tree and the confirmations say it (tokens, not items). */
export function operationLabel(op: OperationRecord): string {
  const kind = op.kind === 'restore' ? 'Restore' : op.kind[0].toUpperCase() + op.kind.slice(1);
  return `${kind}: ${operationTokens(op)}`;
}

/** "5 min ago · undone" */
export function operationDescription(op: OperationRecord, now: number): string {
  const parts = [formatAge(op.createdAt, now)];
  if (op.undoneBy !== undefined) parts.push('undone');
  return parts.join(' · ');
}

/** Runs the undo of `done`; says what came back and offers Redo. */
export async function undoFlow(
  ui: Ui,
  service: CtxdService,
  done: Done,
  target?: TargetOptions,
  memory?: RestoreMemory,
): Promise<UndoResult | RestoreResult | undefined> {
  if (done.snapshot) {
    const snapshot = done.snapshot;
    const result = await attempt(ui, 'Undo', () =>
      ui.progress('ctxd: undoing the restore…', () => service.restore(snapshot, { ...target, conversation: true })),
    );
    if (!result) return undefined;
    const files = `${plural(result.restored.length, 'file')} written, ${result.removed.length} removed`;
    const text =
      done.kind === 'undo'
        ? `Restore redone: the files and the conversation are back to the snapshot (${files}).`
        : `Restore undone: the files and the conversation are as they were before it (${files}).`;
    if (result.operationId !== undefined && result.undoId) {
      const redo: Done = { kind: 'undo', id: result.operationId, snapshot: result.undoId };
      memory?.remember(service.target(target), result.operationId, result.undoId);
      offer(ui, service, text, REDO, redo, target, memory);
    } else {
      ui.notify('info', text);
    }
    return result;
  }
  const result = await attempt(ui, 'Undo', () => service.undo(done.id, target));
  if (!result) return undefined;
  const what = done.kind === 'undo' ? 'Redone' : `${kindWords(done.kind)[0].toUpperCase()}${kindWords(done.kind).slice(1)} undone`;
  offer(ui, service, `${what}: ${formatTokens(result.usage.usedTokens)} tokens in use.`, REDO, { kind: 'undo', id: result.undoId }, target, memory);
  return result;
}

/** Shows `text` with one button (Undo or Redo) that undoes `done`. */
export function offer(ui: Ui, service: CtxdService, text: string, action: string, done: Done, target?: TargetOptions, memory?: RestoreMemory): Promise<void> {
  return ui.ask('info', text, [action]).then((choice) => {
    if (choice === action) void undoFlow(ui, service, done, target, memory);
  });
}

/** "Undo Last History Operation": the thread's latest operation in effect, after a confirmation. */
export async function undoLastFlow(
  ui: Ui,
  service: CtxdService,
  target?: TargetOptions,
  memory?: RestoreMemory,
  now: () => number = Date.now,
  facts?: ThreadFacts,
): Promise<UndoResult | RestoreResult | undefined> {
  // No folder, or a daemon that is not running, is said as such (not "update it"), never thrown.
  const t = await attempt(ui, 'Undo', async () => {
    const t = service.target(target);
    await service.ready();
    return t;
  });
  if (!t) return undefined;
  if (!service.supports(Method.undo)) {
    ui.notify('warning', 'This ctxd daemon cannot undo history operations: update it.');
    return undefined;
  }
  const history = await attempt(ui, 'Reading the history', () => service.getHistory({ ...t, includeArchived: true, limit: 0 }));
  if (!history) return undefined;
  const op = lastUndoable(history.operations);
  const phrase = threadPhrase(facts?.thread === t.thread ? facts : threadFacts(t.thread));
  if (!op) {
    ui.notify('info', `Nothing to undo in ${phrase}: no compaction, rollback or restore of the conversation is in effect.`);
    return undefined;
  }
  const snapshot = op.kind === 'restore' ? memory?.recall(t, op.id) : undefined;
  const back = op.kind === 'restore' && !snapshot ? ' Files stay as they are (Undo restore in the Snapshots view puts them back).' : '';
  const ok = await ui.confirm(
    `Undo the ${kindWords(op.kind)} of ${formatAge(op.createdAt, now())}?`,
    `The conversation of ${phrase} goes back to what it was before it${op.tokensBefore !== null ? ` (${formatTokens(op.tokensBefore)} tokens then)` : ''}; ` +
      `what was recorded since stays.${back}${snapshot ? ' The files go back too.' : ''} You can redo it.`,
    'Undo',
  );
  if (!ok) return undefined;
  return undoFlow(ui, service, { kind: op.kind, id: op.id, snapshot }, t, memory);
}

/** The rollback confirmation: what it removes, and a warning when it goes back past a compaction. */
export function rollbackQuestion(preview: { removedItems: number; crossesCompaction?: boolean; tokensAfter?: number }): { message: string; detail: string } {
  const after = preview.tokensAfter !== undefined ? `, leaving ${formatTokens(preview.tokensAfter)} tokens in use` : '';
  const removed = `${plural(preview.removedItems, 'item')} of the conversation are taken out${after}. Nothing is deleted: you can undo it.`;
  if (preview.crossesCompaction) {
    return {
      message: 'Roll back past a compaction?',
      detail:
        'This goes back past a compaction: the last turn was compacted, so the compaction is undone first (what it summarised comes back, ' +
        `its summary goes) and then the turn is removed. ${removed}`,
    };
  }
  return { message: 'Roll back the last turn?', detail: `The last user turn and everything after it are removed from the conversation: ${removed}` };
}
