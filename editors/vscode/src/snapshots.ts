/**
 * Snapshot actions as flows over the `Ui` (tested against the real daemon): restore (files, or
 * files and conversation) with a preview of what it will write and remove, undo of the last
 * restore, delete, and picking a changed file to diff. Opening VS Code's diff editor is passed in.
 */
import type { CtxdService, TargetOptions } from './api';
import { type PickItem, type Ui, attempt } from './ui';
import { shortId } from './text';
import { type DiffFile, type GhostCommit, Method, type RestoreResult } from './protocol';
import type { RestoreMemory } from './timeMachine';

export const UNDO_RESTORE = 'Undo restore';

function plural(n: number, one: string): string {
  return `${n} ${one}${n === 1 ? '' : 's'}`;
}

/** Restores snapshot `id` after a confirmation that says what will change; offers Undo after. */
export async function restoreSnapshotFlow(
  ui: Ui,
  service: CtxdService,
  id: string,
  conversation: boolean,
  target?: TargetOptions,
  onUndoable: (undoId: string | undefined, conversation: boolean) => void = () => undefined,
  memory?: RestoreMemory,
): Promise<RestoreResult | undefined> {
  let detail = conversation
    ? 'Files in the working tree and the conversation go back to this snapshot.'
    : 'Files in the working tree go back to this snapshot; the conversation is kept.';
  if (service.supports(Method.ghostDiff)) {
    const preview = await attempt(ui, 'Previewing the restore', () => service.restore(id, { ...target, conversation, dryRun: true }));
    if (!preview) return undefined;
    detail += ` ${plural(preview.restored.length, 'file')} will be written and ${plural(preview.removed.length, 'file')} removed; you can undo it.`;
  }
  if (!(await ui.confirm(`Restore snapshot ${shortId(id)}?`, detail, 'Restore'))) return undefined;
  const result = await attempt(ui, 'Restore', () =>
    ui.progress(`ctxd: restoring ${shortId(id)}…`, () => service.restore(id, { ...target, conversation })),
  );
  if (!result) return undefined;
  let text = `Restored ${shortId(result.id)}: ${plural(result.restored.length, 'file')} restored, ${result.removed.length} removed`;
  if (conversation) text += `, ${plural(result.removedItems ?? 0, 'conversation item')} dropped`;
  if (result.undoId) {
    const undoId = result.undoId;
    // v3: with the conversation, the restore is a history operation; restoring its safety
    // snapshot with the conversation undoes both (the files and the conversation).
    const both = conversation && result.operationId !== undefined;
    if (both) memory?.remember(service.target(target), result.operationId!, undoId);
    onUndoable(undoId, both);
    void ui.ask('info', `${text}.`, [UNDO_RESTORE]).then((choice) => {
      if (choice !== UNDO_RESTORE) return;
      void undoRestoreFlow(ui, service, undoId, target, both).then((undone) => undone && onUndoable(undefined, false));
    });
  } else {
    ui.notify('info', `${text}.`);
  }
  return result;
}

/**
 * Puts the working tree back as it was before a restore (the restore's own snapshot); with
 * `conversation`, the conversation too (a v3 restore with the conversation).
 */
export async function undoRestoreFlow(
  ui: Ui,
  service: CtxdService,
  undoId: string,
  target?: TargetOptions,
  conversation = false,
): Promise<RestoreResult | undefined> {
  const result = await attempt(ui, 'Undo restore', () =>
    ui.progress('ctxd: undoing the restore…', () => service.restore(undoId, { ...target, conversation })),
  );
  if (result) {
    ui.notify(
      'info',
      `Restore undone: ${plural(result.restored.length, 'file')} put back, ${result.removed.length} removed` +
        (conversation ? ', and the conversation is as it was before the restore.' : '.'),
    );
  }
  return result;
}

export async function deleteSnapshotFlow(ui: Ui, service: CtxdService, snap: GhostCommit, target?: TargetOptions): Promise<boolean> {
  const ok = await ui.confirm(
    `Delete snapshot ${shortId(snap.id)}?`,
    `${snap.message?.trim() || 'This snapshot'} (${plural(snap.fileCount, 'file')}) can no longer be restored.`,
    'Delete',
  );
  if (!ok) return false;
  return (await attempt(ui, 'Delete', () => service.deleteSnapshot(snap.id, target).then(() => true))) ?? false;
}

const STATUS_LABEL: Record<DiffFile['status'], string> = { modified: 'modified', added: 'added since', deleted: 'deleted since' };

export function diffItems(files: DiffFile[]): PickItem<DiffFile>[] {
  return files.map((f) => ({
    label: f.path,
    description: STATUS_LABEL[f.status] + (f.binary ? ' · binary' : ''),
    value: f,
  }));
}

/** Lets the user pick a changed file (directly when only one changed) and opens its diff. */
export async function showChangesFlow(
  ui: Ui,
  service: CtxdService,
  id: string,
  openDiff: (file: DiffFile, snapshotId: string) => Promise<void>,
  target?: TargetOptions,
): Promise<DiffFile | undefined> {
  const diff = await attempt(ui, 'Comparing with the snapshot', () => service.snapshotDiff(id, target));
  if (!diff) return undefined;
  if (diff.files.length === 0) {
    ui.notify('info', `The working tree is as it was at snapshot ${shortId(id)}.`);
    return undefined;
  }
  const chosen =
    diff.files.length === 1
      ? diff.files[0]
      : await ui.pick(diffItems(diff.files), { title: `ctxd: changes since ${shortId(id)}`, placeHolder: 'File to compare' });
  if (!chosen) return undefined;
  if (chosen.binary) {
    ui.notify('info', `${chosen.path} is a binary file; it cannot be shown as a text diff.`);
    return chosen;
  }
  const full = await attempt(ui, 'Reading the snapshot', () => service.snapshotDiff(id, { ...target, path: chosen.path }));
  const file = full?.files.find((f) => f.path === chosen.path);
  if (file) await openDiff(file, id);
  return file;
}
