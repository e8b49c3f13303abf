/**
 * The API the extension exports to agent extensions (`getExtension('ctxd.ctxd').exports`): the
 * daemon's requests, with their answers' usage kept in a `UsageCache` and the thread calls go to
 * chosen by a `ThreadSelection`. Free of `vscode`: it talks to the daemon through an `Rpc` (the
 * LanguageClient in VS Code, a vscode-jsonrpc connection in the tests).
 */
import {
  type Breakdown,
  type CompactResult,
  type CompactStrategy,
  type CompactedParams,
  DEFAULT_THREAD,
  type DiffResult,
  type Disposable,
  type GhostCommit,
  type HistoryResult,
  type Item,
  type ItemResult,
  Method,
  Notification,
  PROTOCOL_VERSION,
  type PromptContext,
  type PromptResult,
  type RecallResult,
  type RecordResult,
  type RestoreResult,
  type RollbackResult,
  type Rpc,
  type StatusResult,
  type Target,
  type ThreadInfo,
  type TokenUsage,
  type UndoResult,
  type UsageChangedParams,
  type UsageSnapshot,
  normalizeBreakdown,
} from './protocol';
import { Emitter } from './emitter';
import { ThreadList } from './threadList';
import { ThreadSelection } from './threadSelection';
import { UsageCache, usageKey as key } from './usageCache';
import type { CtxdApi, TargetOptions } from '../ctxd-api';

// The API is declared once, in the shipped ctxd-api.d.ts (what agent extensions compile against):
// `CtxdService` and `exports()` are checked against that declaration itself.
export type { CtxdApi, TargetOptions };

type Listener<T> = (e: T) => void;

export class CtxdService implements CtxdApi {
  readonly apiVersion = 1 as const;
  readonly protocolVersion = PROTOCOL_VERSION;
  /** The latest usage known per thread. */
  readonly usage = new UsageCache();
  /** The folders' thread listings, kept up to date from the daemon's notifications. */
  private readonly listing = new ThreadList((workspace, threads) => this.readThreads(workspace, threads));
  /** The thread shown and addressed per workspace folder. */
  readonly threads = new ThreadSelection((workspace) => this.listThreads(workspace), this.usage);
  private readonly compactEmitter = new Emitter<CompactedParams & { manual: boolean }>();
  private readonly threadsEmitter = new Emitter<{ workspace: string }>();
  /** Snapshots taken, restored (a restore takes one for its undo) or deleted through this service. */
  private readonly snapshotsEmitter = new Emitter<{ workspace: string }>();
  /** Targets of compactions this extension asked for and has not heard back about. */
  private readonly manualCompactions = new Map<string, number>();
  /** Manual compactions still waiting for their answer (the daemon's own message about them is not shown). */
  private compactionsInFlight = 0;
  /** The `ctxd/*` methods the running daemon announced; undefined before the first start. */
  private methods: ReadonlySet<string> | undefined;

  /**
   * @param getRpc resolves to the running connection (waits while the daemon (re)starts).
   * @param defaultWorkspace the active workspace folder's URI, if any.
   */
  constructor(
    private readonly getRpc: () => Promise<Rpc>,
    private readonly defaultWorkspace: () => string | undefined,
  ) {}

