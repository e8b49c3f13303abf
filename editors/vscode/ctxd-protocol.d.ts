/* eslint-disable */
/**
 * The ctxd wire protocol: results, notifications and request params. GENERATED, do not edit:
 * `npm run gen:protocol` from docs/protocol.schema.json (from ctxd/protocol/shapes.py).
 * schema sha256: 235ea461e323ac890b2b43a03547b7f56a647939ac970b2e5b7449a2d4ba0145
 */

/**
 * Results, notifications and request params of the ctxd wire protocol, version 3 (generated from ctxd/protocol/shapes.py by `python -m ctxd.protocol.shapes`).
 */
export interface CtxdProtocol {
  ctxd_acp_checkpoint: AcpCheckpointResult;
  ctxd_acp_checkpoint_params: AcpCheckpointParams;
  ctxd_acp_record: RecordResult;
  ctxd_acp_record_params: AcpRecordParams;
  ctxd_compact: CompactResult;
  ctxd_compact_params: CompactParams;
  ctxd_compacted: Compacted;
  ctxd_ghostChanged: GhostChanged;
  ctxd_ghost_delete: DeleteResult;
  ctxd_ghost_delete_params: GhostDeleteParams;
  ctxd_ghost_diff: DiffResult;
  ctxd_ghost_diff_params: GhostDiffParams;
  ctxd_ghost_list: GhostListResult;
  ctxd_ghost_list_params: GhostListParams;
  ctxd_ghost_restore: RestoreResult;
  ctxd_ghost_restore_params: GhostRestoreParams;
  ctxd_ghost_snapshot: GhostCommit;
  ctxd_ghost_snapshot_params: GhostSnapshotParams;
  ctxd_history: HistoryResult;
  ctxd_history_params: HistoryParams;
  ctxd_item: ItemResult;
  ctxd_item_params: ItemParams;
  ctxd_prompt: PromptResult;
  ctxd_prompt_params: PromptParams;
  ctxd_recall: RecallResult;
  ctxd_recall_params: RecallParams;
  ctxd_record: RecordResult;
  ctxd_record_params: RecordParams;
  ctxd_reportTokenUsage: UsageSnapshot;
  ctxd_reportTokenUsage_params: ReportTokenUsageParams;
  ctxd_rollback: RollbackResult;
  ctxd_rollback_params: RollbackParams;
  ctxd_sessions_sync: SyncResult;
  ctxd_sessions_sync_params: ThreadsParams;
  ctxd_setPromptContext: UsageSnapshot;
  ctxd_setPromptContext_params: SetPromptContextParams;
  ctxd_status: Status;
  ctxd_status_params: StatusParams;
  ctxd_threads: ThreadsResult;
  ctxd_threadsChanged: ThreadsChanged;
  ctxd_threads_params: ThreadsListParams;
  ctxd_undo: UndoResult;
  ctxd_undo_params: UndoParams;
  ctxd_usage: Breakdown;
  ctxd_usageChanged: UsageChanged;
  ctxd_usage_params: UsageParams;
}
/**
 * `ctxd/acp/checkpoint` (v4): the checkpoint's id, or why none was taken (`ghost.auto` off).
 *
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "AcpCheckpointResult".
 */
export interface AcpCheckpointResult {
  id: string | null;
  skipped?: string;
}
/**
 * A checkpoint the proxy takes before a turn or a change (`ctxd/acp/checkpoint`).
 *
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "AcpCheckpointParams".
 */
