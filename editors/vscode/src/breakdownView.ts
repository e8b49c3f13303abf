/**
 * The context breakdown as a web page: a grid of coloured cells (one per 1% of the window, as in
 * Claude Code's `/context`), a stacked bar, and the table of categories with their details.
 * Pure: a Breakdown in, an HTML string out. The page has no script; the panel re-renders it on
 * every `ctxd/usageChanged`.
 */
import type { Breakdown, Category } from './protocol';
import { SPARE_CATEGORIES, categoryLabel, formatTokens, usagePercent } from './status';

export interface RenderOptions {
  /** The webview's `cspSource`, allowed as a style source. */
  cspSource: string;
  /** Nonce for the inline style element. */
  nonce: string;
  /** Workspace folder name shown in the heading. */
  folderName: string;
  thread: string;
}

export const GRID_CELLS = 100;

const COLORS: Record<string, string> = {
  systemPrompt: 'var(--vscode-charts-purple, #b180d7)',
  builtinTools: 'var(--vscode-charts-orange, #d18616)',
  mcpTools: 'var(--vscode-charts-yellow, #cca700)',
  skills: 'var(--vscode-charts-green, #89d185)',
  memoryFiles: 'var(--vscode-charts-red, #f14c4c)',
  messages: 'var(--vscode-charts-blue, #3794ff)',
};
const FALLBACK_COLOR = 'var(--vscode-charts-foreground, #cccccc)';

/** CSS class suffix for a category (names are camelCase identifiers; anything else is cleaned). */
function slug(name: string): string {
  return name.replace(/[^A-Za-z0-9_-]/g, '_');
}

/**
 * Share GRID_CELLS cells among the categories in proportion to their tokens (largest remainder,
 * so the cells always add up to the grid). Returns the category name of each cell, in order.
 */
export function allocateCells(categories: Category[], contextWindow: number, cells = GRID_CELLS): string[] {
  const total = contextWindow > 0 ? contextWindow : categories.reduce((s, c) => s + c.tokens, 0);
  if (!(total > 0) || categories.length === 0) return [];
  const exact = categories.map((c) => (Math.max(0, c.tokens) * cells) / total);
  const counts = exact.map(Math.floor);
  let left = cells - counts.reduce((s, n) => s + n, 0);
  const order = exact
    .map((x, i) => ({ i, rest: x - Math.floor(x) }))
    .sort((a, b) => b.rest - a.rest || a.i - b.i);
  for (const { i } of order) {
    if (left <= 0) break;
    counts[i] += 1;
    left -= 1;
  }
  const out: string[] = [];
  categories.forEach((c, i) => {
    for (let k = 0; k < counts[i]; k++) out.push(c.name);
  });
  return out.slice(0, cells);
}

