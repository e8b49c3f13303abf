/**
 * What the status item's quick menu offers (Copilot-style): the actions on the shown thread when
 * the daemon runs, ways out when it does not. Pure: the extension runs the chosen command.
 */
import { COMMANDS } from './commandIds';
import { type PickItem } from './ui';
import type { StopReason } from './daemon';
import { agentOf, ownCommands } from './agents';
import { type ThreadFacts, isFollowed, threadPhrase } from './followed';
import { Method } from './protocol';
import { noIcons } from './text';

export interface MenuState {
  down: StopReason | undefined;
  supports: (method: string) => boolean;
  /** The thread the gauge shows. */
  thread: ThreadFacts | undefined;
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
  const on = state.thread ? noIcons(threadPhrase(state.thread, 40)) : 'the active thread';
  const followed = isFollowed(state.thread);
  const items: PickItem<string>[] = [{ label: '$(graph) Open breakdown', description: on, value: COMMANDS.showUsage }];
  // A followed session's conversation is its agent's: nothing here writes it; its files can still go back.
  if (state.supports(Method.compact) && !followed) items.push({ label: '$(fold) Compact now', description: on, value: COMMANDS.compactNow });
  if (state.supports(Method.ghostSnapshot)) items.push({ label: '$(device-camera) Snapshot now', description: 'the working tree', value: COMMANDS.snapshot });
  if (state.supports(Method.threads)) items.push({ label: '$(list-unordered) Switch thread…', value: COMMANDS.switchThread });
  if (state.supports(Method.recall)) items.push({ label: '$(search) Search history…', description: 'every thread, compacted parts too', value: COMMANDS.searchHistory });
  // The time machine: restore a checkpoint, roll back, undo, and the History view.
  if (state.supports(Method.ghostRestore)) {
    const agent = followed ? agentOf(state.thread?.source) : undefined;
    items.push(
      agent
        ? { label: '$(history) Restore files…', description: 'from a checkpoint', detail: `The conversation is ${agent.name}'s: use ${ownCommands(agent)} there.`, value: COMMANDS.restore }
        : { label: '$(history) Restore…', description: 'a snapshot: files, or files and conversation', value: COMMANDS.restore },
    );
  }
  if (state.supports(Method.rollback) && !followed) items.push({ label: '$(debug-step-back) Roll back last turn', description: on, value: COMMANDS.rollback });
  if (state.supports(Method.undo) && !followed) items.push({ label: '$(discard) Undo last history operation', description: 'compaction, rollback or restore', value: COMMANDS.undoLast });
  if (state.supports(Method.history)) items.push({ label: '$(list-tree) Show history', description: 'compactions, rollbacks, restores; checkpoints', value: COMMANDS.showHistory });
  if (state.supports(Method.status)) {
    items.push({ label: '$(plug) Install agent hooks…', description: 'checkpoints and the status line inside the agents', value: COMMANDS.installHooks });
    items.push({ label: '$(pulse) Show status', description: 'settings problems, tokenizer, hooks', value: COMMANDS.showStatus });
  }
  items.push({ label: '$(output) Show log', value: COMMANDS.showLog });
  return items;
}