export interface AcpCheckpointParams {
  message?: string;
  thread?: string;
  tool?: {
    [k: string]: unknown;
  } | null;
  trigger: "turn" | "tool";
  turn?: {
    [k: string]: unknown;
  } | null;
  workDoneToken?: number | string | null;
  workspace: string;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "RecordResult".
 */
export interface RecordResult {
  historyVersion: number;
  itemCount: number;
  usage: UsageSnapshot;
}
/**
 * How full a thread's context window is: the gauge's numbers.
 *
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "UsageSnapshot".
 */
export interface UsageSnapshot {
  autoCompactLimit: number;
  contextWindow: number;
  historyVersion: number;
  percent: number;
  source: "api" | "estimate" | "api+estimate";
  tier: "ok" | "warn" | "compact";
  tokenizer?: string;
  tokenizerStatus?: "exact" | "loading" | "unavailable" | "estimate" | "idle";
  usedTokens: number;
}
/**
 * The proxy's view of its ACP session (`ctxd/acp/record`): items to append, what the thread
 * listing shows, and the agent's own gauge when it sent one (`usage_update`). `proxy` and `seq`
 * name the record (its proxy's id, its number there from 1): one sent again is stored once.
 *
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "AcpRecordParams".
 */
export interface AcpRecordParams {
  agent?: string | null;
  items: unknown[];
  model?: string | null;
  proxy?: string | null;
  replay?: boolean;
  seq?: number | null;
  size?: number | null;
  thread?: string;
  title?: string | null;
  used?: number | null;
  workDoneToken?: number | string | null;
  workspace: string;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "CompactResult".
 */
export interface CompactResult {
  cacheCost?: CompactionCost;
  fallbackReason?: string | null;
  historyVersion: number;
  strategy: "llm" | "remote" | "offline";
  summary: string;
  tokensAfter: number;
  tokensBefore: number;
  trimmedItems: number;
  undoId?: number;
}
/**
 * What one compaction cost in cache writes, and what it saves on each turn after it.
 *
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "CompactionCost".
 */
export interface CompactionCost {
  at: string;
  cacheWriteCost: number | null;
  cacheWriteTokens: number;
  coldCache?: boolean;
  savedCostPerTurn: number | null;
  savedTokensPerTurn: number;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "CompactParams".
 */
export interface CompactParams {
  strategy?: "auto" | "llm" | "remote" | "offline";
  thread?: string;
  workDoneToken?: number | string | null;
  workspace: string;
}
/**
 * `ctxd/compacted`.
 *
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "Compacted".
 */
export interface Compacted {
  cacheCost?: CompactionCost;
  strategy: string;
  thread: string;
  tokensAfter: number;
  tokensBefore: number;
  workspace: string;
}
/**
 * `ctxd/ghostChanged` (v3): the workspace's snapshots changed, e.g. a hook took a checkpoint.
 *
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "GhostChanged".
 */
export interface GhostChanged {
  workspace: string;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "DeleteResult".
 */
export interface DeleteResult {
  deleted: boolean;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "GhostDeleteParams".
 */
export interface GhostDeleteParams {
  id: string;
  thread?: string;
  workDoneToken?: number | string | null;
  workspace: string;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "DiffResult".
 */
export interface DiffResult {
  files: FileChange[];
  id: string;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "FileChange".
 */
export interface FileChange {
  after?: string | null;
  before?: string | null;
  binary: boolean;
  path: string;
  pathEncoding?: "escaped";
  status: "modified" | "added" | "deleted";
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "GhostDiffParams".
 */
export interface GhostDiffParams {
  id: string;
  path?: string | null;
  thread?: string;
  workDoneToken?: number | string | null;
  workspace: string;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "GhostListResult".
 */
export interface GhostListResult {
  interruptedRestore?: InterruptedRestore;
  snapshots: GhostCommit[];
}
/**
 * A restore a crash cut short: restoring `undoId` goes back to the state before it.
 *
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "InterruptedRestore".
 */
export interface InterruptedRestore {
  id: string | null;
  message: string;
  startedAt: string | null;
  undoId: string | null;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "GhostCommit".
 */
export interface GhostCommit {
  createdAt: string | null;
  durationMs: number;
  fileCount: number;
  id: string;
  message: string;
  parent: string | null;
  skipped: Skipped[];
  thread: string | null;
  tool?: CheckpointTool;
  trigger: "manual" | "turn" | "tool" | "restore";
  turn?: CheckpointTurn;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "Skipped".
 */
export interface Skipped {
  path: string;
  pathEncoding?: "escaped";
  reason: string;
}
/**
 * (v3) The tool a checkpoint was taken before, and the paths it names.
 *
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "CheckpointTool".
 */
export interface CheckpointTool {
  callId?: string;
  name: string;
  paths?: string[];
}
/**
 * (v3) The user turn a checkpoint precedes, counted from 1; its text shortened.
 *
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "CheckpointTurn".
 */
export interface CheckpointTurn {
  index: number;
  text: string;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "GhostListParams".
 */
export interface GhostListParams {
  workspace: string;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "RestoreResult".
 */
export interface RestoreResult {
  dryRun?: boolean;
  id: string;
  operationId?: number;
  pathEncoding?: "escaped";
  removed: string[];
  removedItems?: number;
  restored: string[];
  undoId?: string | null;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "GhostRestoreParams".
 */
export interface GhostRestoreParams {
  conversation?: boolean;
  dryRun?: boolean;
  id: string;
  thread?: string;
  workDoneToken?: number | string | null;
  workspace: string;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "GhostSnapshotParams".
 */
export interface GhostSnapshotParams {
  message?: string | null;
  record?: boolean;
  thread?: string;
  workDoneToken?: number | string | null;
  workspace: string;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "HistoryResult".
 */
export interface HistoryResult {
  compactions?: CompactionRecord[];
  historyVersion: number;
  items: HistoryItem[];
  operations?: OperationRecord[];
  total: number;
}
/**
 * One past compaction of a thread (`ctxd/history` with `includeArchived`). The items it
 * replaced are the archived items whose `archivedBy` is its id (v3: rollbacks, restores and
 * undos archive items too, so archived items no longer follow the compactions in turn).
 *
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "CompactionRecord".
 */
export interface CompactionRecord {
  archivedItems: number;
  automatic: boolean;
  createdAt: string;
  id: number;
  strategy: string | null;
  tokensAfter: number | null;
  tokensBefore: number | null;
  undoneBy?: number;
  writtenItems: number;
}
/**
 * An item of `ctxd/history`; with `includeArchived`, the ones a compaction replaced say so.
 *
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "HistoryItem".
 */
export interface HistoryItem {
  archived?: boolean;
  archivedBy?: number;
  type: string;
  [k: string]: unknown;
}
/**
 * (v3) One history operation of a thread (`ctxd/history` with `includeArchived`).
 *
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "OperationRecord".
 */
export interface OperationRecord {
  createdAt: string;
  id: number;
  itemsAfter: number;
  itemsBefore: number;
  kind: "compaction" | "rollback" | "restore" | "undo";
  tokensAfter: number | null;
  tokensBefore: number | null;
  undoneBy?: number;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "HistoryParams".
 */
export interface HistoryParams {
  includeArchived?: boolean;
  limit?: number | null;
  offset?: number;
  thread?: string;
  workDoneToken?: number | string | null;
  workspace: string;
}
/**
 * `placeholderSeq`: the seq asked for holds a compaction's placeholder for this tool output.
 *
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "ItemResult".
 */
export interface ItemResult {
  archived: boolean;
  item: Item;
  placeholderSeq?: number;
  seq: number;
}
/**
 * A ledger item as the model API spells it (snake_case, every field it came with): only its
 * `type` is declared here; `ctxd/protocol/items.py` validates each type's fields when recorded.
 *
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "Item".
 */
export interface Item {
  type: string;
  [k: string]: unknown;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "ItemParams".
 */
export interface ItemParams {
  seq: number;
  thread?: string;
  workDoneToken?: number | string | null;
  workspace: string;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "PromptResult".
 */
export interface PromptResult {
  estimatedTokens: number;
  historyVersion: number;
  items: Item[];
  reinjectContext: boolean;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "PromptParams".
 */
export interface PromptParams {
  inputModalities?: ("text" | "image" | "audio")[];
  thread?: string;
  workDoneToken?: number | string | null;
  workspace: string;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "RecallResult".
 */
export interface RecallResult {
  results: RecallHit[];
  total: number;
}
/**
 * One match of `ctxd/recall`: where the item is (`seq` in `thread`), what it is, the part of
 * its text that matched (at most 400 characters), and whether a compaction replaced it.
 * `placeholderSeq`: the match was the placeholder a compaction left of this tool output (its
 * seq there); the hit is the output itself.
 *
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "RecallHit".
 */
export interface RecallHit {
  archived: boolean;
  createdAt?: string | null;
  placeholderSeq?: number;
  role?: string;
  seq: number;
  snippet: string;
  thread: string;
  turn?: TurnRef;
  type: string;
}
/**
 * The user turn an item belongs to: its index counted from 1, and its text shortened.
 *
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "TurnRef".
 */
export interface TurnRef {
  index: number;
  text: string;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "RecallParams".
 */
export interface RecallParams {
  limit?: number;
  query: string;
  scope?: "thread" | "workspace";
  thread?: string;
  workDoneToken?: number | string | null;
  workspace: string;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "RecordParams".
 */
export interface RecordParams {
  items: Item[];
  thread?: string;
  workDoneToken?: number | string | null;
  workspace: string;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "ReportTokenUsageParams".
 */
export interface ReportTokenUsageParams {
  thread?: string;
  usage: TokenUsage;
  workDoneToken?: number | string | null;
  workspace: string;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "TokenUsage".
 */
export interface TokenUsage {
  cachedInputTokens?: number | null;
  inputTokens: number;
  outputTokens?: number;
  reasoningOutputTokens?: number | null;
  totalTokens: number;
}
/**
 * (v3) With `dryRun`, what the rollback would do, and nothing changed (`usage` is as it is).
 *
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "RollbackResult".
 */
export interface RollbackResult {
  crossesCompaction?: boolean;
  dryRun?: boolean;
  historyVersion: number;
  removedItems: number;
  tokensAfter?: number;
  undoId?: number;
  usage: UsageSnapshot;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "RollbackParams".
 */
export interface RollbackParams {
  dryRun?: boolean;
  thread?: string;
  turns: number;
  workDoneToken?: number | string | null;
  workspace: string;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "SyncResult".
 */
export interface SyncResult {
  idle: boolean;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "ThreadsParams".
 */
export interface ThreadsParams {
  workspace: string;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "SetPromptContextParams".
 */
export interface SetPromptContextParams {
  baseInstructions?: string | null;
  contextWindow?: number | null;
  memoryFiles?: MemoryFile[] | null;
  model?: string | null;
  skills?: Skill[] | null;
  thread?: string;
  tools?: ToolDeclaration[] | null;
  workDoneToken?: number | string | null;
  workspace: string;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "MemoryFile".
 */
export interface MemoryFile {
  content: string;
  path: string;
  [k: string]: unknown;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "Skill".
 */
export interface Skill {
  description?: string;
  name: string;
  [k: string]: unknown;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "ToolDeclaration".
 */
export interface ToolDeclaration {
  kind?: "builtin" | "mcp" | "skill";
  name: string;
  schema?: {
    [k: string]: unknown;
  };
  server?: string | null;
  [k: string]: unknown;
}
/**
 * `ctxd/status`.
 *
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "Status".
 */
export interface Status {
  problems: Problem[];
  protocolVersion: number;
  sources: SourceState[];
  stateDir: string;
  tokenizers: TokenizerState[];
  trusted: boolean;
  version: string;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "Problem".
 */
export interface Problem {
  key?: string;
  message: string;
  source: string;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "SourceState".
 */
export interface SourceState {
  agent: string;
  enabled: boolean;
  root: string;
  sessions: number;
  unread?: UnreadRecords[];
  version?: string;
  watching?: "inotify" | "polling" | "off";
}
/**
 * Kinds of record an agent's version wrote that ctxd's reader skipped (format drift).
 *
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "UnreadRecords".
 */
export interface UnreadRecords {
  kinds: string[];
  records: number;
  version: string | null;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "TokenizerState".
 */
export interface TokenizerState {
  name: string;
  status: "exact" | "loading" | "unavailable" | "estimate" | "idle";
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "StatusParams".
 */
export interface StatusParams {
  workspace: string;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "ThreadsResult".
 */
export interface ThreadsResult {
  threads: ThreadInfo[];
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "ThreadInfo".
 */
export interface ThreadInfo {
  cache?: CacheState;
  cost?: Cost;
  historyVersion: number;
  itemCount: number;
  lastActivity?: string | null;
  model?: string | null;
  readOnly?: boolean;
  source?: string;
  thread: string;
  title?: string | null;
  updatedAt: string;
  usage?: UsageSnapshot;
}
/**
 * A thread's prompt cache, from the cache reads and writes its requests recorded.
 *
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "CacheState".
 */
export interface CacheState {
  compactions?: CompactionCost[];
  expiresAt: string | null;
  lastRequestAt: string | null;
  lifetimeSeconds: number;
  rewriteCost: number | null;
  rewriteTokens: number;
  state: "warm" | "cold" | "unknown";
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "Cost".
 */
export interface Cost {
  cacheWrite?: number;
  cacheWrite1h?: number;
  cachedInput: number;
  currency: "USD";
  input: number;
  output: number;
  priced: boolean;
  total: number;
  unpricedModels?: string[];
}
/**
 * `ctxd/threadsChanged`.
 *
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "ThreadsChanged".
 */
export interface ThreadsChanged {
  threads?: string[];
  workspace: string;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "ThreadsListParams".
 */
export interface ThreadsListParams {
  threads?: string[] | null;
  workspace: string;
}
/**
 * (v3) `ctxd/undo`: the history the operation replaced is back; `undoId` redoes it.
 *
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "UndoResult".
 */
export interface UndoResult {
  historyVersion: number;
  removedItems?: number;
  undoId: number;
  usage: UsageSnapshot;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "UndoParams".
 */
export interface UndoParams {
  id: number;
  thread?: string;
  workDoneToken?: number | string | null;
  workspace: string;
}
/**
 * `ctxd/usage`: where the window's tokens go.
 *
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "Breakdown".
 */
export interface Breakdown {
  cache?: CacheState;
  categories: Category[];
  contextWindow: number;
  cost?: Cost;
  idleCost: number;
  inferred?: {
    [k: string]: string;
  };
  limitSource?: string;
  mode: "estimated" | "actual";
  model: string | null;
  overflowTokens?: number;
  overheadTokens: number;
  totalTokens: number | null;
  usage: UsageSnapshot;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "Category".
 */
export interface Category {
  details: Detail[];
  name:
    | "systemPrompt"
    | "builtinTools"
    | "mcpTools"
    | "skills"
    | "memoryFiles"
    | "messages"
    | "freeSpace"
    | "autocompactBuffer";
  percent: number;
  tokens: number;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "Detail".
 */
export interface Detail {
  name: string;
  tokens: number;
}
/**
 * `ctxd/usageChanged`.
 *
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "UsageChanged".
 */
export interface UsageChanged {
  autoCompactLimit: number;
  contextWindow: number;
  historyVersion: number;
  percent: number;
  source: "api" | "estimate" | "api+estimate";
  thread: string;
  tier: "ok" | "warn" | "compact";
  tokenizer?: string;
  tokenizerStatus?: "exact" | "loading" | "unavailable" | "estimate" | "idle";
  usedTokens: number;
  workspace: string;
}
/**
 * This interface was referenced by `CtxdProtocol`'s JSON-Schema
 * via the `definition` "UsageParams".
 */
export interface UsageParams {
  thread?: string;
  workDoneToken?: number | string | null;
  workspace: string;
}
