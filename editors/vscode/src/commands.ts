/**
 * The palette commands as flows over a small `Ui` interface, so each flow (pick, confirm, run with
 * progress, report) is tested against the real daemon with a scripted Ui. Every flow returns what
 * it did, or undefined when the user cancelled or it failed (the failure is shown, not thrown).
 */
import type { CtxdApi, CtxdService, TargetOptions } from './api';
import { formatAge, toMillis } from './age';
import { type PickItem, type Ui, attempt } from './ui';
import { shortId } from './text';
import { type CompactResult, type CompactStrategy, type GhostCommit, Method, type RestoreResult, type RollbackResult } from './protocol';
import { restoreSnapshotFlow } from './snapshots';
import { formatTokens } from './numbers';
import { strategyText } from './status';
import { type RestoreMemory, UNDO, offer, rollbackQuestion } from './timeMachine';
import { isFollowed, readOnlyText } from './followed';

export const STRATEGY_ITEMS: PickItem<CompactStrategy>[] = [
  { label: 'Auto', description: 'auto', detail: 'Let ctxd choose: an LLM summary when a model is configured, else offline', value: 'auto' },
  { label: 'LLM summary', description: 'llm', detail: 'Summarise the conversation with the configured LLM endpoint', value: 'llm' },
  { label: 'Remote', description: 'remote', detail: "Use the model API's own compaction endpoint", value: 'remote' },
  { label: 'Offline', description: 'offline', detail: 'Keep recent turns and trim the rest, without a model', value: 'offline' },
];

/** Compacts the thread; without `chosen`, the user picks the strategy first. One message either way. */
export async function compactFlow(
  ui: Ui,
  api: CtxdApi | CtxdService,
  target?: TargetOptions,
  chosen?: CompactStrategy,
): Promise<CompactResult | undefined> {
  const strategy = chosen ?? (await ui.pick(STRATEGY_ITEMS, { title: 'ctxd: Compact Conversation', placeHolder: 'How to compact' }));
  if (!strategy) return undefined;
  const result = await attempt(ui, 'Compaction', () =>
    ui.progress('ctxd: compacting the conversation…', () => api.compact({ ...target, strategy })),
  );
  if (result) {
    const text =
      `Compacted ${formatTokens(result.tokensBefore)} → ${formatTokens(result.tokensAfter)} tokens (${strategyText(result.strategy)}). ` +
      'Every compaction drops detail: start a new thread when the task allows.';
    // v3: the compaction is an operation; its message offers to undo it.
    if (result.undoId !== undefined && 'undo' in api) void offer(ui, api, text, UNDO, { kind: 'compaction', id: result.undoId }, target);
    else ui.notify('info', text);
  }
  return result;
}

export async function snapshotFlow(ui: Ui, api: CtxdApi, target?: TargetOptions): Promise<GhostCommit | undefined> {
  const message = await ui.input({
    title: 'ctxd: Take Snapshot',
    prompt: 'A note for this snapshot (optional)',
    placeHolder: 'e.g. before refactoring the parser',
  });
  if (message === undefined) return undefined;
  const commit = await attempt(ui, 'Snapshot', () =>
    ui.progress('ctxd: taking a snapshot of the working tree…', () =>
      api.snapshot({ ...target, ...(message.trim() ? { message: message.trim() } : {}) }),
    ),
  );
  if (commit) {
    ui.notify('info', `Snapshot ${shortId(commit.id)} taken: ${commit.fileCount} files.`);
    if (commit.skipped?.length) {
      ui.notify('warning', `Snapshot ${shortId(commit.id)} skipped ${commit.skipped.length} files: ${commit.skipped.map((s) => s.path).slice(0, 5).join(', ')}`);
    }
  }
  return commit;
}

export type RestoreMode = 'files' | 'conversation';

export const RESTORE_MODE_ITEMS: PickItem<RestoreMode>[] = [
  { label: 'Files only', detail: 'Put the working tree back as it was; keep the conversation', value: 'files' },
  { label: 'Files and conversation', detail: 'Also roll the conversation back to the snapshot', value: 'conversation' },
];

