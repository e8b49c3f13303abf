import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { GRID_CELLS, allocateCells, escapeHtml, renderBreakdownHtml, renderMessageHtml } from '../src/breakdownView';
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
    const cats = [1, 1, 1].map((t, i) => ({ name: `c${i}`, tokens: t, percent: 0, details: [] }));
    assert.equal(allocateCells(cats, 3).length, GRID_CELLS);
    assert.deepEqual(allocateCells([], 100), []);
    assert.deepEqual(allocateCells(cats, 0).length, GRID_CELLS);
  });
});

describe('renderBreakdownHtml', () => {
  test('draws the grid, the bar and the table with details, largest detail first', () => {
    const html = renderBreakdownHtml(breakdown(), opts);
    assert.equal((html.match(/class="cell /g) ?? []).length, GRID_CELLS);
    assert.match(html, /<p class="total" id="total">48\.2k\/128k tokens \(38%\)<\/p>/);
    for (const label of ['System prompt', 'Built-in tools', 'MCP tools', 'Skills', 'Memory files', 'Messages', 'Free space', 'Autocompact buffer']) {
      assert.ok(html.includes(`</span>${label}</td>`), label);
    }
    assert.ok(html.indexOf('<td>shell</td>') < html.indexOf('<td>read_file</td>'));
    assert.match(html, /<td>Messages<\/td>|Messages<\/td><td class="num">36\.3k<\/td><td class="num">28\.3%<\/td>/);
  });

  test('is safe: escaped text, a CSP with the nonce, no script, no style attributes', () => {
    const html = renderBreakdownHtml(breakdown({ model: '<img src=x onerror=alert(1)>' }), opts);
    assert.ok(!html.includes('<img'));
    assert.ok(html.includes('&lt;img src=x onerror=alert(1)&gt;'));
    assert.ok(html.includes('pdf &lt;x&gt;'));
    assert.ok(html.includes('ws &lt;1&gt;'));
    assert.match(html, /default-src 'none'; style-src vscode-webview:\/\/x 'nonce-NONCE123'/);
    assert.match(html, /<style nonce="NONCE123">/);
    assert.doesNotMatch(html, /<script/i);
    assert.doesNotMatch(html, /\sstyle="/);
  });

  test('estimated mode says so and shows no total', () => {
    const b = breakdown({ mode: 'estimated', totalTokens: null });
    b.categories = b.categories.filter((c) => c.name !== 'messages');
    const html = renderBreakdownHtml(b, opts);
    assert.match(html, /No API response yet/);
    assert.doesNotMatch(html, /id="total"/);
  });

  test('a daemon that sends only the usage still renders', () => {
    const b = normalizeBreakdown({ usage: usage() });
    assert.equal(b.contextWindow, 128_000);
    assert.equal(b.totalTokens, 48_200);
    const html = renderBreakdownHtml(b, opts);
    assert.match(html, /does not report a breakdown/);
    assert.match(html, /48\.2k\/128k/);
  });

  test('message page', () => {
    assert.match(renderMessageHtml('a < b', { cspSource: 's', nonce: 'n' }), /<p>a &lt; b<\/p>/);
    assert.equal(escapeHtml(`"'&`), '&quot;&#39;&amp;');
  });
});
