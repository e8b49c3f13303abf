/**
 * Which thread the gauge and the views show per workspace folder: the one the user pinned, else
 * the most recently active one (read from `ctxd/threads` whenever threads change), else the last
 * one whose usage changed. Also remembers each thread's `source` from those listings.
 */
import { type ThreadFacts, threadFacts } from './followed';
import { DEFAULT_THREAD, type ThreadInfo } from './protocol';
import { type UsageCache, usageKey } from './usageCache';

/** When a thread was last active, in ms (-Infinity when the daemon gave no parsable time). */
function activity(t: ThreadInfo): number {
  const ms = Date.parse(t.lastActivity ?? t.updatedAt);
  return Number.isNaN(ms) ? -Infinity : ms;
}

/** The thread to follow: the most recently active one with items (on a tie, the daemon's order wins). */
export function latestThread(threads: readonly ThreadInfo[]): ThreadInfo | undefined {
  let best: ThreadInfo | undefined;
  for (const t of threads) if (t.itemCount > 0 && (!best || activity(t) > activity(best))) best = t;
  return best;
}

export class ThreadSelection {
  private readonly pinned = new Map<string, string>();
  /** Per workspace, the most recently active thread from the last `ctxd/threads` answer. */
  private readonly followed = new Map<string, string>();
  /** Per thread (key), its listing in the last `ctxd/threads` answer (source, title, readOnly, cost). */
  private readonly listed = new Map<string, ThreadInfo>();
  /** Workspaces whose threads are being read, and those to read again once that answer is in. */
  private readonly following = new Map<string, Promise<void>>();
  private readonly followAgain = new Set<string>();

  /**
   * @param listThreads `ctxd/threads` for a workspace.
   * @param usage the known usages: a listing's are kept there, and a change of the shown thread is announced through it.
   */
  constructor(
    private readonly listThreads: (workspace: string) => Promise<ThreadInfo[]>,
    private readonly usage: UsageCache,
  ) {}

  /** The thread calls go to when they name none: the pinned one, else "default". */
  activeThread(workspace: string): string {
    return this.pinned.get(workspace) ?? DEFAULT_THREAD;
  }

  /** The thread the gauge shows: the pinned one, else the most recently active, else the last that changed. */
  shownThread(workspace: string): string {
    return this.pinned.get(workspace) ?? this.followed.get(workspace) ?? this.usage.lastChangedThread(workspace) ?? DEFAULT_THREAD;
  }

  /** Whether the user picked the shown thread (it is not replaced by a newer one). */
  isPinned(workspace: string): boolean {
    return this.pinned.has(workspace);
  }

  /** The thread's `source` as `ctxd/threads` gave it ("client", "codex", "claude"), if known. */
  threadSource(workspace: string, thread: string): string | undefined {
    const info = this.listed.get(usageKey({ workspace, thread }));
    return info ? (info.source ?? 'client') : undefined;
  }

  /** The thread's listing in the last `ctxd/threads` answer, if it was in it. */
  info(workspace: string, thread: string): ThreadInfo | undefined {
    return this.listed.get(usageKey({ workspace, thread }));
  }

  /** What the views say of the thread: its agent, title and whether it is read-only. */
  facts(workspace: string, thread: string): ThreadFacts {
    return threadFacts(thread, this.info(workspace, thread));
  }

  /** Pins `thread`: the gauge shows it until `unpin`. */
  pin(workspace: string, thread: string): void {
    this.pinned.set(workspace, thread);
    this.announceShown(workspace);
  }

  /** Unpins: the gauge follows the workspace's most recently active thread again. */
  async unpin(workspace: string): Promise<void> {
    this.pinned.delete(workspace);
    this.announceShown(workspace);
    await this.followLatest(workspace);
  }

  /** A thread's usage changed: unless pinned, it may now be the most recently active one. */
  usageChanged(workspace: string, thread: string): void {
    if (!this.isPinned(workspace) && this.followed.get(workspace) !== thread) void this.followLatest(workspace);
  }

  /**
   * Reads the workspace's threads and follows the most recently active one; never throws. A call
   * while a read is under way reads again after it and resolves when that read is in.
   */
  followLatest(workspace: string): Promise<void> {
    this.followAgain.add(workspace);
    let running = this.following.get(workspace);
    if (!running) {
      running = this.readThreads(workspace).finally(() => {
        this.following.delete(workspace);
        if (this.followAgain.has(workspace)) void this.followLatest(workspace); // asked for after the last read
      });
      this.following.set(workspace, running);
    }
    return running;
  }

  private async readThreads(workspace: string): Promise<void> {
    while (this.followAgain.delete(workspace)) {
      try {
        this.noteThreads(workspace, await this.listThreads(workspace));
      } catch {
        return; // The daemon is (re)starting or too old; the next threadsChanged reads again.
      }
    }
  }

  /** Remembers sources and usages from a `ctxd/threads` answer and moves the followed thread. */
  private noteThreads(workspace: string, threads: readonly ThreadInfo[]): void {
    const sourceBefore = this.threadSource(workspace, this.shownThread(workspace));
    for (const t of threads) {
      this.listed.set(usageKey({ workspace, thread: t.thread }), t);
      if (t.usage) this.usage.noteListed({ workspace, thread: t.thread }, t.usage);
    }
    const latest = latestThread(threads);
    if (latest && this.followed.get(workspace) !== latest.thread) {
      this.followed.set(workspace, latest.thread);
      if (!this.isPinned(workspace)) return this.announceShown(workspace);
    }
    // The gauge's label names the source: redraw when it was learnt only now.
    if (this.threadSource(workspace, this.shownThread(workspace)) !== sourceBefore) this.announceShown(workspace);
  }

  private announceShown(workspace: string): void {
    this.usage.announce({ workspace, thread: this.shownThread(workspace) });
  }
}
