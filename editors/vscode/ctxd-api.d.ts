/**
 * The API of the ctxd VS Code extension (`ctxd.ctxd`), for agent extensions:
 *
 *   const ext = vscode.extensions.getExtension<CtxdApi>('ctxd.ctxd');
 *   const ctxd = ext?.isActive ? ext.exports : await ext?.activate();
 *   await ctxd.record([{ type: 'message', role: 'user', content: [{ type: 'input_text', text }] }]);
 *   const { items } = await ctxd.getPrompt();
 *
 * Every call addresses a workspace folder (its `uri.toString()`) and a thread; both are optional and
 * default to the active workspace folder and its active thread ("default" unless changed with
 * `setActiveThread`). Calls wait while the daemon starts or restarts. A failed call rejects with the
 * daemon's JSON-RPC error: `code` -32602 (bad params; nothing recorded), 1001 (compaction failed;
 * ledger unchanged), 1002 (git failed; working tree unchanged), 1003 (the workspace's store cannot be
 * used), -32800 (cancelled). Version 1 daemons used -32001 and -32002 for the first two.
 *
 * Items are OpenAI Responses API items, spelled as that API spells them; see the ctxd protocol.
 */

export interface Disposable {
  dispose(): void;
}

/** Where a call goes. */
export interface TargetOptions {
  /** A workspace folder URI (`folder.uri.toString()`); default: the active folder. */
  workspace?: string;
  /** Default: the folder's active thread. */
  thread?: string;
}

// Results, notifications and request params: the types generated from the daemon's schema (ctxd-protocol.d.ts).
export type {
  Breakdown,
  Category,
  CompactResult,
  Compacted as CompactedParams,
  Cost,
  GhostCommit,
  HistoryResult,
  Item,
  PromptResult,
  RecordResult,
  RestoreResult,
  RollbackResult,
  ThreadInfo,
  TokenUsage,
  ToolDeclaration,
  UsageChanged as UsageChangedParams,
  UsageSnapshot,
} from './ctxd-protocol';
import type {
  Breakdown,
  CompactParams,
  CompactResult,
  Compacted as CompactedParams,
  GhostCommit,
  HistoryResult,
  Item,
  PromptResult,
  RecordResult,
  RestoreResult,
  RollbackResult,
  SetPromptContextParams,
  ThreadInfo,
  TokenUsage,
  UsageChanged as UsageChangedParams,
  UsageSnapshot,
} from './ctxd-protocol';

export type Tier = UsageSnapshot['tier'];
/** systemPrompt, builtinTools, mcpTools, skills, memoryFiles, messages, freeSpace, autocompactBuffer. */
export type CategoryName = Breakdown['categories'][number]['name'];

/** What a prompt context carries: `ctxd/setPromptContext`'s params without the target. */
export type PromptContext = Omit<SetPromptContextParams, 'workspace' | 'thread' | 'workDoneToken'>;
export type CompactStrategy = NonNullable<CompactParams['strategy']>;

export interface CtxdApi {
  readonly apiVersion: 1;
  /** The ctxd wire protocol version the extension speaks. */
  readonly protocolVersion: number;
  /** Appends items (oldest first) to the thread's ledger. */
  record(items: Item[], target?: TargetOptions): Promise<RecordResult>;
  /** The usage the model API reported for the latest request; later estimates add to it. */
  reportTokenUsage(usage: TokenUsage, target?: TargetOptions): Promise<UsageSnapshot>;
  /** The fixed overhead of every request: instructions, tools, memory files, skills. */
  setPromptContext(context: PromptContext, target?: TargetOptions): Promise<UsageSnapshot>;
  /** The model-ready projection of the thread (may run an automatic compaction first). When
   * `reinjectContext` is true, send the full initial context with this turn, then call setPromptContext. */
  getPrompt(options?: TargetOptions & { inputModalities?: string[] }): Promise<PromptResult>;
  /** The breakdown of the context window by category. */
  getUsage(target?: TargetOptions): Promise<Breakdown>;
  getHistory(options?: TargetOptions & { offset?: number; limit?: number; includeArchived?: boolean }): Promise<HistoryResult>;
  listThreads(workspace?: string): Promise<ThreadInfo[]>;
  compact(options?: TargetOptions & { strategy?: CompactStrategy }): Promise<CompactResult>;
  /** Drops the last `turns` user turns. */
  rollback(turns: number, target?: TargetOptions): Promise<RollbackResult>;
  /** A ghost commit of the working tree, recorded in the thread. */
  snapshot(options?: TargetOptions & { message?: string }): Promise<GhostCommit>;
  /** Newest first. */
  listSnapshots(target?: TargetOptions): Promise<GhostCommit[]>;
  /** Puts the working tree back as it was; with `conversation`, rolls the thread back too. */
  restore(id: string, options?: TargetOptions & { conversation?: boolean }): Promise<RestoreResult>;
  /** The latest usage the extension knows for a thread, without a request. */
  latestUsage(target?: TargetOptions): UsageSnapshot | undefined;
  /** Makes `thread` the default thread of calls, and the one the status-bar gauge shows. */
  setActiveThread(thread: string, workspace?: string): void;
  /** Every usage change of every thread (the daemon's `ctxd/usageChanged`). */
  onDidChangeUsage(listener: (e: UsageChangedParams) => void): Disposable;
  /** Every compaction, manual or automatic. */
  onDidCompact(listener: (e: CompactedParams) => void): Disposable;
}
