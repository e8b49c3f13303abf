/**
 * The status-bar gauge as pure functions: from a UsageSnapshot (and, when known, a Breakdown) to
 * the item's text, tooltip and colour. Kept free of `vscode` so the exact strings are unit-tested.
 */
import { agentOf } from './agents';
import type { StopReason } from './daemon';
import { type ThreadFacts, threadLabel } from './followed';
import { cacheLines } from './cacheText';
import { formatTokens } from './numbers';
import type { Breakdown, Category, UsageSnapshot } from './protocol';

/** How the counts were made, in words (the daemon's `source` and `tokenizerStatus`). */
export function countedText(usage: Pick<UsageSnapshot, 'source' | 'tokenizerStatus'>): string {
  const exact = usage.tokenizerStatus === 'exact';
  const loading = usage.tokenizerStatus === 'loading';
  const rest = exact ? 'counted exactly' : loading ? 'estimated while the exact counter loads' : 'estimated';
  if (usage.source === 'api') return "Counted by the model's API on the last request.";
  if (usage.source === 'api+estimate') return `The model API's count of the last request, plus what was added since (${rest}).`;
  return exact ? 'Counted exactly by ctxd (the model has not reported a count yet).' : `Estimated by ctxd (${rest}; the model has not reported a count yet).`;
}

/** Theme colour ids of the status bar's warning and error backgrounds. */
export const WARNING_BACKGROUND = 'statusBarItem.warningBackground';
export const ERROR_BACKGROUND = 'statusBarItem.errorBackground';

export type GaugeLevel = 'normal' | 'warning' | 'error';

export interface GaugeView {
  text: string;
  /** Markdown. */
  tooltip: string;
  level: GaugeLevel;
  /** Theme colour id for the item's background, undefined for the normal tier. */
  backgroundColor: string | undefined;
}

const LABELS: Record<string, string> = {
  systemPrompt: 'System prompt',
  builtinTools: 'Built-in tools',
  mcpTools: 'MCP tools',
  skills: 'Skills',
  memoryFiles: 'Memory files',
  messages: 'Messages',
  freeSpace: 'Free space',
  autocompactBuffer: 'Autocompact buffer',
};

/** Categories that are room left rather than tokens spent. */
export const SPARE_CATEGORIES: ReadonlySet<string> = new Set(['freeSpace', 'autocompactBuffer']);

/** The daemon's detail rows (ledger kinds, prompt parts) as people say them. */
const DETAIL_LABELS: Record<string, string> = {
  baseInstructions: 'Base instructions',
  userMessages: 'Your messages',
  assistantMessages: 'Assistant replies',
  toolCalls: 'Tool calls',
  toolResults: 'Tool results',
  reasoning: 'Reasoning',
  images: 'Images',
  compactionSummaries: 'Compaction summaries',
  compaction: 'Compacted history',
  developerMessages: 'Developer messages',
  systemMessages: 'System messages',
  '(unattributed)': 'Not attributed to an item (the API counted more)',
};

export function categoryLabel(name: string): string {
  return LABELS[name] ?? detailLabel(name);
}

/**
 * A detail row's name for people: known camelCase keys are translated, other camelCase
 * identifiers are split into words ("mcpServerTools" → "Mcp server tools"); names that are
 * already the user's own (tool names, file paths) are kept as they are.
 */
export function detailLabel(name: string): string {
  if (DETAIL_LABELS[name]) return DETAIL_LABELS[name];
  if (/^[a-z]+(?:[A-Z][a-z0-9]*)+$/.test(name)) {
    const words = name.replace(/([A-Z])/g, ' $1').toLowerCase();
    return words.charAt(0).toUpperCase() + words.slice(1);
  }
  if (/^\(.*\)$/.test(name)) return 'Other';
  return name;
}

/** Share of the window in whole percent, computed from the counts so text and numbers agree. */
export function usagePercent(usage: Pick<UsageSnapshot, 'usedTokens' | 'contextWindow'>): number {
  if (!(usage.contextWindow > 0)) return 0;
  return Math.round((100 * usage.usedTokens) / usage.contextWindow);
}

/** `$(pulse) 38% · 48.2k/128k`, or `$(pulse) Codex 43% · 55k/128k` for an agent's thread (its label from agents.ts). */
export function gaugeText(usage: UsageSnapshot, source?: string | null): string {
  const label = source ? agentOf(source).label : undefined;
  return `$(pulse) ${label ? `${label} ` : ''}${usagePercent(usage)}% · ${formatTokens(usage.usedTokens)}/${formatTokens(usage.contextWindow)}`;
}

/** The tokens Codex sets aside before it says "% context left" (codex-rs `BASELINE_TOKENS`; docs/sessions.md). */
export const CODEX_BASELINE_TOKENS = 12_000;

/** Codex's own "N% context left" for the same tokens and window: 100 − round(100 × (tokens − 12k) ÷ (window − 12k)). */
export function codexPercentLeft(usage: Pick<UsageSnapshot, 'usedTokens' | 'contextWindow'>): number | undefined {
  const room = usage.contextWindow - CODEX_BASELINE_TOKENS;
  if (!(room > 0)) return undefined;
  const used = Math.max(0, usage.usedTokens - CODEX_BASELINE_TOKENS);
  return Math.max(0, Math.min(100, 100 - Math.round((100 * used) / room)));
}

