/**
 * The context breakdown as a web page, laid out as Claude Code's `/context`: a grid of coloured
 * cells (one per 1% of the window) with its legend beside it, then how many tokens are left before
 * auto-compact, whether the counts are exact or estimated (and why), the cost, and the categories
 * with collapsible details. Pure: a Breakdown in, an HTML string out. The page has no script; its
 * Compact and Snapshot buttons are command links the panel allows.
 */
import type { Breakdown, Category, Cost, UsageSnapshot } from './protocol';
import { formatTokens } from './numbers';
import { SPARE_CATEGORIES, categoryLabel, categoryPct, detailLabel, usagePercent } from './status';

export interface RenderOptions {
  /** The webview's `cspSource`, allowed as a style source. */
  cspSource: string;
  /** Nonce for the inline style element. */
  nonce: string;
  /** Workspace folder name shown in the heading. */
  folderName: string;
  /** The thread's name for people (its title, "Claude Code: fix the tests"), never its id. */
  thread: string;
  /** Sentences under the figures (a followed session is read-only; Codex's own "% left"). */
  notes?: string[];
  /** Whether the daemon can compact / snapshot this thread (buttons are left out otherwise). */
  canCompact?: boolean;
  canSnapshot?: boolean;
}

export const GRID_CELLS = 100;

/** Commands the page links to; the panel allows exactly these. */
export const PAGE_COMMANDS = ['ctxd.compactNow', 'ctxd.snapshot', 'ctxd.restart', 'ctxd.showLog'] as const;

/**
 * Swatches: theme chart colours with fallbacks. Built-in and MCP tools differ in hue and in
 * pattern (MCP is striped), so they stay apart in light, dark and high-contrast themes alike.
 */
const COLORS: Record<string, string> = {
  systemPrompt: 'background-color: var(--vscode-charts-purple, #b180d7);',
  builtinTools: 'background-color: var(--vscode-charts-orange, #d18616);',
  mcpTools:
    'background-color: var(--vscode-terminal-ansiCyan, #11a8cd); ' +
    'background-image: repeating-linear-gradient(135deg, transparent 0 3px, rgba(255, 255, 255, 0.55) 3px 5px);',
  skills: 'background-color: var(--vscode-charts-green, #89d185);',
  memoryFiles: 'background-color: var(--vscode-charts-red, #f14c4c);',
  messages: 'background-color: var(--vscode-charts-blue, #3794ff);',
};
const FALLBACK_COLOR = 'background-color: var(--vscode-charts-foreground, #cccccc);';

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

/** Whether the counts are exact or estimated, and why, in one sentence. */
export function accuracyText(usage: UsageSnapshot): string {
  const counter =
    usage.tokenizerStatus === 'exact'
      ? `counted exactly with the model's tokenizer${usage.tokenizer ? ` (${usage.tokenizer})` : ''}`
      : usage.tokenizerStatus === 'loading'
        ? 'estimated while the exact tokenizer loads'
        : usage.tokenizer || usage.tokenizerStatus
          ? "estimated: the model's own tokenizer is not available here"
          : 'counted by ctxd';
  if (usage.source === 'api') return "Exact: the model API's own count of the last request.";
  if (usage.source === 'api+estimate') {
    return `The model API's count of the last request, plus what was added since, ${counter}.`;
  }
  return `Estimated: no model API count since the thread began or was last compacted, so the whole context is ${counter}.`;
}

/** The tier as the gauge's colour says it, in words. */
export function tierText(usage: UsageSnapshot): string {
  if (usage.tier === 'compact') return 'Red in the status bar: the thread reached the auto-compact limit.';
  if (usage.tier === 'warn') return 'Yellow in the status bar: the thread is close to the auto-compact limit.';
  return 'Plenty of room before the auto-compact limit.';
}

/** "N tokens left before auto-compact", or how far past it the thread is. */
export function headroomText(usage: UsageSnapshot, byAgent = false): string {
  if (!(usage.autoCompactLimit > 0)) return 'Auto-compact is off.';
  const left = usage.autoCompactLimit - usage.usedTokens;
  if (left > 0) return `${formatTokens(left)} tokens left before auto-compact (at ${formatTokens(usage.autoCompactLimit)}).`;
  const who = byAgent ? 'the agent compacts it by itself' : 'ctxd compacts before the next request';
  return `${formatTokens(-left)} tokens past the auto-compact limit (${formatTokens(usage.autoCompactLimit)}): ${who}.`;
}

function money(n: number, currency: string): string {
  const symbol = currency === 'USD' ? '$' : `${currency} `;
  return `${symbol}${n.toFixed(2)}`;
}

const COST_PARTS = [
  ['input', 'input'],
  ['cachedInput', 'cache reads'],
  ['cacheWrite', 'cache writes'],
  ['output', 'output'],
] as const;

/**
 * The total and its parts in whole cents, the parts rounded (largest remainder) so that they add
 * up to the total as shown: the daemon's rule too (ctxd/sessions/pricing.py `cents`).
 */
