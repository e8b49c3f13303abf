/**
 * Keeps the status-bar gauge in step with the daemon: it redraws on every usage change of the
 * thread it shows (no polling) and fetches the breakdown for the tooltip, debounced. Free of
 * `vscode`: the item is a `GaugeSink`, so the tests drive it against the real daemon.
 */
import type { CtxdService } from './api';
import type { StopReason } from './daemon';
import type { ThreadFacts } from './followed';
import type { Breakdown, Disposable, UsageChangedParams } from './protocol';
import { type GaugeView, downView, gaugeView, idleView } from './status';

export interface GaugeSink {
  show(view: GaugeView): void;
}

export interface FolderInfo {
  /** The folder's URI as `uri.toString()` gives it; the daemon's `workspace`. */
  uri: string;
  name: string;
}

/** The folder and thread the gauge shows, with what the thread's listing says of it (agent, title, read-only). */
export type Shown = FolderInfo & ThreadFacts;

/** Runs `fn` once, `ms` after the last call. */
export class Debouncer implements Disposable {
  private timer: ReturnType<typeof setTimeout> | undefined;
  constructor(private readonly ms: number, private readonly fn: () => void) {}
  schedule(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.fn();
    }, this.ms);
  }
  dispose(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = undefined;
  }
}

export class GaugeController implements Disposable {
  private breakdown: { key: string; value: Breakdown } | undefined;
  private down: StopReason | undefined;
  private fetching = false;
  /** A usage change came while a breakdown was being read: read it again after. */
  private stale = false;
  private readonly fetcher: Debouncer;
  private readonly sub: Disposable;

  constructor(
    private readonly service: CtxdService,
    private readonly sink: GaugeSink,
    private readonly activeFolder: () => FolderInfo | undefined,
    debounceMs = 250,
  ) {
    this.fetcher = new Debouncer(debounceMs, () => void this.fetchBreakdown());
    this.sub = service.onDidChangeUsage((e) => this.onUsage(e));
  }

  /** Why the daemon is not running, or undefined while it runs. */
  stopped(): StopReason | undefined {
    return this.down;
  }

  /** The folder and thread the gauge shows. */
  where(): Shown | undefined {
    const folder = this.activeFolder();
    if (!folder) return undefined;
    return { ...folder, ...this.service.threads.facts(folder.uri, this.service.threads.shownThread(folder.uri)) };
  }

  /** The breakdown last read for the tooltip, while it still matches the thread's usage (the breakdown tab draws it at once). */
  heldBreakdown(workspace: string, thread: string): Breakdown | undefined {
    const usage = this.service.latestUsage({ workspace, thread });
    const held = this.breakdown?.key === `${workspace}\u0000${thread}` ? this.breakdown.value : undefined;
    if (!usage || !held) return undefined;
    return held.usage.usedTokens === usage.usedTokens && held.usage.tokenizerStatus === usage.tokenizerStatus ? held : undefined;
  }

  /** Redraws from what is known and asks the daemon for the current breakdown. */
  refresh(): void {
    this.render();
    if (!this.down) this.fetcher.schedule();
  }

  setDown(reason: StopReason | undefined): void {
    this.down = reason;
    if (!reason) this.breakdown = undefined;
    this.refresh();
  }

  private onUsage(e: UsageChangedParams): void {
    const w = this.where();
    if (!w || e.workspace !== w.uri || e.thread !== w.thread) return;
    this.render();
    if (this.fetching) this.stale = true;
    else this.fetcher.schedule();
  }

  private render(): void {
    if (this.down) {
      this.sink.show(downView(this.down));
      return;
    }
    const w = this.where();
    if (!w) {
      this.sink.show(idleView(undefined));
      return;
    }
    const usage = this.service.latestUsage({ workspace: w.uri, thread: w.thread });
    if (!usage) {
      this.sink.show(idleView(w.name));
      return;
    }
    // Categories counted for other figures (before the exact tokenizer loaded, say) are not shown.
    const breakdown = this.heldBreakdown(w.uri, w.thread);
    this.sink.show(gaugeView(usage, { ...w, folderName: w.name }, breakdown));
  }

  private async fetchBreakdown(): Promise<void> {
    const w = this.where();
    if (!w || this.down) return;
    this.fetching = true;
    try {
      const value = await this.service.getUsage({ workspace: w.uri, thread: w.thread });
      this.breakdown = { key: `${w.uri}\u0000${w.thread}`, value };
    } catch {
      // The gauge keeps its text; the tooltip just lacks the categories.
    } finally {
      this.fetching = false;
    }
    this.render();
    if (this.stale) {
      this.stale = false;
      this.fetcher.schedule();
    }
  }

  dispose(): void {
    this.sub.dispose();
    this.fetcher.dispose();
  }
}
