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
  undo: 'ctxd/undo',
  recall: 'ctxd/recall',
  item: 'ctxd/item',
} as const;

export const Notification = {
  usageChanged: 'ctxd/usageChanged',
  compacted: 'ctxd/compacted',
  threadsChanged: 'ctxd/threadsChanged',
  ghostChanged: 'ctxd/ghostChanged',
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

// Results, notifications and request params: generated from the daemon's JSON Schema (ctxd-protocol.d.ts).
export type {
  Breakdown,
  CacheState,
  Category,
  CompactResult,
  Compacted as CompactedParams,
  CompactionRecord,
  Cost,
  DiffResult,
  FileChange as DiffFile,
  GhostCommit,
  HistoryResult,
  Item,
  ItemResult,
  OperationRecord,
  PromptResult,
  RecallHit,
  RecallResult,
  RecordResult,
  RestoreResult,
  RollbackResult,
  Status as StatusResult,
  ThreadInfo,
  TokenUsage,
  ToolDeclaration,
  UsageChanged as UsageChangedParams,
  UndoResult,
  UsageSnapshot,
} from '../ctxd-protocol';
import type { Breakdown, CompactParams, SetPromptContextParams, UsageSnapshot } from '../ctxd-protocol';
export type Tier = UsageSnapshot['tier'];
export type CategoryName = Breakdown['categories'][number]['name'];
/** The categories that are overhead: paid by every request before any message (`Breakdown.overheadTokens`). */
const OVERHEAD_CATEGORIES: readonly CategoryName[] = ['systemPrompt', 'builtinTools', 'mcpTools', 'skills', 'memoryFiles'];

export const DEFAULT_THREAD = 'default';

/** Which ledger a request addresses: a workspace folder URI and a thread name. */
export interface Target {
  workspace: string;
  thread: string;
}

/**
 * Fills what an older or partial daemon leaves out of `ctxd/usage`'s answer (categories, model,
 * mode, overhead figures), from its UsageSnapshot, so the views handle one shape only.
 */
export function normalizeBreakdown(raw: Partial<Breakdown> & { usage: UsageSnapshot }): Breakdown {
  const usage = raw.usage;
  const categories = Array.isArray(raw.categories)
    ? raw.categories.map((c) => ({ ...c, details: Array.isArray(c.details) ? c.details : [] }))
    : [];
  const mode = raw.mode === 'estimated' || raw.mode === 'actual' ? raw.mode : 'actual';
  // An older daemon sends no overhead figures: the overhead categories' sum (without the short
  // message a one-message conversation adds, which only the daemon counts).
  const overhead = categories.filter((c) => OVERHEAD_CATEGORIES.includes(c.name)).reduce((sum, c) => sum + c.tokens, 0);
  return {
    model: typeof raw.model === 'string' ? raw.model : '',
    contextWindow: typeof raw.contextWindow === 'number' ? raw.contextWindow : usage.contextWindow,
    mode,
    totalTokens: raw.totalTokens === undefined ? (mode === 'actual' ? usage.usedTokens : null) : raw.totalTokens,
    usage,
    categories,
    overflowTokens: typeof raw.overflowTokens === 'number' ? raw.overflowTokens : Math.max(0, usage.usedTokens - usage.contextWindow),
    overheadTokens: typeof raw.overheadTokens === 'number' ? raw.overheadTokens : overhead,
    idleCost: typeof raw.idleCost === 'number' ? raw.idleCost : overhead,
    ...(raw.cost ? { cost: raw.cost } : {}),
    ...(raw.cache ? { cache: raw.cache } : {}),
  };
}

/** What a prompt context carries: `ctxd/setPromptContext`'s params without the target. */
export type PromptContext = Omit<SetPromptContextParams, 'workspace' | 'thread' | 'workDoneToken'>;
export type CompactStrategy = NonNullable<CompactParams['strategy']>;

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
