/**
 * Who a thread belongs to: each agent's name, codicon and own commands, by the `source` that
 * `ctxd/threads` gives (`client`, `codex`, `claude`, and the agents added since). An agent's name
 * is the daemon's (its `initialize` answer, `capabilities.experimental.ctxd.agents`, from the
 * agent's module): the table here has none of its own for an agent, only the gauge's word, the
 * icon and the agent's commands (the Neovim plugin's `ctxd.agents` has the same), so a new agent
 * needs no code: one the table does not know is shown by the daemon's name with the fallback icon.
 * Pure, but for the names the daemon last gave (`setAgentNames`).
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

/** What the editor keeps of a source: a name only for those that are no agent module of the daemon (its own threads, ACP). */
type Known = Omit<Agent, 'name'> & { name?: string };

export const AGENTS: Readonly<Record<string, Known>> = {
  client: { name: 'ctxd', icon: 'comment-discussion' },
  codex: { label: 'Codex', icon: 'terminal', rewind: 'Esc Esc (backtrack)', compact: '/compact' },
  claude: { label: 'Claude', icon: 'sparkle', rewind: '/rewind', compact: '/compact' },
  qwen: { label: 'Qwen', icon: 'hubot', rewind: '/rewind', compact: '/compress' },
  gemini: { label: 'Gemini', icon: 'star-full', rewind: '/rewind', compact: '/compress' },
  opencode: { label: 'OpenCode', icon: 'code', rewind: '/undo', compact: '/compact' },
  acp: { label: 'ACP', name: 'ACP agent', icon: 'plug' },
};

/** The icon of an agent the table does not know. */
export const FALLBACK_ICON = 'robot';

let daemonNames: Readonly<Record<string, string>> = {};

/**
 * Takes the agents' names from the daemon's `initialize` answer (`capabilities.experimental.ctxd.agents`,
 * `{source: name}`); anything else there is ignored. Called after every daemon start.
 */
export function setAgentNames(agents: unknown): void {
  const names: Record<string, string> = {};
  if (agents && typeof agents === 'object' && !Array.isArray(agents)) {
    for (const [source, name] of Object.entries(agents)) {
      if (typeof name === 'string' && name.trim() && name.length <= 100) names[source] = name.trim();
    }
  }
  daemonNames = names;
}

const has = (table: object, key: string) => Object.prototype.hasOwnProperty.call(table, key);

/** The agent behind `source` (undefined or empty: the editor's own threads). */
export function agentOf(source: string | null | undefined): Agent {
  const key = typeof source === 'string' && source ? source : 'client';
  const known = has(AGENTS, key) ? AGENTS[key] : undefined;
  const word = key.charAt(0).toUpperCase() + key.slice(1);
  // The daemon's name; before it gave one (or from a daemon that gives none), the gauge's word.
  const name = has(daemonNames, key) ? daemonNames[key] : (known?.name ?? known?.label ?? word);
  return known ? { ...known, name } : { label: word, name, icon: FALLBACK_ICON };
}

/**
 * The agent a followed thread's name says (`claude:ae4a…` → claude), as the daemon reads it: a
 * known agent's name before the first colon. Used only while the thread's listing is not known.
 */
export function sourceOfThreadName(thread: string | undefined): string | undefined {
  const i = thread ? thread.indexOf(':') : -1;
  const agent = i > 0 ? thread!.slice(0, i) : undefined;
  return agent && agent !== 'client' && (has(AGENTS, agent) || has(daemonNames, agent)) ? agent : undefined;
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