  /**
   * Listens to a (new) connection's notifications; call after every daemon start. `methods` is
   * the initialize result's `capabilities.experimental.ctxd.methods`: what the daemon serves.
   */
  attach(rpc: Rpc, methods?: readonly string[]): Disposable {
    this.usage.clear();
    this.listing.clear();
    this.manualCompactions.clear();
    this.methods = methods ? new Set(methods) : undefined;
    const subs = [
      rpc.onNotification(Notification.usageChanged, (p: UsageChangedParams) => {
        if (p && typeof p.workspace === 'string') this.update({ workspace: p.workspace, thread: p.thread ?? DEFAULT_THREAD }, p);
      }),
      rpc.onNotification(Notification.compacted, (p: CompactedParams) => {
        const k = key({ workspace: p.workspace, thread: p.thread ?? DEFAULT_THREAD });
        const pending = this.manualCompactions.get(k) ?? 0;
        if (pending > 0) this.manualCompactions.set(k, pending - 1);
        this.compactEmitter.fire({ ...p, manual: pending > 0 });
      }),
      rpc.onNotification(Notification.threadsChanged, (p: { workspace: string; threads?: string[] }) => {
        // Only the threads it names are read again (all of them when it names none).
        if (p?.workspace) this.listing.changed(p.workspace, Array.isArray(p.threads) ? p.threads : undefined);
        this.threadsEmitter.fire(p);
        const ws = p?.workspace || this.defaultWorkspace();
        if (ws) void this.threads.followLatest(ws);
      }),
      // A checkpoint an agent's hook took (another process): the Snapshots view lists again.
      rpc.onNotification(Notification.ghostChanged, (p: { workspace: string }) => this.snapshotsEmitter.fire(p)),
    ];
    this.threadsEmitter.fire({ workspace: '' });
    const ws = this.defaultWorkspace();
    if (ws) void this.threads.followLatest(ws);
    return { dispose: () => subs.forEach((s) => s.dispose()) };
  }

  /** The daemon stopped: nothing is served until the next attach. */
  detach(): void {
    this.methods = undefined;
    this.listing.clear();
    this.threadsEmitter.fire({ workspace: '' });
  }

  /** Whether the running daemon announced `method` at initialize (false before it started). */
  supports(method: string): boolean {
    return this.methods?.has(method) ?? false;
  }

  /**
   * Waits for a daemon that is (re)starting; rejects, as a request would, when it is not running.
   * Once it resolves, `supports` answers for the running daemon (before, it is false for every method).
   */
  async ready(): Promise<true> {
    await this.getRpc();
    return true;
  }

  /** Resolves the target of a call; throws when no workspace folder is open. */
  target(opts?: TargetOptions): Target {
    const workspace = opts?.workspace ?? this.defaultWorkspace();
    if (!workspace) throw new Error('ctxd: no workspace folder is open');
    return { workspace, thread: opts?.thread ?? this.threads.activeThread(workspace) };
  }

  /** Makes `thread` the one the status-bar gauge shows (and calls go to) for its workspace folder. */
  setActiveThread(thread: string, workspace?: string): void {
    const ws = workspace ?? this.defaultWorkspace();
    if (ws) this.threads.pin(ws, thread);
  }

  latestUsage(opts?: TargetOptions): UsageSnapshot | undefined {
    const workspace = opts?.workspace ?? this.defaultWorkspace();
    if (!workspace) return undefined;
    return this.usage.get({ workspace, thread: opts?.thread ?? this.threads.activeThread(workspace) });
  }

  /** Keeps a usage the daemon sent; a thread that moved may now be the one to follow. */
  update(t: Target, usage: UsageSnapshot): void {
    this.listing.changed(t.workspace, [t.thread]); // its listing (usage, items, activity) is read again when asked
    if (this.usage.update(t, usage)) this.threads.usageChanged(t.workspace, t.thread);
  }

  onDidChangeUsage = (listener: Listener<UsageChangedParams>): Disposable => this.usage.onDidChange(listener);
  /** Every compaction; `manual` is true for the ones this extension asked for (they report themselves). */
  onDidCompact = (listener: Listener<CompactedParams & { manual: boolean }>): Disposable => this.compactEmitter.event(listener);
  /** A thread appeared, ended or changed (`workspace` is '' after a daemon (re)start: everything may have). */
  onDidChangeThreads = (listener: Listener<{ workspace: string }>): Disposable => this.threadsEmitter.event(listener);

  onDidChangeSnapshots = (listener: Listener<{ workspace: string }>): Disposable => this.snapshotsEmitter.event(listener);

  private async call<R>(method: string, t: Target | { workspace: string }, params: object = {}): Promise<R> {
    const rpc = await this.getRpc();
    return rpc.sendRequest<R>(method, { ...t, ...params });
  }