export function costCents(cost: Cost): { total: number; parts: number[] } {
  const total = Math.round(cost.total * 100);
  const exact = COST_PARTS.map(([key]) => Math.max(0, (cost[key] ?? 0) * 100));
  const parts = exact.map(Math.floor);
  let left = total - parts.reduce((a, b) => a + b, 0);
  const order = exact.map((_, i) => i).sort((a, b) => exact[b] - parts[b] - (exact[a] - parts[a]) || a - b);
  for (const i of order) {
    if (left <= 0) break;
    parts[i] += 1;
    left -= 1;
  }
  return { total, parts };
}

export function costText(cost: Cost | undefined, model: string | null): string | undefined {
  if (!cost) return undefined;
  if (!cost.priced) return `Cost: no price is known for ${model ? `model ${model}` : 'this model'}.`;
  const c = cost.currency;
  const { total, parts } = costCents(cost);
  const listed = COST_PARTS.map(([, label], i) => `${label} ${money(parts[i] / 100, c)}`).join(' + ');
  const hour = cost.cacheWrite1h ? `; the cache writes include ${money(cost.cacheWrite1h, c)} of 1-hour writes` : '';
  return `Cost so far: ${money(total / 100, c)} = ${listed}${hour}.`;
}

function styles(categories: Category[]): string {
  const rules = categories
    .filter((c) => !SPARE_CATEGORIES.has(c.name))
    .map((c) => `.c-${slug(c.name)} { ${COLORS[c.name] ?? FALLBACK_COLOR} }`);
  return `
body { font-family: var(--vscode-font-family); color: var(--vscode-foreground); padding: 0 16px 16px; }
h1 { font-size: 1.3em; margin: 12px 0 4px; }
.sub, .note { color: var(--vscode-descriptionForeground); margin: 4px 0; }
.total { font-size: 1.15em; margin: 10px 0 2px; }
.over { color: var(--vscode-errorForeground, #f14c4c); font-weight: 600; }
.layout { display: flex; flex-wrap: wrap; gap: 24px; align-items: flex-start; margin: 12px 0; }
.grid { display: grid; grid-template-columns: repeat(10, 16px); gap: 3px; }
.grid.overflow { outline: 2px solid var(--vscode-errorForeground, #f14c4c); outline-offset: 3px; }
.cell { width: 16px; height: 16px; border-radius: 2px; box-sizing: border-box; }
.legend { border-collapse: collapse; }
.legend td { padding: 2px 14px 2px 0; }
.num { text-align: right; font-variant-numeric: tabular-nums; }
.c-freeSpace { background: transparent; border: 1px solid var(--vscode-descriptionForeground, #888); }
.c-autocompactBuffer { background: repeating-linear-gradient(45deg, var(--vscode-descriptionForeground, #888) 0 2px, transparent 2px 5px); }
${rules.join('\n')}
.swatch { display: inline-block; width: 11px; height: 11px; margin-right: 7px; border-radius: 2px; vertical-align: -1px; box-sizing: border-box; }
.actions { margin: 14px 0; display: flex; gap: 8px; }
.button { display: inline-block; padding: 4px 12px; border-radius: 2px; text-decoration: none;
  color: var(--vscode-button-foreground); background: var(--vscode-button-background); }
.button:hover { background: var(--vscode-button-hoverBackground); }
.button.secondary { color: var(--vscode-button-secondaryForeground); background: var(--vscode-button-secondaryBackground); }
details { margin: 2px 0; max-width: 560px; }
summary { cursor: pointer; display: flex; gap: 8px; padding: 2px 0; list-style: none; }
summary::-webkit-details-marker { display: none; }
summary .twisty { width: 12px; flex: none; color: var(--vscode-icon-foreground, var(--vscode-foreground)); }
summary .twisty::before { content: '▸'; }
details[open] > summary .twisty::before { content: '▾'; }
details.empty > summary { cursor: default; }
details.empty > summary .twisty::before { content: ''; }
summary .name { flex: 1; }
summary .num { min-width: 64px; }
details ul { list-style: none; margin: 2px 0 6px 42px; padding: 0; color: var(--vscode-descriptionForeground); }
details li { display: flex; gap: 8px; }
details li .name { flex: 1; }
details li .num { min-width: 64px; }
`;
}

