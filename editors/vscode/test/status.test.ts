import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import {
  ERROR_BACKGROUND,
  WARNING_BACKGROUND,
  downView,
  gaugeText,
  gaugeView,
  idleView,
  topCategories,
  usagePercent,
} from '../src/status';
import { formatTokens } from '../src/numbers';
import { breakdown, usage } from './fixtures';

describe('formatTokens', () => {
  test('reads like the gauge', () => {
    assert.equal(formatTokens(0), '0');
    assert.equal(formatTokens(950), '950');
    assert.equal(formatTokens(999), '999');
    assert.equal(formatTokens(1000), '1k');
    assert.equal(formatTokens(48_200), '48.2k');
    assert.equal(formatTokens(128_000), '128k');
    assert.equal(formatTokens(131_072), '131.1k');
    assert.equal(formatTokens(999_949), '999.9k');
    assert.equal(formatTokens(999_950), '1M');
    assert.equal(formatTokens(1_048_576), '1M');
    assert.equal(formatTokens(1_250_000), '1.3M');
    assert.equal(formatTokens(-5), '0');
  });
});

describe('gauge', () => {
  test('text is `$(pulse) 38% · 48.2k/128k`', () => {
    assert.equal(gaugeText(usage()), '$(pulse) 38% · 48.2k/128k');
    assert.equal(gaugeText(usage({ usedTokens: 0 })), '$(pulse) 0% · 0/128k');
  });

  test('an agent thread is labelled with its source; a client thread is not', () => {
    assert.equal(gaugeText(usage(), 'codex'), '$(pulse) Codex 38% · 48.2k/128k');
    assert.equal(gaugeText(usage(), 'claude'), '$(pulse) Claude 38% · 48.2k/128k');
    assert.equal(gaugeText(usage(), 'client'), '$(pulse) 38% · 48.2k/128k');
    assert.equal(gaugeView(usage(), { folderName: 'w', thread: 't', source: 'codex' }).text, '$(pulse) Codex 38% · 48.2k/128k');
  });

  test('percent comes from the counts, so text and numbers agree', () => {
    assert.equal(usagePercent({ usedTokens: 64_000, contextWindow: 128_000 }), 50);
    assert.equal(usagePercent({ usedTokens: 5, contextWindow: 0 }), 0);
  });

  test('tiers colour the item: ok normal, warn warning, compact error', () => {
    assert.equal(gaugeView(usage({ tier: 'ok' }), { folderName: 'w', thread: 'default' }).backgroundColor, undefined);
    const warn = gaugeView(usage({ tier: 'warn' }), { folderName: 'w', thread: 'default' });
    assert.equal(warn.level, 'warning');
    assert.equal(warn.backgroundColor, WARNING_BACKGROUND);
    const compact = gaugeView(usage({ tier: 'compact' }), { folderName: 'w', thread: 'default' });
    assert.equal(compact.level, 'error');
    assert.equal(compact.backgroundColor, ERROR_BACKGROUND);
  });

  test('tooltip names folder, thread, totals and the top categories, largest first', () => {
    const view = gaugeView(usage(), { folderName: 'my_repo', thread: 'agent-1' }, breakdown());
    assert.match(view.tooltip, /my\\_repo/);
    assert.match(view.tooltip, /^\*\*ctxd\*\* · my\\_repo · thread "agent-1"\n/);
    assert.match(view.tooltip, /48\.2k of 128k tokens \(38%\) · auto-compact at 115\.2k/);
    const lines = view.tooltip.split('\n').filter((l) => l.startsWith('- '));
    assert.deepEqual(lines, [
      '- Messages: 36.3k (28.3%)',
      '- Built-in tools: 5.2k (4.1%)',
      '- System prompt: 4.8k (3.8%)',
      '- Skills: 1.1k (0.9%)',
    ]);
    assert.doesNotMatch(view.tooltip, /Free space|Autocompact/);
  });

  test('the tooltip says how the counts were made in words, not the wire value', () => {
    const view = gaugeView(usage({ source: 'api+estimate', tokenizerStatus: 'loading' }), { folderName: 'w', thread: 't' });
    assert.match(view.tooltip, /The model API's count of the last request, plus what was added since \(estimated while the exact counter loads\)\./);
    assert.doesNotMatch(view.tooltip, /api\+estimate|Source:/);
    assert.match(gaugeView(usage({ source: 'estimate', tokenizerStatus: 'exact' }), { folderName: 'w', thread: 't' }).tooltip, /Counted exactly by ctxd/);
  });

  test('tooltip without a breakdown still has the totals', () => {
    const view = gaugeView(usage(), { folderName: 'w', thread: 'default' });
    assert.match(view.tooltip, /48\.2k of 128k/);
    assert.doesNotMatch(view.tooltip, /Top categories/);
  });

  test('topCategories skips spare room and empty categories', () => {
    const names = topCategories(breakdown(), 10).map((c) => c.name);
    assert.deepEqual(names, ['messages', 'builtinTools', 'systemPrompt', 'skills', 'memoryFiles']);
  });

  test('idle and down states', () => {
    assert.equal(idleView('w').text, '$(pulse) ctxd');
    assert.match(idleView(undefined).tooltip, /Open a folder/);
    const missing = downView({ kind: 'notInstalled', message: 'The ctxd daemon was not found (ctxd).', command: { command: 'ctxd', args: [] } });
    assert.equal(missing.text, '$(debug-disconnect) ctxd not installed');
    assert.equal(missing.backgroundColor, ERROR_BACKGROUND);
    assert.match(missing.tooltip, /install it or set its path/);
    const storm = downView({ kind: 'crashed', message: 'ctxd stopped after 5 crashes in 3 minutes.', crashes: 5 });
    assert.equal(storm.text, '$(error) ctxd stopped');
    assert.match(storm.tooltip, /stopped after 5 crashes/);
    assert.match(storm.tooltip, /restart it/);
  });
});
