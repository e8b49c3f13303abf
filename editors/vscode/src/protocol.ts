/**
 * The ctxd wire contract as the extension sees it: method names and payload types, mirroring
 * PROTOCOL.md (version 2). Ledger items keep the model API's snake_case spelling; the protocol's
 * own fields are camelCase. This module has no runtime dependencies so every other module,
 * and the tests, can share it.
 */

export const PROTOCOL_VERSION = 2;

export const Method = {
  record: 'ctxd/record',
  reportTokenUsage: 'ctxd/reportTokenUsage',
  setPromptContext: 'ctxd/setPromptContext',
  usage: 'ctxd/usage',
  prompt: 'ctxd/prompt',
  compact: 'ctxd/compact',
  rollback: 'ctxd/rollback',
  history: 'ctxd/history',
  threads: 'ctxd/threads',
  ghostSnapshot: 'ctxd/ghost/snapshot',
  ghostList: 'ctxd/ghost/list',
  ghostRestore: 'ctxd/ghost/restore',
  status: 'ctxd/status',
  ghostDiff: 'ctxd/ghost/diff',
  ghostDelete: 'ctxd/ghost/delete',
} as const;

export const Notification = {
  usageChanged: 'ctxd/usageChanged',
  compacted: 'ctxd/compacted',
  threadsChanged: 'ctxd/threadsChanged',
} as const;

/** JSON-RPC error codes the daemon uses (PROTOCOL.md, "Errors"; ctxd's own moved in version 2). */
export const ErrorCode = {
  invalidParams: -32602,
  methodNotFound: -32601,
  compactionFailed: 1001,
  gitFailed: 1002,
  storeFailed: 1003,
  cancelled: -32800,
} as const;

export const DEFAULT_THREAD = 'default';

/** Which ledger a request addresses: a workspace folder URI and a thread name. */
export interface Target {
  workspace: string;
  thread: string;
}

/** A Responses API item, kept exactly as the model API spells it. */
export interface Item {
  type: string;
  [field: string]: unknown;
}

export type Tier = 'ok' | 'warn' | 'compact';

export interface UsageSnapshot {
  usedTokens: number;
  contextWindow: number;
  percent: number;
  autoCompactLimit: number;
  tier: Tier;
  source: 'api' | 'estimate' | 'api+estimate';
  historyVersion: number;
  /** The counter in use, e.g. `o200k_base` or `estimate:o200k` (added by the daemon, optional). */
  tokenizer?: string;
  /** `exact`, `estimate`, `loading`…: whether counts come from the model's own tokenizer. */
  tokenizerStatus?: string;
}

export interface UsageChangedParams extends UsageSnapshot {
  workspace: string;
  thread: string;
}

export interface CompactedParams {
  workspace: string;
  thread: string;
  tokensBefore: number;
  tokensAfter: number;
  strategy: string;
}

export type CategoryName =
  | 'systemPrompt'
  | 'builtinTools'
  | 'mcpTools'
  | 'skills'
  | 'memoryFiles'
  | 'messages'
  | 'freeSpace'
  | 'autocompactBuffer';

export interface Category {
  name: CategoryName | string;
  tokens: number;
  percent: number;
  details: { name: string; tokens: number }[];
}

export interface Cost {
  currency: string;
  input: number;
  cachedInput: number;
  output: number;
  total: number;
  priced: boolean;
}

export interface Breakdown {
  model: string;
  contextWindow: number;
  mode: 'estimated' | 'actual';
  totalTokens: number | null;
  usage: UsageSnapshot;
  categories: Category[];
  /** How far the used tokens exceed the window (v2; 0 or absent when they fit). */
  overflowTokens?: number;
  cost?: Cost;
}

/**
 * Fills what an older or partial daemon leaves out of `ctxd/usage`'s answer (categories, model,
 * mode), from its UsageSnapshot, so the views handle one shape only.
 */
