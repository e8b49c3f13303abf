/**
 * Who a thread belongs to: each agent's name, codicon and own commands, by the `source` that
 * `ctxd/threads` gives (`client`, `codex`, `claude`, and the agents added since). Everything the
 * extension says about an agent comes from this one table (the Neovim plugin's `ctxd.agents` has
 * the same names and commands), so a new agent needs no code: one the table does not know is shown
 * by its source's own name with the fallback icon. Pure.
 */

export interface Agent {
  /** The gauge's word ("Codex"); undefined for the editor's own threads. */
  label?: string;
  /** The agent's name in sentences ("Claude Code"). */
  name: string;
  /** A codicon id. */
  icon: string;
  /** The agent's own way to take turns back ("/rewind"). */
  rewind?: string;
  /** The agent's own compaction command ("/compact"). */
  compact?: string;
}

export const AGENTS: Readonly<Record<string, Agent>> = {
  client: { name: 'ctxd', icon: 'comment-discussion' },
  codex: { label: 'Codex', name: 'Codex', icon: 'terminal', rewind: 'Esc Esc (backtrack)', compact: '/compact' },
  claude: { label: 'Claude', name: 'Claude Code', icon: 'sparkle', rewind: '/rewind', compact: '/compact' },
  qwen: { label: 'Qwen', name: 'Qwen Code', icon: 'hubot', rewind: '/rewind', compact: '/compress' },
  gemini: { label: 'Gemini', name: 'Gemini CLI', icon: 'star-full', rewind: '/rewind', compact: '/compress' },
  opencode: { label: 'OpenCode', name: 'OpenCode', icon: 'code', rewind: '/undo', compact: '/compact' },
  acp: { label: 'ACP', name: 'ACP agent', icon: 'plug' },
};

/** The icon of an agent the table does not know. */
export const FALLBACK_ICON = 'robot';

/** The agent behind `source` (undefined or empty: the editor's own threads). */
export function agentOf(source: string | null | undefined): Agent {
  const key = typeof source === 'string' && source ? source : 'client';
  if (Object.prototype.hasOwnProperty.call(AGENTS, key)) return AGENTS[key];
  const name = key.charAt(0).toUpperCase() + key.slice(1);
  return { label: name, name, icon: FALLBACK_ICON };
}

/**
 * The agent a followed thread's name says (`claude:ae4a…` → claude), as the daemon reads it: a
 * known agent's name before the first colon. Used only while the thread's listing is not known.
 */
export function sourceOfThreadName(thread: string | undefined): string | undefined {
  const i = thread ? thread.indexOf(':') : -1;
  const agent = i > 0 ? thread!.slice(0, i) : undefined;
  return agent && agent !== 'client' && Object.prototype.hasOwnProperty.call(AGENTS, agent) ? agent : undefined;
}

/** The agent's own ways to change its conversation, in words: "its /rewind or /compact". */
export function ownCommands(agent: Agent): string {
  if (agent.rewind && agent.compact) return `its ${agent.rewind} or ${agent.compact}`;
  return `${agent.name}'s own commands`;
}

/**
 * The one sentence that says a followed session's conversation is the agent's, pointing to what
 * works: the agent's own commands, and a checkpoint restore of the files.
 */
export function readOnlySentence(source: string | null | undefined): string {
  const agent = agentOf(source);
  return `This ${agent.name} session is read-only: use ${ownCommands(agent)}; files: Restore Files on a checkpoint in the Snapshots view.`;
}