  async record(items: Item[], opts?: TargetOptions): Promise<RecordResult> {
    const t = this.target(opts);
    const result = await this.call<RecordResult>(Method.record, t, { items });
    this.update(t, result.usage);
    return result;
  }

  async reportTokenUsage(usage: TokenUsage, opts?: TargetOptions): Promise<UsageSnapshot> {
    const t = this.target(opts);
    const result = await this.call<UsageSnapshot>(Method.reportTokenUsage, t, { usage });
    this.update(t, result);
    return result;
  }

  async setPromptContext(context: PromptContext, opts?: TargetOptions): Promise<UsageSnapshot> {
    const t = this.target(opts);
    const result = await this.call<UsageSnapshot>(Method.setPromptContext, t, context);
    this.update(t, result);
    return result;
  }

  async getPrompt(opts?: TargetOptions & { inputModalities?: string[] }): Promise<PromptResult> {
    const t = this.target(opts);
    const params = opts?.inputModalities ? { inputModalities: opts.inputModalities } : {};
    return this.call<PromptResult>(Method.prompt, t, params);
  }

  async getUsage(opts?: TargetOptions): Promise<Breakdown> {
    const t = this.target(opts);
    const raw = await this.call<Partial<Breakdown> & { usage: UsageSnapshot }>(Method.usage, t);
    this.update(t, raw.usage);
    return normalizeBreakdown(raw);
  }

  async getHistory(
    opts?: TargetOptions & { offset?: number; limit?: number; includeArchived?: boolean },
  ): Promise<HistoryResult> {
    const t = this.target(opts);
    const { offset, limit, includeArchived } = opts ?? {};
    return this.call<HistoryResult>(Method.history, t, { offset, limit, includeArchived });
  }

  async listThreads(workspace?: string): Promise<ThreadInfo[]> {
    return this.listing.list(this.target({ workspace }).workspace);
  }

  /** `ctxd/threads`: every thread of the folder, or only `threads` (a daemon before v4 lists all). */
  private async readThreads(workspace: string, threads?: string[]): Promise<ThreadInfo[]> {
    const params = threads ? { threads } : {};
    const result = await this.call<{ threads: ThreadInfo[] }>(Method.threads, { workspace }, params);
    return result.threads;
  }

  async compact(opts?: TargetOptions & { strategy?: CompactStrategy }): Promise<CompactResult> {
    const t = this.target(opts);
    const k = key(t);
    // The daemon's ctxd/compacted arrives before the answer; mark it as ours first.
    this.manualCompactions.set(k, (this.manualCompactions.get(k) ?? 0) + 1);
    this.compactionsInFlight++;
    try {
      return await this.call<CompactResult>(Method.compact, t, { strategy: opts?.strategy ?? 'auto' });
    } catch (err) {
      const pending = this.manualCompactions.get(k) ?? 0;
      if (pending > 0) this.manualCompactions.set(k, pending - 1);
      throw err;
    } finally {
      this.compactionsInFlight--;
    }
  }

  /** True while a compaction this extension asked for runs: its result message is the only one shown. */
  compactingNow(): boolean {
    return this.compactionsInFlight > 0;
  }

  async rollback(turns: number, opts?: TargetOptions & { dryRun?: boolean }): Promise<RollbackResult> {
    const t = this.target(opts);
    const result = await this.call<RollbackResult>(Method.rollback, t, opts?.dryRun ? { turns, dryRun: true } : { turns });
    if (result?.usage && !opts?.dryRun) this.update(t, result.usage);
    return result;
  }

  /** (v3) Puts back the active history operation `id` replaced; the answer's `undoId` redoes it. */
  async undo(id: number, opts?: TargetOptions): Promise<UndoResult> {
    const t = this.target(opts);
    const result = await this.call<UndoResult>(Method.undo, t, { id });
    if (result?.usage) this.update(t, result.usage);
    return result;
  }

