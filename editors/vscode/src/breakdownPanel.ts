/**
 * Feeds the breakdown webview: renders the current Breakdown of the gauge's folder and thread, and
 * re-renders (debounced) on every usage change of that thread; says so when the daemon is not
 * running. Free of `vscode`: the panel is a `PanelSink`.
 */
import { isFollowed, readOnlyText, threadLabel } from './followed';
import type { CtxdService } from './api';
import { renderBreakdownHtml, renderMessageHtml } from './breakdownView';
import type { StopReason } from './daemon';
import { Debouncer, type Shown } from './gauge';
import { type Breakdown, type Disposable, Method } from './protocol';
import { codexNote } from './status';
import { friendlyError } from './errors';

export interface PanelSink {
  readonly cspSource: string;
  setHtml(html: string): void;
}

/** A breakdown already read for the thread (the gauge's tooltip has one), drawn at once while the current one is read. */
export type HeldBreakdown = (workspace: string, thread: string) => Breakdown | undefined;

export class BreakdownController implements Disposable {
  private readonly refresher: Debouncer;
  private readonly sub: Disposable;
  /** Resolves when the latest refresh has drawn (for callers that wait, e.g. the tests). */
  lastRefresh: Promise<void> = Promise.resolve();
  /** Bumped by every refresh: an older read that answers late does not draw over a newer one. */
  private draws = 0;

  constructor(
    private readonly service: CtxdService,
    private readonly sink: PanelSink,
    private readonly where: () => Shown | undefined,
    private readonly nonce: () => string,
    debounceMs = 150,
    private readonly stopped: () => StopReason | undefined = () => undefined,
    private readonly held: HeldBreakdown = () => undefined,
  ) {
    this.refresher = new Debouncer(debounceMs, () => void this.refresh());
    this.sub = service.onDidChangeUsage((e) => {
      const w = this.where();
      if (w && e.workspace === w.uri && e.thread === w.thread) this.refresher.schedule();
    });
  }

  refresh(): Promise<void> {
    this.lastRefresh = this.draw();
    return this.lastRefresh;
  }

  private async draw(): Promise<void> {
    const csp = { cspSource: this.sink.cspSource, nonce: this.nonce() };
    const down = this.stopped();
    if (down) {
      const links = down.kind === 'notInstalled' ? [] : [{ label: 'Restart', command: 'ctxd.restart' as const }];
      this.sink.setHtml(renderMessageHtml(down.message, csp, [...links, { label: 'Show log', command: 'ctxd.showLog' }]));
      return;
    }
    const w = this.where();
    if (!w) {
      this.sink.setHtml(renderMessageHtml('Open a folder to see its context usage.', csp));
      return;
    }
    const mine = ++this.draws;
    const render = (breakdown: Breakdown) =>
      this.sink.setHtml(
        renderBreakdownHtml(breakdown, {
          ...csp,
          folderName: w.name,
          thread: threadLabel(w),
          canCompact: this.service.supports(Method.compact) && !isFollowed(w),
          canSnapshot: this.service.supports(Method.ghostSnapshot),
          notes: [isFollowed(w) ? readOnlyText(w) : undefined, w.source === 'codex' ? codexNote(breakdown.usage) : undefined].filter((n): n is string => !!n),
        }),
      );
    // What is already known draws at once (the tab opens in well under 300 ms); the read redraws it.
    const known = this.held(w.uri, w.thread);
    if (known) render(known);
    try {
      const breakdown = await this.service.getUsage({ workspace: w.uri, thread: w.thread });
      if (mine === this.draws) render(breakdown);
    } catch (err) {
      if (mine === this.draws) this.sink.setHtml(renderMessageHtml(friendlyError('Reading the usage', err), csp, [{ label: 'Show log', command: 'ctxd.showLog' }]));
    }
  }

  dispose(): void {
    this.sub.dispose();
    this.refresher.dispose();
  }
}

/** A breakdown tab: where the controller draws, and the tab's own life. */
export interface PanelHandle extends PanelSink {
  reveal(): void;
  onDidDispose(listener: () => void): Disposable;
}

/**
 * The one breakdown tab of the window: opened (or revealed and redrawn) on demand, and taken back
 * when VS Code restores it after a window reload (`restored`, VS Code's own panel object).
 */
export class BreakdownTab<Restored> implements Disposable {
  private current: { controller: BreakdownController; reveal(): void } | undefined;

  constructor(
    private readonly service: CtxdService,
    private readonly create: (restored?: Restored) => PanelHandle,
    private readonly where: () => Shown | undefined,
    private readonly nonce: () => string,
    private readonly stopped: () => StopReason | undefined,
    private readonly held: HeldBreakdown = () => undefined,
  ) {}

  async open(restored?: Restored): Promise<void> {
    if (this.current && restored === undefined) {
      this.current.reveal();
      await this.current.controller.refresh();
      return;
    }
    const handle = this.create(restored);
    const controller = new BreakdownController(this.service, handle, this.where, this.nonce, 150, this.stopped, this.held);
    const current = { controller, reveal: () => handle.reveal() };
    this.current = current;
    handle.onDidDispose(() => {
      controller.dispose();
      if (this.current === current) this.current = undefined;
    });
    await controller.refresh();
  }

  /** Redraws the open tab, if any. */
  refresh(): void {
    void this.current?.controller.refresh();
  }

  dispose(): void {
    this.current?.controller.dispose();
  }
}