/** Why Codex's own figure differs from the gauge's, in one sentence (Codex threads only). */
export function codexNote(usage: UsageSnapshot): string | undefined {
  const left = codexPercentLeft(usage);
  if (left === undefined) return undefined;
  return (
    `Codex itself shows ${left}% context left: it sets a ${formatTokens(CODEX_BASELINE_TOKENS)}-token baseline (its prompts and tools) ` +
    `aside from both the tokens and the window; the gauge is the plain share, ${usagePercent(usage)}% used.`
  );
}

export function gaugeLevel(usage: UsageSnapshot): GaugeLevel {
  if (usage.tier === 'compact') return 'error';
  if (usage.tier === 'warn') return 'warning';
  return 'normal';
}

export function levelBackground(level: GaugeLevel): string | undefined {
  if (level === 'error') return ERROR_BACKGROUND;
  if (level === 'warning') return WARNING_BACKGROUND;
  return undefined;
}

/** The categories that spend tokens, largest first. */
export function topCategories(breakdown: Breakdown, count = 4): Category[] {
  return breakdown.categories
    .filter((c) => !SPARE_CATEGORIES.has(c.name) && c.tokens > 0)
    .sort((a, b) => b.tokens - a.tokens)
    .slice(0, count);
}

/**
 * A category's share of the window as the daemon gives it (`percent`: Python's round, half to even),
 * not recomputed: toFixed rounds a tie up (320 of 128k tokens: the daemon's 0.2%, toFixed's 0.3%).
 */
export function categoryPct(c: Pick<Category, 'tokens' | 'percent'>, window: number): string {
  if (typeof c.percent === 'number' && Number.isFinite(c.percent)) return `${c.percent.toFixed(1)}%`;
  return window > 0 ? `${((100 * c.tokens) / window).toFixed(1)}%` : '0.0%';
}

/** `now` (ms) dates the cache's state ("warm for 3 min"). */
export function gaugeTooltip(
  usage: UsageSnapshot,
  where: { folderName: string } & ThreadFacts,
  breakdown?: Breakdown,
  now: number = Date.now(),
): string {
  const lines = [
    `**ctxd** · ${escapeMarkdown(where.folderName)} · ${escapeMarkdown(threadLabel(where))}`,
    '',
    `${formatTokens(usage.usedTokens)} of ${formatTokens(usage.contextWindow)} tokens ` +
      `(${usagePercent(usage)}%) · auto-compact at ${formatTokens(usage.autoCompactLimit)}`,
    '',
    countedText(usage),
  ];
  const codex = where.source === 'codex' ? codexNote(usage) : undefined;
  if (codex) lines.push('', codex);
  if (breakdown) {
    const top = topCategories(breakdown);
    if (top.length > 0) {
      lines.push('', 'Top categories:', '');
      for (const c of top) {
        lines.push(
          `- ${categoryLabel(c.name)}: ${formatTokens(c.tokens)} (${categoryPct(c, breakdown.contextWindow)})`,
        );
      }
    }
  }
  for (const line of cacheLines(breakdown?.cache, now)) lines.push('', line);
  lines.push('', 'Click for the ctxd menu (breakdown, compact, snapshot, threads).');
  return lines.join('\n');
}

export function gaugeView(
  usage: UsageSnapshot,
  where: { folderName: string } & ThreadFacts,
  breakdown?: Breakdown,
  now: number = Date.now(),
): GaugeView {
  const level = gaugeLevel(usage);
  return {
    text: gaugeText(usage, where.source),
    tooltip: gaugeTooltip(usage, where, breakdown, now),
    level,
    backgroundColor: levelBackground(level),
  };
}

/** Before the first usage of the active thread is known. */
export function idleView(folderName: string | undefined): GaugeView {
  return {
    text: '$(pulse) ctxd',
    tooltip: folderName
      ? `**ctxd** · ${escapeMarkdown(folderName)}\n\nNo usage recorded yet.`
      : '**ctxd**\n\nOpen a folder to track context usage.',
    level: 'normal',
    backgroundColor: undefined,
  };
}

/** When the daemon is not running; a click opens the menu with the way out. */
export function downView(reason: StopReason): GaugeView {
  const text =
    reason.kind === 'notInstalled' ? '$(debug-disconnect) ctxd not installed' : reason.kind === 'crashed' ? '$(error) ctxd stopped' : '$(debug-disconnect) ctxd';
  const next = reason.kind === 'notInstalled' ? 'Click to install it or set its path.' : 'Click to restart it or see the log.';
  return {
    text,
    tooltip: `**ctxd** is not running.\n\n${escapeMarkdown(reason.message)}\n\n${next}`,
    level: 'error',
    backgroundColor: ERROR_BACKGROUND,
  };
}

function escapeMarkdown(s: string): string {
  return s.replace(/[\\`*_{}[\]()#+!<>|]/g, (c) => `\\${c}`);
}

/** How a compaction was done, in words; one with no strategy was the agent's own (Codex, Claude Code). */
export function strategyText(strategy: string | null | undefined): string {
  const words: Record<string, string> = {
    llm: 'summarised by the model',
    remote: "summarised by the model provider's endpoint",
    offline: 'shortened without a model',
    auto: 'compacted',
  };
  return strategy ? (words[strategy] ?? strategy) : 'compacted by the agent itself';
}
