/**
 * One notification per crossing into the warn or compact tier of the thread the gauge shows: a
 * thread that stays in a tier, or drops back and is compacted, says nothing more. The notice says
 * what the gauge says (the same percent and counts), and a notice that no longer holds (the tier
 * changed since) is to be closed. `TierNotices` shows them through a small host.
 */
import { COMMANDS } from './commandIds';
import { type ThreadFacts, isFollowed, threadPhrase } from './followed';
import type { Tier, UsageChangedParams, UsageSnapshot } from './protocol';
import type { Severity } from './ui';
import { formatTokens } from './numbers';
import { gaugeText } from './status';

const RANK: Record<Tier, number> = { ok: 0, warn: 1, compact: 2 };

export interface TierChange {
  /** The tier crossed into, upwards: show a notice. */
  up: Tier | undefined;
  /** The tier is not the one it was: an open notice about the old one no longer holds. */
  changed: boolean;
}

export class TierWatcher {
  private readonly last = new Map<string, Tier>();

  /** Records the tier of `key` and says whether it changed, and whether upwards. */
  observe(key: string, tier: Tier): TierChange {
    const before = this.last.get(key) ?? 'ok';
    this.last.set(key, tier);
    return { up: RANK[tier] > RANK[before] ? tier : undefined, changed: tier !== before };
  }
}

export const TIER_ACTIONS = { compact: 'Compact now', breakdown: 'Open breakdown' } as const;

/** The notification's buttons: a followed thread is compacted by its agent, never from here. */
export function tierActions(thread: ThreadFacts): string[] {
  return isFollowed(thread) ? [TIER_ACTIONS.breakdown] : [TIER_ACTIONS.compact, TIER_ACTIONS.breakdown];
}

/** The notice for `tier`, with the gauge's own figures ("83% · 106k/128k"). */
export function tierMessage(tier: Tier, thread: ThreadFacts, usage: UsageSnapshot): string {
  const figures = gaugeText(usage).replace(/^\$\([^)]*\)\s*/, '');
  const left = Math.max(0, usage.autoCompactLimit - usage.usedTokens);
  const name = threadPhrase(thread);
  if (tier === 'compact' && isFollowed(thread)) {
    return `ctxd: ${name} reached its agent's auto-compact point (${formatTokens(usage.usedTokens)} of ${formatTokens(usage.autoCompactLimit)} tokens): the agent compacts it next.`;
  }
  if (tier === 'compact') {
    return `ctxd: ${name} is at ${figures}: it reached the auto-compact limit (${formatTokens(usage.autoCompactLimit)}).`;
  }
  return `ctxd: ${name} is at ${figures}: ${formatTokens(left)} tokens left before auto-compact (at ${formatTokens(usage.autoCompactLimit)}).`;
}

export interface TierNoticeHost {
  /** The workspace and thread the gauge shows. */
  shown(): ({ uri: string } & ThreadFacts) | undefined;
  /** Whether the notifications setting lets a warning through. */
  warningsShown(): boolean;
  ask(severity: Severity, message: string, actions: string[]): Promise<string | undefined>;
  /** Hides the open toasts (VS Code cannot close one notification). */
  hideToasts(): PromiseLike<unknown>;
  execute(command: string): unknown;
  /** The clock (milliseconds); Date.now when not given. */
  now?(): number;
}

/**
 * How long a notice can still be on screen: VS Code hides a warning toast after 18 s (unless the
 * mouse rests on it) and keeps it in the notification centre, where its buttons still answer. A
 * notice older than this is not hidden by hiding the toasts, which would only hide other messages.
 */
export const ON_SCREEN_MS = 20_000;

/** One notice per crossing, for the thread the gauge shows; a notice that no longer holds is hidden first. */
export class TierNotices {
  private readonly watcher = new TierWatcher();
  /** When the open notice showed; undefined when none is open. */
  private shownAt: number | undefined;

  constructor(private readonly h: TierNoticeHost) {}

  private now(): number {
    return this.h.now ? this.h.now() : Date.now();
  }

  async close(): Promise<void> {
    const shownAt = this.shownAt;
    this.shownAt = undefined;
    if (shownAt === undefined || this.now() - shownAt > ON_SCREEN_MS) return;
    await this.h.hideToasts();
  }

  /** Feed every usage change here. */
  observe(e: UsageChangedParams): void {
    const w = this.h.shown();
    if (!w || e.workspace !== w.uri || e.thread !== w.thread) return;
    const change = this.watcher.observe(`${e.workspace}\u0000${e.thread}`, e.tier);
    // The stale notice is hidden before the new one shows (hiding is not instant).
    const hidden = change.changed ? this.close() : Promise.resolve();
    const up = change.up;
    if (!up || !this.h.warningsShown()) return;
    void hidden
      .then(() => {
        this.shownAt = this.now();
        return this.h.ask('warning', tierMessage(up, w, e), tierActions(w));
      })
      .then((choice) => {
        this.shownAt = undefined;
        if (choice === TIER_ACTIONS.compact) void this.h.execute(COMMANDS.compactNow);
        if (choice === TIER_ACTIONS.breakdown) void this.h.execute(COMMANDS.showUsage);
      });
  }
}
