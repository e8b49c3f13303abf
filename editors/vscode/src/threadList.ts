/**
 * The workspace folders' thread listings (`ctxd/threads`), read once and then kept up to date: a
 * `ctxd/threadsChanged` that names the threads that changed, or a usage the daemon sent for a
 * thread, has just those read again (`ctxd/threads` with `threads`) at the next `list`; one that
 * names none (an older daemon, or a restart) has the whole listing read again. A folder of
 * thousands of followed sessions is then not listed whole after every change.
 */
import type { ThreadInfo } from './protocol';

/** When a thread was last active, in ms (-Infinity when the daemon gave no parsable time). */
function activity(t: ThreadInfo): number {
  const ms = Date.parse(t.lastActivity ?? t.updatedAt);
  return Number.isNaN(ms) ? -Infinity : ms;
}

export class ThreadList {
  /** Per workspace, what `ctxd/threads` said of each thread. */
  private readonly listed = new Map<string, Map<string, ThreadInfo>>();
  /** Per workspace, the threads to read again before the listing is given out. */
  private readonly stale = new Map<string, Set<string>>();
  /** Per workspace, the read under way (one at a time). */
  private readonly reading = new Map<string, Promise<void>>();

  /** @param fetch `ctxd/threads` for a workspace: every thread, or only `threads`. */
  constructor(private readonly fetch: (workspace: string, threads?: string[]) => Promise<ThreadInfo[]>) {}

  /** Forget every listing (the daemon (re)started or stopped). */
  clear(): void {
    this.listed.clear();
    this.stale.clear();
  }

  /** These threads of `workspace` changed (read them again); none named: any may have (all). */
  changed(workspace: string, threads?: readonly string[]): void {
    if (threads === undefined) {
      this.listed.delete(workspace);
      this.stale.delete(workspace);
      return;
    }
    if (!this.listed.has(workspace)) return; // read whole at the next `list` anyway
    const names = this.stale.get(workspace) ?? new Set<string>();
    for (const thread of threads) names.add(thread);
    this.stale.set(workspace, names);
  }

  /** The workspace's threads, newest activity first: what is known, with what changed read again. */
  async list(workspace: string): Promise<ThreadInfo[]> {
    for (;;) {
      const running = this.reading.get(workspace);
      if (running) {
        await running.catch(() => undefined);
        continue;
      }
      if (this.listed.has(workspace) && !this.stale.get(workspace)?.size) break;
      const read = this.read(workspace);
      this.reading.set(workspace, read);
      try {
        await read;
      } finally {
        this.reading.delete(workspace);
      }
      break;
    }
    const known = this.listed.get(workspace);
    return known ? [...known.values()].sort((a, b) => activity(b) - activity(a)) : [];
  }

  private async read(workspace: string): Promise<void> {
    const known = this.listed.get(workspace);
    if (!known) {
      this.stale.delete(workspace);
      const all = await this.fetch(workspace);
      this.listed.set(workspace, new Map(all.map((t) => [t.thread, t])));
      return;
    }
    const names = this.stale.get(workspace);
    this.stale.delete(workspace);
    if (!names?.size) return;
    try {
      for (const t of await this.fetch(workspace, [...names])) known.set(t.thread, t);
    } catch (err) {
      this.changed(workspace, [...names]); // read them again next time
      throw err;
    }
  }
}