/** The quick-pick entries for snapshots, newest first, labelled with message and age. */
export function snapshotItems(snapshots: GhostCommit[], now: number): PickItem<GhostCommit>[] {
  return [...snapshots]
    .sort((a, b) => toMillis(b.createdAt) - toMillis(a.createdAt))
    .map((s) => ({
      // An agent's checkpoint (v3) says its turn and what took it.
      label: s.turn
        ? `Turn ${s.turn.index}: ${s.turn.text.replace(/\s+/g, ' ').slice(0, 40)} › ${s.trigger === 'turn' ? 'start of the turn' : s.message?.trim() || `before ${s.tool?.name ?? 'a tool'}`}`
        : s.message?.trim() || '(no message)',
      description: `${shortId(s.id)} · ${formatAge(s.createdAt, now)}`,
      detail: `${s.fileCount} files`,
      value: s,
    }));
}

/** `filesOnly`: the thread is a followed session (its conversation is its agent's): only its files can go back. */
export async function restoreFlow(
  ui: Ui,
  service: CtxdService,
  target?: TargetOptions,
  now: () => number = Date.now,
  filesOnly = false,
): Promise<RestoreResult | undefined> {
  const snapshots = await attempt(ui, 'Listing snapshots', () => service.listSnapshots(target));
  if (!snapshots) return undefined;
  if (snapshots.length === 0) {
    ui.notify('info', 'No snapshots yet. Run "ctxd: Take Snapshot" first.');
    return undefined;
  }
  const snap = await ui.pick(snapshotItems(snapshots, now()), {
    title: 'ctxd: Restore Snapshot',
    placeHolder: 'Snapshot to restore (newest first)',
  });
  if (!snap) return undefined;
  const mode = filesOnly ? 'files' : await ui.pick(RESTORE_MODE_ITEMS, { title: `ctxd: Restore ${shortId(snap.id)}`, placeHolder: 'What to restore' });
  if (!mode) return undefined;
  return restoreSnapshotFlow(ui, service, snap.id, mode === 'conversation', target);
}

/**
 * Rolls back the last turn. What can be known before asking is checked first, so that the user
 * never confirms a rollback that cannot run: a folder and its thread, a running daemon, a thread
 * that is not an agent's (read-only). A v3 daemon is then asked (`dryRun`) what it would remove
 * and whether it goes back past a compaction, the confirmation says so, and the result offers Undo.
 */
export async function rollbackFlow(ui: Ui, service: CtxdService, target?: TargetOptions, memory?: RestoreMemory): Promise<RollbackResult | undefined> {
  // No folder, or a daemon that is not running, is said as such (errors.ts), never thrown.
  const t = await attempt(ui, 'Rollback', async () => {
    const t = service.target(target);
    await service.ready();
    return t;
  });
  if (!t) return undefined;
  // A followed session's conversation is its agent's (its listing says readOnly): say what works instead.
  const facts = service.threads.facts(t.workspace, t.thread);
  if (isFollowed(facts)) {
    ui.notify('info', readOnlyText(facts));
    return undefined;
  }
  let question = { message: 'Roll back the last turn?', detail: 'The last user turn and everything after it are removed from the conversation.' };
  if (service.supports(Method.undo)) {
    const preview = await attempt(ui, 'Previewing the rollback', () => service.rollback(1, { ...t, dryRun: true }));
    if (!preview) return undefined;
    if (preview.removedItems === 0) {
      ui.notify('info', 'Nothing to roll back: the conversation has no user turn.');
      return undefined;
    }
    question = rollbackQuestion(preview);
  }
  if (!(await ui.confirm(question.message, question.detail, 'Roll Back'))) return undefined;
  const result = await attempt(ui, 'Rollback', () => service.rollback(1, t));
  if (result) {
    const text =
      `Rolled back the last turn${result.crossesCompaction ? ' and the compaction it went past' : ''}: ` +
      `${result.removedItems} items removed, ${formatTokens(result.usage.usedTokens)} tokens in use.`;
    if (result.undoId !== undefined) void offer(ui, service, text, UNDO, { kind: 'rollback', id: result.undoId }, t, memory);
    else ui.notify('info', text);
  }
  return result;
}

