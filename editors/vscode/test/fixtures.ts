/** Hand-made protocol values for the pure tests. */
import type { Breakdown, Category, UsageSnapshot } from '../src/protocol';

/**
 * The agents' names as the daemon's `initialize` answer gives them (`capabilities.experimental.ctxd.agents`;
 * api.test.ts checks this against the real daemon's): the pure tests that show names pass it to `setAgentNames`.
 */
export const AGENT_NAMES: Readonly<Record<string, string>> = {
  codex: 'Codex',
  claude: 'Claude Code',
  qwen: 'Qwen Code',
  gemini: 'Gemini CLI',
  opencode: 'OpenCode',
};

export function usage(over: Partial<UsageSnapshot> = {}): UsageSnapshot {
  return {
    usedTokens: 48_200,
    contextWindow: 128_000,
    percent: 37.7,
    autoCompactLimit: 115_200,
    tier: 'ok',
    source: 'api+estimate',
    historyVersion: 3,
    ...over,
  };
}

/** A breakdown whose categories add up to the window, as the daemon guarantees. */
export function breakdown(over: Partial<Breakdown> = {}): Breakdown {
  const window = 128_000;
  const cats: Omit<Category, 'percent'>[] = [
    { name: 'systemPrompt', tokens: 4_800, details: [] },
    { name: 'builtinTools', tokens: 5_200, details: [{ name: 'read_file', tokens: 900 }, { name: 'shell', tokens: 1_400 }] },
    { name: 'mcpTools', tokens: 0, details: [] },
    { name: 'skills', tokens: 1_100, details: [{ name: 'pdf <x>', tokens: 300 }] },
    { name: 'memoryFiles', tokens: 845, details: [{ name: 'AGENTS.md', tokens: 845 }] },
    { name: 'messages', tokens: 36_255, details: [] },
    { name: 'freeSpace', tokens: 66_999, details: [] },
    { name: 'autocompactBuffer', tokens: 12_801, details: [] },
  ];
  return {
    model: 'gpt-5',
    contextWindow: window,
    mode: 'actual',
    totalTokens: 48_200,
    usage: usage(),
    categories: cats.map((c) => ({ ...c, percent: Math.round((1000 * c.tokens) / window) / 10 })),
    overheadTokens: 11_945, // systemPrompt + builtinTools + mcpTools + skills + memoryFiles
    idleCost: 11_953,
    ...over,
  };
}
