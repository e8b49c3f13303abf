/**
 * A thread as people see it: its agent, whether it is read-only, and its name. A followed agent
 * session (protocol v2 "Followed threads", `readOnly: true`) mirrors a session its agent owns:
 * nothing that writes its history (compact, roll back, undo, restore the conversation) is offered
 * on it; the agent's own commands and a restore of the files are. Sessions are named by their
 * title, never by the `claude:ae4a77f8-…` id. Pure.
 */
import { agentOf, readOnlySentence, sourceOfThreadName } from './agents';
import type { ThreadInfo } from './protocol';

/** What the views know of a thread: its name, and what its `ctxd/threads` listing said (if read yet). */
export interface ThreadFacts {
  thread: string;
  source?: string | null;
  readOnly?: boolean;
  title?: string | null;
}

/** The facts of `thread` from its listing, or from its name alone while it is not listed. */
export function threadFacts(thread: string, info?: Pick<ThreadInfo, 'source' | 'readOnly' | 'title'>): ThreadFacts {
  const named = sourceOfThreadName(thread);
  return {
    thread,
    source: info?.source ?? named ?? 'client',
    readOnly: info?.readOnly ?? named !== undefined,
    title: info?.title ?? null,
  };
}

/** Whether the thread's conversation belongs to an agent (read-only here). */
export function isFollowed(t: ThreadFacts | undefined): boolean {
  if (!t) return false;
  return t.readOnly ?? sourceOfThreadName(t.thread) !== undefined;
}

/** What the user is told instead of an action that cannot be done on a followed thread. */
export function readOnlyText(t: ThreadFacts): string {
  return readOnlySentence(t.source ?? sourceOfThreadName(t.thread));
}

function oneLine(text: string, max: number): string {
  const flat = text.replace(/\s+/g, ' ').trim();
  return flat.length > max ? `${flat.slice(0, max - 1)}…` : flat;
}

/**
 * The thread's name for people: its title (the first thing the user asked), else, for an agent's
 * session, "Claude Code session ae4a77f8", else its own name ("default", "my-agent").
 */
export function threadName(t: ThreadFacts, max = 60): string {
  const title = t.title ? oneLine(t.title, max) : '';
  if (title) return title;
  const source = t.source ?? sourceOfThreadName(t.thread);
  const colon = t.thread.indexOf(':');
  if (source && source !== 'client' && colon > 0) return `${agentOf(source).name} session ${t.thread.slice(colon + 1, colon + 9)}`;
  return t.thread;
}

/** `Claude Code: fix the tests` (an agent's session), `thread "default"` (the editor's own): headings, tooltips, rows. */
export function threadLabel(t: ThreadFacts, max = 60): string {
  const source = t.source ?? sourceOfThreadName(t.thread) ?? 'client';
  const name = threadName(t, max);
  if (source === 'client') return `thread "${name}"`;
  if (!t.title) return name;
  return `${agentOf(source).name}: ${name}`;
}

/**
 * The thread in a sentence: `thread "default"`, `thread "fix the tests"` (a titled thread of the
 * editor's own), `the Claude Code session "fix the tests"`, `the Codex session 0199a2b3`.
 */
export function threadPhrase(t: ThreadFacts, max = 60): string {
  const source = t.source ?? sourceOfThreadName(t.thread) ?? 'client';
  const name = threadName(t, max);
  if (source === 'client') return `thread "${name}"`;
  const agent = agentOf(source).name;
  return t.title ? `the ${agent} session "${name}"` : `the ${name}`;
}
