/**
 * A thread's prompt cache (`CacheState`, from the daemon) in plain words for the gauge's tooltip:
 * warm for how long, or cold and what the next turn re-writes, and what the last compaction cost.
 * Pure, so the exact sentences are unit-tested.
 */
import type { CacheState } from './protocol';
import { formatTokens, usd } from './numbers';

function tokensAndCost(tokens: number, cost: number | null): string {
  return `${formatTokens(tokens)} tokens${cost === null ? '' : ` (${usd(cost)})`}`;
}

function coldText(cache: CacheState): string {
  if (cache.rewriteTokens > 0) return `Cache cold: the next turn re-writes ${tokensAndCost(cache.rewriteTokens, cache.rewriteCost)}.`;
  return 'Cache cold.';
}

/** One sentence on the cache's state at `now` (ms); a warm cache whose time ran out since is cold. */
export function cacheStateText(cache: CacheState, now: number): string {
  if (cache.state === 'unknown') return 'Cache state unknown: no request has reported cache use yet.';
  if (cache.state === 'cold') return coldText(cache);
  const expires = cache.expiresAt ? Date.parse(cache.expiresAt) : NaN;
  if (Number.isNaN(expires)) return 'Cache warm.';
  const left = expires - now;
  if (left <= 0) return coldText(cache);
  if (left < 60_000) return 'Cache warm for less than a minute.';
  return `Cache warm for ${Math.floor(left / 60_000)} min.`;
}

/** What the latest compaction cost in cache writes and saves each turn after it, if any is known. */
export function compactionCostText(cache: CacheState): string | undefined {
  const last = cache.compactions?.at(-1);
  if (!last) return undefined;
  const saved = last.savedTokensPerTurn > 0 ? `; it saves ${tokensAndCost(last.savedTokensPerTurn, last.savedCostPerTurn)} a turn` : '';
  return `The last compaction re-wrote ${tokensAndCost(last.cacheWriteTokens, last.cacheWriteCost)} to the cache${saved}.`;
}

/** The tooltip's cache lines (Markdown paragraphs, no markup in them). */
export function cacheLines(cache: CacheState | undefined, now: number): string[] {
  if (!cache) return [];
  const lines = [cacheStateText(cache, now)];
  const compaction = compactionCostText(cache);
  if (compaction) lines.push(compaction);
  return lines;
}
