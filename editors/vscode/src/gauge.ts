/**
 * Keeps the status-bar gauge in step with the daemon: it redraws on every usage change of the
 * thread it shows (no polling) and fetches the breakdown for the tooltip, debounced. Free of
 * `vscode`: the item is a `GaugeSink`, so the tests drive it against the real daemon.
 */
import type { CtxdService } from './api';
import type { StopReason } from './daemon';
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
  where(): (FolderInfo & { thread: string }) | undefined {
    const folder = this.activeFolder();
    return folder ? { ...folder, thread: this.service.threads.shownThread(folder.uri) } : undefined;
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
    const k = `${w.uri}\u0000${w.thread}`;
    // Categories counted for other figures (before the exact tokenizer loaded, say) are not shown.
    const held = this.breakdown?.key === k ? this.breakdown.value : undefined;
    const breakdown = held && held.usage.usedTokens === usage.usedTokens && held.usage.tokenizerStatus === usage.tokenizerStatus ? held : undefined;
    const source = this.service.threads.threadSource(w.uri, w.thread);
    this.sink.show(gaugeView(usage, { folderName: w.name, thread: w.thread, source }, breakdown));
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