function page(opts: Pick<RenderOptions, 'cspSource' | 'nonce'>, css: string, body: string): string {
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

function legendRow(c: Category, window: number): string {
  return (
    `<tr data-category="${escapeHtml(c.name)}"><td><span class="swatch c-${slug(c.name)}"></span>${escapeHtml(categoryLabel(c.name))}</td>` +
    `<td class="num">${formatTokens(c.tokens)}</td><td class="num">${categoryPct(c, window)}</td></tr>`
  );
}

function categoryDetails(c: Category, window: number): string {
  const summary =
    `<summary><span class="twisty" aria-hidden="true"></span><span class="name"><span class="swatch c-${slug(c.name)}"></span>${escapeHtml(categoryLabel(c.name))}</span>` +
    `<span class="num">${formatTokens(c.tokens)}</span><span class="num">${categoryPct(c, window)}</span></summary>`;
  const details = [...(c.details ?? [])].sort((a, b) => b.tokens - a.tokens);
  const items = details.map(
    (d) =>
      `<li><span class="name">${escapeHtml(detailLabel(d.name))}</span><span class="num">${formatTokens(d.tokens)}</span>` +
      `<span class="num">${pct(d.tokens, window)}</span></li>`,
  );
  return `<details class="category${items.length ? '' : ' empty'}" data-category="${escapeHtml(c.name)}">${summary}${items.length ? `<ul>${items.join('')}</ul>` : '<ul><li>No details.</li></ul>'}</details>`;
}

/** The breakdown page. */
export function renderBreakdownHtml(breakdown: Breakdown, opts: RenderOptions): string {
  const window = breakdown.contextWindow;
  const cats = breakdown.categories;
  const u = breakdown.usage;
  const overflow = breakdown.overflowTokens ?? Math.max(0, u.usedTokens - window);
  const parts: string[] = [];
  parts.push('<h1>Context Usage</h1>');
  parts.push(
    `<p class="sub">${escapeHtml(opts.folderName)} · <span id="thread">${escapeHtml(opts.thread)}</span> · ` +
      (breakdown.model ? `model <code>${escapeHtml(breakdown.model)}</code> · ` : '') +
      `window ${formatTokens(window)} tokens</p>`,
  );
  parts.push(
    `<p class="total" id="total">${formatTokens(u.usedTokens)}/${formatTokens(window)} tokens ` +
      `(${usagePercent({ usedTokens: u.usedTokens, contextWindow: window })}%)` +
      (overflow > 0 ? ` <span class="over" id="overflow">${formatTokens(overflow)} tokens over the window</span>` : '') +
      '</p>',
  );
  parts.push(`<p class="sub" id="headroom">${escapeHtml(headroomText(u, breakdown.limitSource !== undefined))}</p>`);
  parts.push(`<p class="note" id="accuracy">${escapeHtml(accuracyText(u))}</p>`);
  if (breakdown.limitSource) parts.push(`<p class="note" id="limit-source">The agent's own figures: ${escapeHtml(breakdown.limitSource)}.</p>`);
  for (const [name, how] of Object.entries(breakdown.inferred ?? {})) {
    parts.push(`<p class="note inferred">${escapeHtml(categoryLabel(name))} is inferred: ${escapeHtml(how)}.</p>`);
  }
  for (const note of opts.notes ?? []) parts.push(`<p class="note agent-note">${escapeHtml(note)}</p>`);
  const cost = costText(breakdown.cost, breakdown.model);
  if (cost) parts.push(`<p class="sub" id="cost">${escapeHtml(cost)}</p>`);
  const buttons = [
    opts.canCompact ? '<a class="button" id="compact" href="command:ctxd.compactNow">Compact now</a>' : '',
    opts.canSnapshot ? '<a class="button secondary" id="snapshot" href="command:ctxd.snapshot">Snapshot now</a>' : '',
  ].filter(Boolean);
  if (buttons.length) parts.push(`<div class="actions">${buttons.join('')}</div>`);

  if (cats.length === 0) {
    parts.push('<p class="note">This daemon does not report a breakdown by category yet.</p>');
  } else {
    const cells = allocateCells(cats, window);
    const grid =
      `<div class="grid${overflow > 0 ? ' overflow' : ''}" role="img" aria-label="Context window, one cell per 1%">` +
      cells.map((name) => `<span class="cell c-${slug(name)}" title="${escapeHtml(categoryLabel(name))}"></span>`).join('') +
      '</div>';
    const legend = `<table class="legend"><tbody>${cats.map((c) => legendRow(c, window)).join('')}</tbody></table>`;
    parts.push(`<div class="layout">${grid}${legend}</div>`);
    parts.push('<h2 class="sub">Details</h2>');
    parts.push(cats.filter((c) => !SPARE_CATEGORIES.has(c.name)).map((c) => categoryDetails(c, window)).join('\n'));
  }
  parts.push(`<p class="sub" id="state">${escapeHtml(tierText(u))}</p>`);
  return page(opts, styles(cats), parts.join('\n'));
}

/** A page with a message and, optionally, command links (daemon down, no folder, errors). */
export function renderMessageHtml(
  message: string,
  opts: Pick<RenderOptions, 'cspSource' | 'nonce'>,
  links: { label: string; command: (typeof PAGE_COMMANDS)[number] }[] = [],
): string {
  const actions = links.length
    ? `<div class="actions">${links.map((l) => `<a class="button" href="command:${l.command}">${escapeHtml(l.label)}</a>`).join('')}</div>`
    : '';
  return page(
    opts,
    `body { font-family: var(--vscode-font-family); color: var(--vscode-foreground); padding: 16px; }
.actions { margin: 14px 0; display: flex; gap: 8px; }
.button { display: inline-block; padding: 4px 12px; border-radius: 2px; text-decoration: none;
  color: var(--vscode-button-foreground); background: var(--vscode-button-background); }`,
    `<h1>Context Usage</h1><p id="message">${escapeHtml(message)}</p>${actions}`,
  );
}
