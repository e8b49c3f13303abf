import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { GRID_CELLS, PAGE_COMMANDS, allocateCells, costCents, escapeHtml, renderBreakdownHtml, renderMessageHtml } from '../src/breakdownView';
import { detailLabel } from '../src/status';
import { normalizeBreakdown } from '../src/protocol';
import { breakdown, usage } from './fixtures';

const opts = { cspSource: 'vscode-webview://x', nonce: 'NONCE123', folderName: 'ws <1>', thread: 'default' };

describe('allocateCells', () => {
  test('always fills the grid, in category order, in proportion', () => {
    const b = breakdown();
    const cells = allocateCells(b.categories, b.contextWindow);
    assert.equal(cells.length, GRID_CELLS);
    const count = (n: string) => cells.filter((c) => c === n).length;
    assert.equal(count('messages'), 28);
    assert.equal(count('freeSpace'), 52);
    assert.equal(count('skills'), 1);
    assert.equal(count('autocompactBuffer'), 10);
    assert.equal(count('mcpTools'), 0);
    // Order follows the categories: the first cells are the system prompt's.
    assert.equal(cells[0], 'systemPrompt');
    assert.equal(cells[GRID_CELLS - 1], 'autocompactBuffer');
  });

  test('largest remainder keeps the sum exact for awkward splits', () => {
    const names = ['systemPrompt', 'messages', 'freeSpace'] as const;
    const cats = [1, 1, 1].map((t, i) => ({ name: names[i], tokens: t, percent: 0, details: [] }));
    assert.equal(allocateCells(cats, 3).length, GRID_CELLS);
    assert.deepEqual(allocateCells([], 100), []);
    assert.deepEqual(allocateCells(cats, 0).length, GRID_CELLS);
  });
});

