/**
 * What the status item's quick menu offers (Copilot-style): the actions on the shown thread when
 * the daemon runs, ways out when it does not. Pure: the extension runs the chosen command.
 */
import { COMMANDS } from './commandIds';
import { type PickItem } from './ui';
import type { StopReason } from './daemon';
import { isFollowed } from './followed';
import { Method } from './protocol';


export interface MenuState {
  down: StopReason | undefined;
  supports: (method: string) => boolean;
  thread: string | undefined;
}

export function menuItems(state: MenuState): PickItem<string>[] {
  if (state.down) {
    const items: PickItem<string>[] = [];
    if (state.down.kind === 'notInstalled') {
      items.push(
        { label: '$(cloud-download) Install ctxd', detail: "from a ctxd clone or wheel, into a Python environment of the extension's own", value: COMMANDS.install },
        { label: '$(gear) Set path to ctxd', value: COMMANDS.setDaemonPath },
      );
    }
    items.push(
      { label: '$(debug-restart) Restart daemon', detail: state.down.message, value: COMMANDS.restart },
      { label: '$(output) Show log', value: COMMANDS.showLog },
      { label: '$(graph) Open breakdown', description: 'says why ctxd is not running', value: COMMANDS.showUsage },
    );
    return items;
  }
  const on = state.thread ? `thread "${state.thread}"` : 'the active thread';
  const items: PickItem<string>[] = [{ label: '$(graph) Open breakdown', description: on, value: COMMANDS.showUsage }];
  if (state.supports(Method.compact) && !isFollowed(state.thread)) items.push({ label: '$(fold) Compact now', description: on, value: COMMANDS.compactNow });
  if (state.supports(Method.ghostSnapshot)) items.push({ label: '$(device-camera) Snapshot now', description: 'the working tree', value: COMMANDS.snapshot });
  if (state.supports(Method.threads)) items.push({ label: '$(list-unordered) Switch thread…', value: COMMANDS.switchThread });
  if (state.supports(Method.recall)) items.push({ label: '$(search) Search history…', description: 'every thread, compacted parts too', value: COMMANDS.searchHistory });
  if (state.supports(Method.ghostRestore)) items.push({ label: '$(history) Restore…', description: 'a snapshot', value: COMMANDS.restore });
  if (state.supports(Method.undo)) items.push({ label: '$(discard) Undo last history operation', description: 'compaction, rollback or restore', value: COMMANDS.undoLast });
  if (state.supports(Method.status)) items.push({ label: '$(pulse) Show status', description: 'settings problems, tokenizer', value: COMMANDS.showStatus });
  items.push({ label: '$(output) Show log', value: COMMANDS.showLog });
  return items;
}