export function escapeHtml(s: string): string {
  return s
    .replace(/&/g, '&amp;')
    .replace(/</g, '&lt;')
    .replace(/>/g, '&gt;')
    .replace(/"/g, '&quot;')
    .replace(/'/g, '&#39;');
}

function pct(tokens: number, window: number): string {
  return window > 0 ? `${((100 * tokens) / window).toFixed(1)}%` : '0.0%';
}

function styles(categories: Category[]): string {
  const rules = categories
    .filter((c) => !SPARE_CATEGORIES.has(c.name))
    .map((c) => `.c-${slug(c.name)} { background: ${COLORS[c.name] ?? FALLBACK_COLOR}; }`);
  return `
body { font-family: var(--vscode-font-family); color: var(--vscode-foreground); padding: 0 16px 16px; }
h1 { font-size: 1.3em; margin: 12px 0 4px; }
.sub { color: var(--vscode-descriptionForeground); margin: 0 0 12px; }
.note { color: var(--vscode-descriptionForeground); font-style: italic; }
.total { font-size: 1.1em; margin: 8px 0; }
.grid { display: grid; grid-template-columns: repeat(20, 14px); gap: 3px; margin: 12px 0; }
.cell { width: 14px; height: 14px; border-radius: 2px; box-sizing: border-box; }
.bar { display: flex; height: 12px; width: 100%; max-width: 640px; border-radius: 3px; overflow: hidden;
  border: 1px solid var(--vscode-panel-border, #80808060); margin: 8px 0 16px; }
.bar > span { display: block; height: 100%; }
.c-freeSpace { background: transparent; border: 1px solid var(--vscode-descriptionForeground, #888); }
.bar .c-freeSpace { border: none; }
.c-autocompactBuffer { background: repeating-linear-gradient(45deg, var(--vscode-descriptionForeground, #888) 0 2px, transparent 2px 5px); }
${rules.join('\n')}
table { border-collapse: collapse; min-width: 420px; }
th, td { text-align: left; padding: 3px 12px 3px 0; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.detail td { color: var(--vscode-descriptionForeground); font-size: 0.92em; }
tr.detail td:first-child { padding-left: 22px; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 6px; border-radius: 2px; vertical-align: baseline; box-sizing: border-box; }
`;
}

function page(opts: RenderOptions, css: string, body: string): string {
  const csp = `default-src 'none'; style-src ${opts.cspSource} 'nonce-${opts.nonce}'; img-src ${opts.cspSource} data:;`;
  return `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="UTF-8">
<meta http-equiv="Content-Security-Policy" content="${csp.replace(/"/g, '&quot;')}">
<meta name="viewport" content="width=device-width, initial-scale=1.0">
<title>Context Usage</title>
<style nonce="${escapeHtml(opts.nonce)}">${css}</style>
</head>
<body>
${body}
</body>
</html>`;
}

/** The breakdown page. */
export function renderBreakdownHtml(breakdown: Breakdown, opts: RenderOptions): string {
  const window = breakdown.contextWindow;
  const cats = breakdown.categories;
  const parts: string[] = [];
  parts.push('<h1>Context Usage</h1>');
  parts.push(
    `<p class="sub">${escapeHtml(opts.folderName)} · thread <code>${escapeHtml(opts.thread)}</code> · ` +
      (breakdown.model ? `model <code>${escapeHtml(breakdown.model)}</code> · ` : '') +
      `window ${formatTokens(window)} tokens</p>`,
  );
  if (breakdown.mode === 'estimated' || breakdown.totalTokens === null) {
    parts.push(
      '<p class="note">No API response yet: these are estimates of the fixed overhead before the conversation.</p>',
    );
  } else {
    const used = breakdown.totalTokens;
    parts.push(
      `<p class="total" id="total">${formatTokens(used)}/${formatTokens(window)} tokens ` +
        `(${usagePercent({ usedTokens: used, contextWindow: window })}%)</p>`,
    );
  }
  if (cats.length === 0) {
    parts.push('<p class="note">This daemon does not report a breakdown by category yet.</p>');
  }
  const cells = allocateCells(cats, window);
  parts.push(
    `<div class="grid" role="img" aria-label="Context window, one cell per 1%">` +
      cells
        .map((name) => `<span class="cell c-${slug(name)}" title="${escapeHtml(categoryLabel(name))}"></span>`)
        .join('') +
      '</div>',
  );
  // Widths go in the stylesheet: the CSP forbids style attributes.
  const segments = cats.filter((c) => c.tokens > 0);
  const widths = segments.map(
    (c, i) => `.seg-${i} { width: ${window > 0 ? ((100 * c.tokens) / window).toFixed(3) : 0}%; }`,
  );
  parts.push(
    '<div class="bar">' +
      segments
        .map((c, i) => `<span class="seg-${i} c-${slug(c.name)}" title="${escapeHtml(categoryLabel(c.name))}"></span>`)
        .join('') +
      '</div>',
  );
  const rows: string[] = [];
  for (const c of cats) {
    rows.push(
      `<tr class="category" data-category="${escapeHtml(c.name)}"><td><span class="swatch c-${slug(c.name)}"></span>` +
        `${escapeHtml(categoryLabel(c.name))}</td><td class="num">${formatTokens(c.tokens)}</td>` +
        `<td class="num">${pct(c.tokens, window)}</td></tr>`,
    );
    const details = [...(c.details ?? [])].sort((a, b) => b.tokens - a.tokens);
    for (const d of details) {
      rows.push(
        `<tr class="detail"><td>${escapeHtml(d.name)}</td><td class="num">${formatTokens(d.tokens)}</td>` +
          `<td class="num">${pct(d.tokens, window)}</td></tr>`,
      );
    }
  }
  parts.push(
    '<table><thead><tr><th>Category</th><th class="num">Tokens</th><th class="num">Share</th></tr></thead>' +
      `<tbody>${rows.join('')}</tbody></table>`,
  );
  const u = breakdown.usage;
  parts.push(
    `<p class="sub">Auto-compact at ${formatTokens(u.autoCompactLimit)} tokens · tier ${escapeHtml(u.tier)} · ` +
      `source ${escapeHtml(u.source)} · history version ${u.historyVersion}</p>`,
  );
  return page(opts, styles(cats) + widths.join('\n'), parts.join('\n'));
}

/** A page with a single message, for "no folder" and error states. */
export function renderMessageHtml(message: string, opts: Pick<RenderOptions, 'cspSource' | 'nonce'>): string {
  return page(
    { ...opts, folderName: '', thread: '' },
    'body { font-family: var(--vscode-font-family); color: var(--vscode-foreground); padding: 16px; }',
    `<h1>Context Usage</h1><p>${escapeHtml(message)}</p>`,
  );
}