export function normalizeBreakdown(raw: Partial<Breakdown> & { usage: UsageSnapshot }): Breakdown {
  const usage = raw.usage;
  const categories = Array.isArray(raw.categories)
    ? raw.categories.map((c) => ({ ...c, details: Array.isArray(c.details) ? c.details : [] }))
    : [];
  const mode = raw.mode === 'estimated' || raw.mode === 'actual' ? raw.mode : 'actual';
  return {
    model: typeof raw.model === 'string' ? raw.model : '',
    contextWindow: typeof raw.contextWindow === 'number' ? raw.contextWindow : usage.contextWindow,
    mode,
    totalTokens: raw.totalTokens === undefined ? (mode === 'actual' ? usage.usedTokens : null) : raw.totalTokens,
    usage,
    categories,
    overflowTokens: typeof raw.overflowTokens === 'number' ? raw.overflowTokens : Math.max(0, usage.usedTokens - usage.contextWindow),
    ...(raw.cost ? { cost: raw.cost } : {}),
  };
}

export interface RecordResult {
  historyVersion: number;
  itemCount: number;
  usage: UsageSnapshot;
}

export interface TokenUsage {
  inputTokens: number;
  cachedInputTokens?: number;
  outputTokens: number;
  reasoningOutputTokens?: number;
  totalTokens: number;
}

export interface ToolDeclaration {
  name: string;
  kind: 'builtin' | 'mcp' | 'skill';
  schema: unknown;
}

export interface PromptContext {
  model?: string;
  contextWindow?: number;
  baseInstructions?: string;
  tools?: ToolDeclaration[];
  memoryFiles?: { path: string; content: string }[];
  skills?: { name: string; description: string }[];
}

export interface PromptResult {
  items: Item[];
  historyVersion: number;
  estimatedTokens: number;
  reinjectContext: boolean;
}

export type CompactStrategy = 'auto' | 'llm' | 'remote' | 'offline';

export interface CompactResult {
  historyVersion: number;
  tokensBefore: number;
  tokensAfter: number;
  strategy: string;
  summary: string;
  trimmedItems: number;
}

export interface RollbackResult {
  historyVersion: number;
  removedItems: number;
  usage: UsageSnapshot;
}

export interface HistoryResult {
  items: Item[];
  historyVersion: number;
  total: number;
}

export interface ThreadInfo {
  thread: string;
  itemCount: number;
  historyVersion: number;
  updatedAt: string | number;
  /** v2 fields; a version 1 daemon leaves them out. */
  source?: 'client' | 'codex' | 'claude' | string;
  title?: string | null;
  model?: string | null;
  lastActivity?: string | number | null;
  readOnly?: boolean;
  usage?: UsageSnapshot;
  cost?: Cost;
}

export interface StatusResult {
  version: string;
  protocolVersion: number;
  stateDir: string;
  trusted: boolean;
  problems: { source: string; key?: string; message: string }[];
  tokenizers: { name: string; status: string }[];
  sources: { agent: string; root: string; enabled: boolean; sessions: number }[];
}

export interface DiffFile {
  path: string;
  status: 'modified' | 'added' | 'deleted';
  binary: boolean;
  before?: string;
  after?: string;
}

export interface DiffResult {
  id: string;
  files: DiffFile[];
}

export interface GhostCommit {
  id: string;
  parent: string | null;
  createdAt: string | number | null;
  message: string | null;
  fileCount: number;
  skipped: { path: string; reason: string }[];
  durationMs: number;
}

export interface RestoreResult {
  id: string;
  restored: string[];
  removed: string[];
  removedItems?: number;
  /** v2: the snapshot taken just before the restore; restoring it undoes the restore. */
  undoId?: string;
}

export interface Disposable {
  dispose(): void;
}

/**
 * The two calls the extension needs from a JSON-RPC connection. Both vscode-languageclient's
 * LanguageClient and vscode-jsonrpc's MessageConnection have this shape, so the logic runs
 * unchanged in VS Code and in the tests.
 */
export interface Rpc {
  sendRequest<R>(method: string, params: unknown): Promise<R>;
  onNotification(method: string, handler: (params: any) => void): Disposable;
}

/** An error answered by the daemon; `code` is one of ErrorCode or a JSON-RPC standard code. */
export function errorCode(err: unknown): number | undefined {
  const code = (err as { code?: unknown } | null)?.code;
  return typeof code === 'number' ? code : undefined;
}

export function errorMessage(err: unknown): string {
  if (err instanceof Error) return err.message;
  const message = (err as { message?: unknown } | null)?.message;
  return typeof message === 'string' ? message : String(err);
}
