/**
 * One notification per crossing into the warn or compact tier of the thread the gauge shows: a
 * thread that stays in a tier, or drops back and is compacted, says nothing more. Pure.
 */
import { isFollowed } from './followed';
import type { Tier, UsageSnapshot } from './protocol';
import { formatTokens } from './status';

const RANK: Record<Tier, number> = { ok: 0, warn: 1, compact: 2 };

export class TierWatcher {
  private readonly last = new Map<string, Tier>();

  /** Records the tier of `key` and returns it when it is a crossing upwards. */
  observe(key: string, tier: Tier): Tier | undefined {
    const before = this.last.get(key) ?? 'ok';
    this.last.set(key, tier);
    return RANK[tier] > RANK[before] ? tier : undefined;
  }
}

export const TIER_ACTIONS = { compact: 'Compact now', breakdown: 'Open breakdown' } as const;

/** The notification's buttons: a followed thread is compacted by its agent, never from here. */
export function tierActions(thread: string): string[] {
  return isFollowed(thread) ? [TIER_ACTIONS.breakdown] : [TIER_ACTIONS.compact, TIER_ACTIONS.breakdown];
}

export function tierMessage(tier: Tier, thread: string, usage: UsageSnapshot): string {
  const left = Math.max(0, usage.autoCompactLimit - usage.usedTokens);
  if (tier === 'compact' && isFollowed(thread)) {
    return `ctxd: thread "${thread}" reached its agent's auto-compact point (${formatTokens(usage.usedTokens)} of ${formatTokens(usage.autoCompactLimit)} tokens): the agent compacts it next.`;
  }
  if (tier === 'compact') {
    return `ctxd: thread "${thread}" reached the auto-compact limit (${formatTokens(usage.usedTokens)} of ${formatTokens(usage.autoCompactLimit)} tokens).`;
  }
  return `ctxd: thread "${thread}" is at ${formatTokens(usage.usedTokens)} tokens, ${formatTokens(left)} left before auto-compact.`;
}
