/**
 * Followed agent sessions (protocol v2 "Followed threads"): a thread `codex:<id>` or
 * `claude:<id>` mirrors a session its agent owns, read-only. Nothing that writes its history
 * (Compact now) is offered on it: the agent compacts it by itself. Pure.
 */

const FOLLOWED = /^(codex|claude):/;

export function isFollowed(thread: string | undefined): boolean {
  return thread !== undefined && FOLLOWED.test(thread);
}

/** What the user is told instead of an action that cannot be done on a followed thread. */
export function readOnlyText(thread: string): string {
  const agent = thread.startsWith('codex:') ? 'Codex' : 'Claude Code';
  return `Thread "${thread}" follows a ${agent} session: ${agent} compacts it by itself, ctxd only shows it.`;
}
