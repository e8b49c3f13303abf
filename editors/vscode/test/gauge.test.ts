/** The status-bar gauge and the breakdown panel, driven by the real daemon's notifications. */
import assert from 'node:assert/strict';
import { threadFacts } from '../src/followed';
import { after, before, describe, test } from 'node:test';
import { CtxdService } from '../src/api';
import { BreakdownController } from '../src/breakdownPanel';
import { Emitter } from '../src/emitter';
import { GaugeController } from '../src/gauge';
import { formatTokens } from '../src/numbers';
import { ERROR_BACKGROUND, type GaugeView, WARNING_BACKGROUND, gaugeText } from '../src/status';
import { type Daemon, startDaemon, userMessage, waitFor } from './daemon';
import { setAgentNames } from '../src/agents';

class RecordingSink {
  views: GaugeView[] = [];
  private changed = new Emitter<void>();
  show(view: GaugeView): void {
    this.views.push(view);
    this.changed.fire();
  }
  get last(): GaugeView | undefined {
    return this.views[this.views.length - 1];
  }
  until(check: (v: GaugeView) => boolean, what: string): Promise<void> {
    return waitFor(() => !!this.last && check(this.last), (wake) => this.changed.event(wake), 10_000, what);
  }
}

describe('gauge and breakdown (real daemon)', () => {
  let d: Daemon;
  let service: CtxdService;
  let sink: RecordingSink;
  let gauge: GaugeController;
  const folder = () => ({ uri: d.uri, name: 'ws' });

  before(async () => {
    d = await startDaemon({ options: { contextWindow: 2000 } });
    setAgentNames(d.initializeResult.capabilities.experimental.ctxd.agents); // as the extension's client does
    service = new CtxdService(async () => d.rpc, () => d.uri);
    service.attach(d.rpc);
    sink = new RecordingSink();
    gauge = new GaugeController(service, sink, folder, 20);
  });
  after(async () => {
    gauge?.dispose();
    service?.dispose();
    await d?.stop();
  });

  test('idle before anything is recorded', async () => {
    gauge.refresh();
    assert.equal(sink.last?.text, '$(pulse) ctxd');
  });

  test('records move the gauge to what the daemon reports, without polling', async () => {
    // Record through a second, independent connection path: straight on the wire, so the only way
    // the gauge learns of it is the daemon's ctxd/usageChanged notification.
    const r = await d.rpc.sendRequest<{ usage: { usedTokens: number; contextWindow: number } }>('ctxd/record', {
      workspace: d.uri,
      items: [userMessage('Add a --dry-run flag to the deploy script and explain the change.')],
    });
    const expected = gaugeText(r.usage as never);
    await sink.until((v) => v.text === expected, `gauge text ${expected}`);
    assert.match(sink.last!.text, /^\$\(pulse\) \d+% · [\d.]+k?\/2k$/);
    assert.equal(sink.last!.backgroundColor, undefined);
    // The thread by its title once listed ("default" until then), never in a code span.
    assert.match(sink.last!.tooltip, /^\*\*ctxd\*\* · ws · thread "(default|Add a --dry-run flag to the deploy script and explain the change\.)"\n/);
  });

  test('the tooltip gains the top categories once the breakdown is fetched', async () => {
    // Once the model API has reported usage, the breakdown has its `messages` category.
    const used = service.latestUsage()!.usedTokens;
    await d.rpc.sendRequest('ctxd/reportTokenUsage', {
      workspace: d.uri,
      usage: { inputTokens: used, outputTokens: 0, totalTokens: used },
    });
    const b = await service.getUsage();
    const messages = b.categories.find((c) => c.name === 'messages');
    assert.ok(messages && messages.tokens > 0, JSON.stringify(b.categories));
    await sink.until((v) => v.tooltip.includes('Top categories'), 'tooltip categories');
    assert.match(sink.last!.tooltip, /- Messages: /);
  });

  test('counts that change (the exact tokenizer loaded) drop the old categories at once and fetch new ones', async () => {
    await sink.until((v) => v.tooltip.includes('Top categories'), 'tooltip categories');
    const now = service.latestUsage()!;
    // What a ctxd/usageChanged says when the exact tokenizer has loaded: other counts, same history.
    const recounted = { ...now, usedTokens: now.usedTokens + 7, tokenizerStatus: 'exact' as const };
    let fired = 0;
    const sub = service.onDidChangeUsage(() => fired++);
    service.update({ workspace: d.uri, thread: 'default' }, recounted);
    sub.dispose();
    assert.equal(fired, 1, 'the new counts are news');
    // The categories fetched for the old counts are not shown beside the new ones...
    assert.match(sink.last!.tooltip, new RegExp(`${formatTokens(recounted.usedTokens).replace('.', '\\.')} of `));
    assert.doesNotMatch(sink.last!.tooltip, /Top categories/);
    // ...and the breakdown is read again.
    await sink.until((v) => v.tooltip.includes('Top categories'), 'the categories of the new counts');
  });

  test('a change of tokenizer state alone is news too', () => {
    const now = service.latestUsage()!;
    let fired = 0;
    const sub = service.onDidChangeUsage(() => fired++);
    service.update({ workspace: d.uri, thread: 'default' }, { ...now, tokenizerStatus: now.tokenizerStatus === 'exact' ? 'loading' : 'exact' });
    sub.dispose();
    assert.equal(fired, 1);
  });

  test('warn and compact tiers colour the gauge', async () => {
    const limit = service.latestUsage()!.autoCompactLimit;
    assert.ok(limit > 0);
    const warn = await d.rpc.sendRequest<{ tier: string }>('ctxd/reportTokenUsage', {
      workspace: d.uri,
      usage: { inputTokens: Math.ceil(0.85 * limit), outputTokens: 0, totalTokens: Math.ceil(0.85 * limit) },
    });
    assert.equal(warn.tier, 'warn');
    await sink.until((v) => v.backgroundColor === WARNING_BACKGROUND, 'warning colour');
    const compact = await d.rpc.sendRequest<{ tier: string }>('ctxd/reportTokenUsage', {
      workspace: d.uri,
      usage: { inputTokens: limit + 10, outputTokens: 0, totalTokens: limit + 10 },
    });
    assert.equal(compact.tier, 'compact');
    await sink.until((v) => v.backgroundColor === ERROR_BACKGROUND, 'error colour');
    assert.equal(sink.last!.level, 'error');
  });

  test('another thread does not move the gauge until it is the shown one', async () => {
    const shown = sink.last!.text;
    service.setActiveThread('default');
    const r = await service.record([userMessage('side conversation')], { thread: 'side' });
    assert.equal(sink.last!.text, shown);
    service.setActiveThread('side');
    gauge.refresh();
    assert.equal(sink.last!.text, gaugeText(r.usage));
    service.setActiveThread('default');
    gauge.refresh();
    assert.equal(sink.last!.text, shown);
  });

  test('the breakdown panel renders the thread and refreshes on usageChanged', async () => {
    let html = '';
    const changed = new Emitter<void>();
    const panel = new BreakdownController(
      service,
      { cspSource: 'vscode-webview://test', setHtml: (h) => { html = h; changed.fire(); } },
      () => gauge.where(),
      () => 'N0NCE',
      20,
    );
    try {
      await panel.refresh();
      assert.match(html, /<h1>Context Usage<\/h1>/);
      assert.match(html, /<span id="thread">thread &quot;Add a --dry-run flag/);
      const before = html;
      await service.record([userMessage('x '.repeat(300))]);
      await waitFor(() => html !== before, (wake) => changed.event(wake), 10_000, 'panel refresh');
      const used = service.latestUsage()!;
      assert.ok(html.includes(`nonce-N0NCE`));
      assert.ok(html.includes(`${formatTokens(used.usedTokens)}/${formatTokens(used.contextWindow)} tokens`));
      assert.doesNotMatch(html, /history version|Tier (ok|warn|compact)/);
    } finally {
      panel.dispose();
    }
  });

  test('the breakdown page of a followed thread offers no Compact now (its agent compacts it)', async () => {
    let html = '';
    const where = () => {
      const w = gauge.where();
      return w && { ...w, ...threadFacts('claude:7f2c1d9e-3b4a-4c5d-8e6f-0a1b2c3d4e5f') };
    };
    const panel = new BreakdownController(service, { cspSource: 'vscode-webview://test', setHtml: (h) => { html = h; } }, where, () => 'N0NCE', 20);
    try {
      await panel.refresh();
      assert.match(html, /<span id="thread">Claude Code session 7f2c1d9e<\/span>/);
      assert.match(html, /This Claude Code session is read-only: use its \/rewind or \/compact/);
      assert.match(html, /<h1>Context Usage<\/h1>/);
      assert.doesNotMatch(html, /id="compact"/);
    } finally {
      panel.dispose();
    }
  });

  test('a daemon that went away shows as down, and recovers', () => {
    gauge.setDown({ kind: 'failed', message: 'spawn ctxd ENOENT' });
    assert.match(sink.last!.text, /debug-disconnect/);
    gauge.setDown(undefined);
    assert.match(sink.last!.text, /^\$\(pulse\) \d+%/);
  });
});