  async snapshot(opts?: TargetOptions & { message?: string }): Promise<GhostCommit> {
    const t = this.target(opts);
    const commit = await this.call<GhostCommit>(Method.ghostSnapshot, t, opts?.message ? { message: opts.message } : {});
    this.snapshotsEmitter.fire({ workspace: t.workspace });
    return commit;
  }

  async listSnapshots(opts?: TargetOptions): Promise<GhostCommit[]> {
    const t = this.target(opts);
    const result = await this.call<{ snapshots: GhostCommit[] }>(Method.ghostList, t);
    return result.snapshots;
  }

  async restore(id: string, opts?: TargetOptions & { conversation?: boolean; dryRun?: boolean }): Promise<RestoreResult> {
    const t = this.target(opts);
    const params: Record<string, unknown> = { id, conversation: opts?.conversation ?? false };
    if (opts?.dryRun) params.dryRun = true;
    const result = await this.call<RestoreResult>(Method.ghostRestore, t, params);
    if (!opts?.dryRun) this.snapshotsEmitter.fire({ workspace: t.workspace });
    return result;
  }

  /** How the working tree differs from a snapshot (v2); with `path`, that file's text before and after. */
  async snapshotDiff(id: string, opts?: TargetOptions & { path?: string }): Promise<DiffResult> {
    const t = this.target(opts);
    return this.call<DiffResult>(Method.ghostDiff, t, opts?.path ? { id, path: opts.path } : { id });
  }

  async deleteSnapshot(id: string, opts?: TargetOptions): Promise<void> {
    const t = this.target(opts);
    await this.call(Method.ghostDelete, t, { id });
    this.snapshotsEmitter.fire({ workspace: t.workspace });
  }

  /** (v3) Items of the thread's whole history (or, with scope "workspace", every thread's) that match `query`, best first. */
  async recall(query: string, opts?: TargetOptions & { limit?: number; scope?: 'thread' | 'workspace' }): Promise<RecallResult> {
    const t = this.target(opts);
    const params: Record<string, unknown> = { query };
    if (opts?.limit !== undefined) params.limit = opts.limit;
    if (opts?.scope) params.scope = opts.scope;
    return this.call<RecallResult>(Method.recall, t, params);
  }

  /** (v3) One stored item whole, archived or not, by its `seq` in the thread. */
  async item(seq: number, opts?: TargetOptions): Promise<ItemResult> {
    return this.call<ItemResult>(Method.item, this.target(opts), { seq });
  }

  /** The daemon's own view of its health (v2): settings problems, tokenizers, session sources. */
  async status(workspace?: string): Promise<StatusResult> {
    const ws = this.target({ workspace }).workspace;
    return this.call<StatusResult>(Method.status, { workspace: ws });
  }

  /** The object handed to other extensions: the API's methods only, bound. */
  exports(): CtxdApi {
    const api: CtxdApi = {
      apiVersion: 1,
      protocolVersion: this.protocolVersion,
      record: (items, t) => this.record(items, t),
      reportTokenUsage: (u, t) => this.reportTokenUsage(u, t),
      setPromptContext: (c, t) => this.setPromptContext(c, t),
      getPrompt: (o) => this.getPrompt(o),
      getUsage: (t) => this.getUsage(t),
      getHistory: (o) => this.getHistory(o),
      listThreads: (w) => this.listThreads(w),
      compact: (o) => this.compact(o),
      rollback: (n, t) => this.rollback(n, t),
      snapshot: (o) => this.snapshot(o),
      listSnapshots: (t) => this.listSnapshots(t),
      restore: (id, o) => this.restore(id, o),
      latestUsage: (t) => this.latestUsage(t),
      setActiveThread: (th, w) => this.setActiveThread(th, w),
      onDidChangeUsage: (l) => this.onDidChangeUsage(l),
      onDidCompact: (l) => this.onDidCompact(l),
    };
    return Object.freeze(api);
  }

  dispose(): void {
    this.usage.dispose();
    this.compactEmitter.dispose();
    this.threadsEmitter.dispose();
    this.snapshotsEmitter.dispose();
  }
}
