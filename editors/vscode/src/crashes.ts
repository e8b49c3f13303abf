/**
 * When to stop restarting a daemon that keeps crashing: at most `limit` crashes within `windowMs`
 * are restarted; the next one stops it, and the user restarts it by hand. Pure, so it is tested
 * without a process to kill.
 */
export const CRASH_LIMIT = 4;
export const CRASH_WINDOW_MS = 3 * 60_000;

export type CrashVerdict = { restart: true } | { restart: false; crashes: number };

export class CrashPolicy {
  private times: number[] = [];

  constructor(
    private readonly limit = CRASH_LIMIT,
    private readonly windowMs = CRASH_WINDOW_MS,
  ) {}

  /** Records a crash at `now` and says whether to restart. */
  crashed(now: number): CrashVerdict {
    this.times = [...this.times.filter((t) => now - t < this.windowMs), now];
    return this.times.length <= this.limit ? { restart: true } : { restart: false, crashes: this.times.length };
  }
}

/** The state a crash storm leaves, in words (gauge tooltip, breakdown page, notification). */
export function crashStormMessage(crashes: number, windowMs = CRASH_WINDOW_MS): string {
  return `ctxd stopped after ${crashes} crashes in ${Math.round(windowMs / 60_000)} minutes.`;
}
