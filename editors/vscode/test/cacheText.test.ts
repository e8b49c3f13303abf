/** The prompt cache in the gauge's tooltip: plain sentences from the daemon's CacheState. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { cacheLines, cacheStateText, compactionCostText } from '../src/cacheText';
import { usd } from '../src/numbers';
import { type CacheState, normalizeBreakdown } from '../src/protocol';
import { gaugeView } from '../src/status';
import { breakdown, usage } from './fixtures';

const NOW = Date.parse('2026-01-02T10:00:00Z');

function cache(over: Partial<CacheState> = {}): CacheState {
  return {
    state: 'warm',
    expiresAt: '2026-01-02T10:03:30Z',
    lastRequestAt: '2026-01-02T09:58:30Z',
    lifetimeSeconds: 300,
    rewriteTokens: 45_000,
    rewriteCost: 0.16875,
    ...over,
  };
}

describe('cache state in words', () => {
  test('warm: the whole minutes left before it expires', () => {
    assert.equal(cacheStateText(cache(), NOW), 'Cache warm for 3 min.');
    assert.equal(cacheStateText(cache({ expiresAt: '2026-01-02T10:00:40Z' }), NOW), 'Cache warm for less than a minute.');
    assert.equal(cacheStateText(cache({ expiresAt: null }), NOW), 'Cache warm.');
  });

  test('cold: what the next turn re-writes, in tokens and dollars', () => {
    assert.equal(cacheStateText(cache({ state: 'cold' }), NOW), 'Cache cold: the next turn re-writes 45k tokens ($0.17).');
    assert.equal(cacheStateText(cache({ state: 'cold', rewriteCost: null }), NOW), 'Cache cold: the next turn re-writes 45k tokens.');
    assert.equal(cacheStateText(cache({ state: 'cold', rewriteTokens: 0 }), NOW), 'Cache cold.');
  });

  test('a warm cache whose time ran out since the answer reads as cold', () => {
    assert.equal(cacheStateText(cache({ expiresAt: '2026-01-02T09:59:00Z' }), NOW), 'Cache cold: the next turn re-writes 45k tokens ($0.17).');
  });

  test('unknown says why', () => {
    assert.match(cacheStateText(cache({ state: 'unknown' }), NOW), /^Cache state unknown: no request has reported cache use yet\.$/);
  });

  test("the last compaction's cache write and what it saves a turn", () => {
    const c = cache({
      compactions: [
        { at: '2026-01-02T08:00:00Z', cacheWriteTokens: 1000, cacheWriteCost: 0.01, savedTokensPerTurn: 0, savedCostPerTurn: null },
        { at: '2026-01-02T09:00:00Z', cacheWriteTokens: 30_000, cacheWriteCost: 0.1125, savedTokensPerTurn: 12_000, savedCostPerTurn: 0.0036 },
      ],
    });
    assert.equal(compactionCostText(c), 'The last compaction re-wrote 30k tokens ($0.11) to the cache; it saves 12k tokens ($0.00) a turn.'.replace('($0.00)', '(under $0.01)'));
    assert.equal(compactionCostText(cache()), undefined);
    assert.deepEqual(cacheLines(undefined, NOW), []);
    assert.equal(cacheLines(c, NOW).length, 2);
  });

  test('dollars', () => {
    assert.equal(usd(0), '$0.00');
    assert.equal(usd(0.004), 'under $0.01');
    assert.equal(usd(12.4), '$12.40');
  });
});

describe('the gauge tooltip', () => {
  test("shows the breakdown's cache when the daemon sends one, and nothing about it otherwise", () => {
    const withCache = { ...breakdown(), cache: cache({ state: 'cold' }) };
    const tip = gaugeView(usage(), { folderName: 'w', thread: 't' }, withCache, NOW).tooltip;
    assert.match(tip, /\n\nCache cold: the next turn re-writes 45k tokens \(\$0\.17\)\.\n\n/);
    assert.doesNotMatch(gaugeView(usage(), { folderName: 'w', thread: 't' }, breakdown(), NOW).tooltip, /[Cc]ache/);
  });
});

describe("the breakdown's cache", () => {
  test('normalizeBreakdown keeps what the daemon sent (the gauge reads its tooltip from it)', () => {
    const raw = { ...breakdown(), cache: cache({ state: 'cold' }) };
    assert.deepEqual(normalizeBreakdown(raw).cache, raw.cache);
    assert.equal('cache' in normalizeBreakdown(breakdown()), false);
  });
});