describe('renderBreakdownHtml', () => {
  const full = { ...opts, canCompact: true, canSnapshot: true };

  test('grid with its legend beside it, every row with a human name', () => {
    const html = renderBreakdownHtml(breakdown(), full);
    assert.equal((html.match(/class="cell /g) ?? []).length, GRID_CELLS);
    assert.match(html, /<div class="layout"><div class="grid"[^>]*>.*<\/div><table class="legend">/s);
    for (const label of ['System prompt', 'Built-in tools', 'MCP tools', 'Skills', 'Memory files', 'Messages', 'Free space', 'Autocompact buffer']) {
      assert.ok(html.includes(`</span>${label}</td>`), label);
    }
    assert.match(html, /<p class="total" id="total">48\.2k\/128k tokens \(38%\)<\/p>/);
    assert.doesNotMatch(html, /id="overflow"/);
  });

  test('tokens left before auto-compact, and how exact the count is', () => {
    const html = renderBreakdownHtml(breakdown(), full);
    assert.match(html, /<p class="sub" id="headroom">67k tokens left before auto-compact \(at 115\.2k\)\.<\/p>/);
    assert.match(html, /id="accuracy">The model API&#39;s count of the last request, plus what was added since, counted by ctxd\./);
    const exact = renderBreakdownHtml(breakdown({ usage: usage({ source: 'estimate', tokenizer: 'o200k_base', tokenizerStatus: 'exact' }) }), full);
    assert.match(exact, /Estimated: no model API count since the thread began or was last compacted, so the whole context is counted exactly with the model&#39;s tokenizer \(o200k_base\)\./);
    const approx = renderBreakdownHtml(breakdown({ usage: usage({ source: 'api+estimate', tokenizer: 'estimate:o200k', tokenizerStatus: 'estimate' }) }), full);
    assert.match(approx, /estimated: the model&#39;s own tokenizer is not available here/);
    assert.match(renderBreakdownHtml(breakdown({ usage: usage({ source: 'api' }) }), full), /Exact: the model API&#39;s own count/);
  });

  test('past the limit and over the window: the overflow is shown above 100%', () => {
    const b = breakdown({ usage: usage({ usedTokens: 140_000, tier: 'compact' }), overflowTokens: 12_000 });
    const html = renderBreakdownHtml(b, full);
    assert.match(html, /140k\/128k tokens \(109%\) <span class="over" id="overflow">12k tokens over the window<\/span>/);
    assert.match(html, /24\.8k tokens past the auto-compact limit/);
    assert.match(html, /class="grid overflow"/);
  });

  test('collapsible details with human names, largest first', () => {
    const b = breakdown();
    b.categories[5].details = [
      { name: 'toolResults', tokens: 20_000 },
      { name: 'userMessages', tokens: 9_000 },
      { name: '(unattributed)', tokens: 45 },
    ];
    b.categories[0].details = [{ name: 'baseInstructions', tokens: 4_800 }];
    const html = renderBreakdownHtml(b, full);
    assert.match(html, /<details class="category" data-category="messages"><summary>/);
    for (const raw of ['toolResults', 'userMessages', '(unattributed)', 'baseInstructions']) {
      assert.ok(!html.includes(`>${raw}<`), `raw name ${raw} shown`);
    }
    assert.ok(html.indexOf('Tool results') < html.indexOf('Your messages'));
    assert.ok(html.includes('Not attributed to an item (the API counted more)'));
    assert.ok(html.includes('Base instructions'));
    // Tool names and file paths are the user's own and stay as they are.
    assert.ok(html.indexOf('>shell<') < html.indexOf('>read_file<'));
    assert.ok(html.includes('>AGENTS.md<'));
  });

  test('Compact and Snapshot buttons are command links, only when the daemon serves them', () => {
    const html = renderBreakdownHtml(breakdown(), full);
    assert.match(html, /<a class="button" id="compact" href="command:ctxd\.compactNow">Compact now<\/a>/);
    assert.match(html, /<a class="button secondary" id="snapshot" href="command:ctxd\.snapshot">Snapshot now<\/a>/);
    assert.doesNotMatch(renderBreakdownHtml(breakdown(), opts), /class="actions"/);
    for (const cmd of html.match(/command:[\w.]+/g) ?? []) assert.ok((PAGE_COMMANDS as readonly string[]).includes(cmd.slice(8)), cmd);
  });

  test('cost, priced or not', () => {
    const priced = renderBreakdownHtml(breakdown({ cost: { currency: 'USD', input: 0.12, cachedInput: 0.01, output: 0.3, total: 0.43, priced: true } }), full);
    assert.match(priced, /id="cost">Cost so far: \$0\.43 = input \$0\.12 \+ cache reads \$0\.01 \+ cache writes \$0\.00 \+ output \$0\.30\./);
    const unpriced = renderBreakdownHtml(breakdown({ cost: { currency: 'USD', input: 0, cachedInput: 0, output: 0, total: 0, priced: false } }), full);
    assert.match(unpriced, /no price is known for model gpt-5/);
    assert.doesNotMatch(renderBreakdownHtml(breakdown(), full), /id="cost"/);
  });

  test('cache writes are a part, and the parts as shown add up to the total as shown', () => {
    // A Claude session: $0.0006 input, $3.90 cache reads, $0.7794 cache writes, $0.64 output.
    const cost = { currency: 'USD' as const, input: 0.0006, cachedInput: 3.9, cacheWrite: 0.7794, cacheWrite1h: 0.5, output: 0.64, total: 5.32, priced: true };
    const html = renderBreakdownHtml(breakdown({ cost }), full);
    assert.match(html, /Cost so far: \$5\.32 = input \$0\.00 \+ cache reads \$3\.90 \+ cache writes \$0\.78 \+ output \$0\.64; the cache writes include \$0\.50 of 1-hour writes\./);
    for (let n = 0; n < 200; n++) {
      const parts = [n * 0.00137, n * 0.0291, n * 0.00555, n * 0.0173];
      const total = parts.reduce((a, b) => a + b, 0);
      const shown = costCents({ currency: 'USD', input: parts[0], cachedInput: parts[1], cacheWrite: parts[2], output: parts[3], total, priced: true });
      assert.equal(shown.parts.reduce((a, b) => a + b, 0), shown.total);
    }
  });

  test("a followed session: the agent's figures and what is inferred are said", () => {
    const html = renderBreakdownHtml(
      breakdown({ limitSource: 'window: the catalogue; auto-compact: Claude Code 2.1.332', inferred: { systemPrompt: "the first request's reported input less the messages it carried" } }),
      full,
    );
    assert.match(html, /id="limit-source">The agent's own figures: window: the catalogue; auto-compact: Claude Code 2\.1\.332\./);
    assert.match(html, /System prompt is inferred: the first request&#39;s reported input less the messages it carried\./);
  });

  test('built-in and MCP swatches differ in colour and in pattern', () => {
    const html = renderBreakdownHtml(breakdown(), full);
    const rule = (name: string) => html.match(new RegExp(`\\.c-${name} \\{([^}]*)\\}`))?.[1] ?? '';
    assert.match(rule('builtinTools'), /charts-orange/);
    assert.match(rule('mcpTools'), /ansiCyan/);
    assert.match(rule('mcpTools'), /repeating-linear-gradient/);
    assert.doesNotMatch(rule('builtinTools'), /gradient/);
  });

  test('is safe: escaped text, a CSP with the nonce, no script, no style attributes', () => {
    const html = renderBreakdownHtml(breakdown({ model: '<img src=x onerror=alert(1)>' }), full);
    assert.ok(!html.includes('<img'));
    assert.ok(html.includes('&lt;img src=x onerror=alert(1)&gt;'));
    assert.ok(html.includes('pdf &lt;x&gt;'));
    assert.ok(html.includes('ws &lt;1&gt;'));
    assert.match(html, /default-src 'none'; style-src vscode-webview:\/\/x 'nonce-NONCE123'/);
    assert.match(html, /<style nonce="NONCE123">/);
    assert.doesNotMatch(html, /<script/i);
    assert.doesNotMatch(html, /\sstyle="/);
  });

  test('a daemon that sends only the usage still renders its total', () => {
    const b = normalizeBreakdown({ usage: usage() });
    assert.equal(b.contextWindow, 128_000);
    assert.equal(b.overflowTokens, 0);
    const html = renderBreakdownHtml(b, opts);
    assert.match(html, /does not report a breakdown/);
    assert.match(html, /48\.2k\/128k/);
  });

  test('message page, with command links', () => {
    const html = renderMessageHtml('ctxd stopped after 5 crashes in 3 minutes.', { cspSource: 's', nonce: 'n' }, [{ label: 'Restart', command: 'ctxd.restart' }]);
    assert.match(html, /<p id="message">ctxd stopped after 5 crashes in 3 minutes\.<\/p>/);
    assert.match(html, /<a class="button" href="command:ctxd\.restart">Restart<\/a>/);
    assert.match(renderMessageHtml('a < b', { cspSource: 's', nonce: 'n' }), /<p id="message">a &lt; b<\/p>/);
    assert.equal(escapeHtml(`"'&`), '&quot;&#39;&amp;');
  });
});

describe('human names', () => {
  test('known keys, camelCase split, the user own names kept', () => {
    assert.equal(detailLabel('assistantMessages'), 'Assistant replies');
    assert.equal(detailLabel('toolCalls'), 'Tool calls');
    assert.equal(detailLabel('mcpServerInstructions'), 'Mcp server instructions');
    assert.equal(detailLabel('(something)'), 'Other');
    assert.equal(detailLabel('read_file'), 'read_file');
    assert.equal(detailLabel('docs/AGENTS.md'), 'docs/AGENTS.md');
  });
});
