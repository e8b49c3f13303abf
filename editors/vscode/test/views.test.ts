/** The activity-bar trees, manual-compaction messages and snapshot actions, against the real daemon. */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CtxdService } from '../src/api';
import { COMMANDS } from '../src/commandIds';
import { type PickItem, type Severity, type Ui } from '../src/ui';
import { type CompactResult, type DiffFile, Method } from '../src/protocol';
import { statusMarkdown } from '../src/statusReport';
import { UNDO_RESTORE, deleteSnapshotFlow, restoreSnapshotFlow, showChangesFlow } from '../src/snapshots';
import { CompactionsModel, SnapshotsModel, ThreadsModel, archivedBy, threadNode } from '../src/trees';
import { formatTokens } from '../src/numbers';
import { BreakdownController } from '../src/breakdownPanel';
import { GaugeController } from '../src/gauge';
import type { GaugeView } from '../src/status';
import { type Daemon, assistantMessage, startDaemon, userMessage, waitFor, attachedService } from './daemon';
import { setAgentNames } from '../src/agents';

class ScriptedUi implements Ui {
  messages: { severity: Severity; message: string }[] = [];
  asked: { message: string; actions: string[] }[] = [];
  confirms: { message: string; detail: string }[] = [];
  constructor(private readonly answers: { confirm?: boolean[]; pick?: ((items: PickItem<unknown>[]) => unknown)[]; ask?: (string | undefined)[] } = {}) {}
  async pick<T>(items: PickItem<T>[]): Promise<T | undefined> {
    const next = this.answers.pick?.shift();
    return next ? (next(items as PickItem<unknown>[]) as T) : undefined;
  }
  async input(): Promise<string | undefined> {
    return undefined;
  }
  async confirm(message: string, detail: string): Promise<boolean> {
    this.confirms.push({ message, detail });
    return this.answers.confirm?.shift() ?? false;
  }
  progress<T>(_title: string, task: () => Promise<T>): Promise<T> {
    return task();
  }
  notify(severity: Severity, message: string): void {
    this.messages.push({ severity, message });
  }
  async ask(severity: Severity, message: string, actions: string[]): Promise<string | undefined> {
    this.messages.push({ severity, message });
    this.asked.push({ message, actions });
    return this.answers.ask?.shift();
  }
}

describe('views and snapshot actions (real daemon)', () => {
  let d: Daemon;
  let service: CtxdService;
  const where = () => ({ uri: d.uri, name: 'ws', thread: service.threads.shownThread(d.uri) });

  before(async () => {
    d = await startDaemon({ git: true });
    setAgentNames(d.initializeResult.capabilities.experimental.ctxd.agents); // as the extension's client does
    service = attachedService(d);
  });
  after(async () => {
    service?.dispose();
    await d?.stop();
  });

  test('Threads lists every thread, marks the shown one, and a click shows it', async () => {
    await service.record([userMessage('Fix the flaky deploy test, please.'), assistantMessage('On it.')]);
    await service.record([userMessage('side question')], { thread: 'side' });
    service.setActiveThread('default');
    const threads = new ThreadsModel(service, where, 5, () => Date.now());
    try {
      const nodes = await threads.nodes();
      assert.deepEqual(nodes.map((n) => n.id).sort(), ['thread:default', 'thread:side']);
      const shown = nodes.find((n) => n.id === 'thread:default')!;
      assert.equal(shown.icon, 'pass-filled');
      assert.deepEqual(shown.command, { command: COMMANDS.showThread, title: 'Show in the status bar', arguments: [d.uri, 'default'] });
      assert.notEqual(nodes.find((n) => n.id === 'thread:side')!.icon, 'pass-filled');
      // A usage change refreshes the tree (debounced).
      let changed = 0;
      threads.onDidChange(() => changed++);
      await service.record([userMessage('one more')], { thread: 'side' });
      await waitFor(() => changed > 0, (wake) => threads.onDidChange(wake), 5000, 'threads refresh');
    } finally {
      threads.dispose();
    }
  });

  test('a thread node says its source, fill and age (protocol v2 fields)', () => {
    const node = threadNode(
      {
        thread: 'claude:abc',
        itemCount: 12,
        historyVersion: 3,
        updatedAt: new Date(0).toISOString(),
        source: 'claude',
        title: 'Refactor the parser',
        readOnly: true,
        usage: { usedTokens: 64_000, contextWindow: 200_000, percent: 32, autoCompactLimit: 180_000, tier: 'ok', source: 'api', historyVersion: 3 },
        lastActivity: new Date(1_700_000_000_000).toISOString(),
      },
      'file:///w',
      'default',
      1_700_000_000_000 + 5 * 60_000,
    );
    assert.equal(node.label, 'Refactor the parser');
    assert.equal(node.description, 'Claude Code · 32% · 64k · 5 min ago');
    assert.equal(node.contextValue, 'thread.readOnly');
    assert.equal(node.icon, 'sparkle');
  });

  test('a manual compaction is marked as such, and the daemon speaks during it only', async () => {
    for (let i = 0; i < 6; i++) {
      await service.record([userMessage(`Turn ${i}: look at module ${i}. `.repeat(30)), assistantMessage(`Module ${i} parses. `.repeat(30))]);
    }
    const compactions = new CompactionsModel(service, where, 5, () => Date.now());
    const seen: boolean[] = [];
    const sub = service.onDidCompact((e) => seen.push(e.manual));
    const duringCompaction: boolean[] = [];
    const msgSub = d.rpc.onNotification('window/showMessage', () => duringCompaction.push(service.compactingNow()));
    try {
      const r = await service.compact({ strategy: 'offline' });
      assert.ok(r.tokensAfter < r.tokensBefore);
      await waitFor(() => seen.length === 1, (wake) => service.onDidCompact(wake), 5000, 'ctxd/compacted');
      assert.deepEqual(seen, [true]);
      // Every message the daemon sent about it arrived while it ran: the extension shows none of them.
      assert.ok(duringCompaction.every(Boolean), JSON.stringify(duringCompaction));
      assert.equal(service.compactingNow(), false);
      const nodes = await compactions.nodes();
      assert.equal(nodes.length, 1);
      // v3: the History tree lists the operation with its items and tokens before → after.
      // Tokens, not items (issue #40: "Rollback: 6 → 12 items" said nothing people count).
      assert.equal(nodes[0].label, `Compaction: ${formatTokens(r.tokensBefore)} → ${formatTokens(r.tokensAfter)} tokens`);
      assert.doesNotMatch(`${nodes[0].label} ${nodes[0].description}`, /items/);
      assert.equal(nodes[0].command?.arguments.slice(0, 2).join(' '), `${d.uri} default`);
      // Another client's compaction (straight on the wire) is not ours.
      await service.record([userMessage('more '.repeat(400)), assistantMessage('ok '.repeat(400))]);
      const other = await d.rpc.sendRequest<CompactResult>(Method.compact, { workspace: d.uri, thread: 'default', strategy: 'offline' });
      await waitFor(() => seen.length === 2, (wake) => service.onDidCompact(wake), 5000, 'second ctxd/compacted');
      assert.deepEqual(seen, [true, false]);

      // A window opened afterwards (a fresh model that saw neither on the wire) lists both, newest
      // first, from ctxd/history; each opens the items it replaced.
      const reloaded = new CompactionsModel(service, where, 5, () => Date.now());
      try {
        const past = await reloaded.nodes();
        assert.deepEqual(
          past.map((n) => /^Compaction: (\S+ → \S+ tokens)$/.exec(n.label)?.[1]),
          [other, r].map((c) => `${formatTokens(c.tokensBefore)} → ${formatTokens(c.tokensAfter)} tokens`),
        );
        assert.match(past[1].description ?? '', /^shortened without a model · /);
        const history = await service.getHistory({ includeArchived: true });
        const [newest, oldest] = past.map((n) => n.command?.arguments[2] as number);
        assert.ok(oldest < newest);
        const first = archivedBy(history, oldest);
        assert.ok(first.some((i) => JSON.stringify(i).includes('Turn 0: look at module 0.')), JSON.stringify(first).slice(0, 300));
        assert.ok(!first.some((i) => JSON.stringify(i).includes('more more')));
        const second = archivedBy(history, newest);
        assert.ok(second.some((i) => JSON.stringify(i).includes('more more')));
        assert.equal(first.length + second.length, history.items.filter((i) => i.archived === true).length);

        // The shown thread changes (the gauge follows another thread): the next usage change redraws.
        let thread = 'elsewhere';
        const switching = new CompactionsModel(service, () => ({ uri: d.uri, name: 'ws', thread }), 5, () => Date.now());
        let redraws = 0;
        const redrawSub = switching.onDidChange(() => redraws++);
        try {
          // Empty: the view's welcome content says so (package.json viewsWelcome).
          assert.deepEqual((await switching.nodes()).map((n) => n.label), []);
          thread = 'default';
          await service.record([userMessage('after both compactions')]);
          await waitFor(() => redraws > 0, (wake) => switching.onDidChange(wake), 5000, 'the Compactions tree to redraw');
          assert.deepEqual((await switching.nodes()).map((n) => n.label), past.map((n) => n.label));
        } finally {
          redrawSub.dispose();
          switching.dispose();
        }
      } finally {
        reloaded.dispose();
      }
    } finally {
      sub.dispose();
      msgSub.dispose();
      compactions.dispose();
    }
  });

  test('Snapshots lists snapshots; restore asks, restores, and offers Undo when the daemon gives one', async () => {
    const file = path.join(d.folder, 'notes.txt');
    fs.writeFileSync(file, 'version 1\n');
    const snap = await service.snapshot({ message: 'before the edit' });
    const snapshots = new SnapshotsModel(service, where, 5, () => Date.now());
    try {
      const nodes = await snapshots.nodes();
      const node = nodes.find((n) => n.id === `snapshot:${snap.id}`);
      assert.ok(node, JSON.stringify(nodes));
      assert.equal(node.label, 'before the edit');
      assert.equal(node.contextValue, 'snapshot');

      fs.writeFileSync(file, 'version 2\n');
      const declined = new ScriptedUi({ confirm: [false] });
      assert.equal(await restoreSnapshotFlow(declined, service, snap.id, false), undefined);
      assert.equal(fs.readFileSync(file, 'utf8'), 'version 2\n');

      let undoable: string | undefined;
      const ui = new ScriptedUi({ confirm: [true] });
      const r = await restoreSnapshotFlow(ui, service, snap.id, false, undefined, (id) => (undoable = id));
      assert.ok(r, JSON.stringify(ui.messages));
      assert.equal(fs.readFileSync(file, 'utf8'), 'version 1\n');
      assert.match(ui.messages.at(-1)!.message, /^Restored [0-9a-f]{7}: 1 file restored, 0 removed\.$/);
      if (service.supports(Method.ghostDiff)) {
        // Protocol v2: a preview in the confirmation, and an undo.
        assert.match(ui.confirms[0].detail, /1 file will be written and 0 files removed; you can undo it\./);
        assert.ok(r.undoId && undoable === r.undoId);
        assert.deepEqual(ui.asked.at(-1)!.actions, [UNDO_RESTORE]);
        snapshots.setUndo(undoable);
        assert.equal((await snapshots.nodes())[0].label, 'Undo restore');
      } else {
        assert.equal(r.undoId, undefined);
        assert.equal(undoable, undefined);
      }
    } finally {
      snapshots.dispose();
    }
  });

  test('Show changes opens the diff of the one changed file (protocol v2)', async (t) => {
    if (!service.supports(Method.ghostDiff)) return t.skip('this daemon does not serve ctxd/ghost/diff yet (protocol v2)');
    const file = path.join(d.folder, 'diffme.txt');
    fs.writeFileSync(file, 'before\n');
    const snap = await service.snapshot({ message: 'diff base' });
    fs.writeFileSync(file, 'after\n');
    const opened: DiffFile[] = [];
    const ui = new ScriptedUi({ pick: [(items) => items.find((i) => (i.value as DiffFile).path === 'diffme.txt')?.value] });
    const chosen = await showChangesFlow(ui, service, snap.id, async (f) => {
      opened.push(f);
    });
    assert.equal(chosen?.path, 'diffme.txt');
    assert.equal(opened.length, 1);
    assert.equal(opened[0].before, 'before\n');
    assert.equal(opened[0].status, 'modified');
  });

  test('Show status renders what ctxd/status says (protocol v2)', async (t) => {
    if (!service.supports(Method.status)) return t.skip('this daemon does not serve ctxd/status yet (protocol v2)');
    const status = await service.status();
    assert.equal(status.protocolVersion, 4);
    assert.equal(status.trusted, false);
    const md = statusMarkdown(status);
    assert.ok(md.startsWith(`# ctxd ${status.version} (protocol 4)`), md);
    assert.match(md, /Trusted: no/);
  });

  test('Delete asks first, then the snapshot is gone (protocol v2)', async (t) => {
    if (!service.supports(Method.ghostDelete)) return t.skip('this daemon does not serve ctxd/ghost/delete yet (protocol v2)');
    const snapshots = new SnapshotsModel(service, where, 5, () => Date.now());
    let changes = 0;
    const sub = snapshots.onDidChange(() => changes++);
    const shown = async () => (await snapshots.nodes()).map((n) => n.id);
    try {
      // The tree redraws on a snapshot taken or deleted through the service (no ctxd/threadsChanged for it).
      const snap = await service.snapshot({ message: 'to delete' });
      await waitFor(() => changes > 0, (wake) => snapshots.onDidChange(wake), 5000, 'the tree to redraw after the snapshot');
      assert.ok((await shown()).includes(`snapshot:${snap.id}`));
      assert.equal(await deleteSnapshotFlow(new ScriptedUi({ confirm: [false] }), service, snap), false);
      assert.ok((await service.listSnapshots()).some((s) => s.id === snap.id));
      const seen = changes;
      assert.equal(await deleteSnapshotFlow(new ScriptedUi({ confirm: [true] }), service, snap), true);
      await waitFor(() => changes > seen, (wake) => snapshots.onDidChange(wake), 5000, 'the tree to redraw after the delete');
      assert.ok(!(await service.listSnapshots()).some((s) => s.id === snap.id));
      assert.ok(!(await shown()).includes(`snapshot:${snap.id}`));
    } finally {
      sub.dispose();
      snapshots.dispose();
    }
  });
});

describe('the figures shown are the daemon\'s (real daemon)', () => {
  let d: Daemon;
  let service: CtxdService;

  before(async () => {
    d = await startDaemon();
    service = attachedService(d);
  });
  after(async () => {
    service?.dispose();
    await d?.stop();
  });

  test("the breakdown page and the gauge's tooltip show each category's share as the daemon gives it, ties included", async () => {
    const thread = 'shares';
    const context = { baseInstructions: 'You are a careful assistant. Keep answers short and exact. '.repeat(40) };
    await service.record([userMessage('How full is the window?'), assistantMessage('Let us see.')], { thread });
    await service.setPromptContext(context, { thread });
    const before = await service.getUsage({ thread });
    const system = before.categories.find((c) => c.name === 'systemPrompt')!.tokens;
    assert.ok(system > 0);
    // A window of 400× the system prompt: its share is 0.25% exactly, a tie the daemon rounds half to even.
    await service.setPromptContext({ ...context, contextWindow: 400 * system }, { thread });
    const daemonSays = (await service.getUsage({ thread })).categories.find((c) => c.name === 'systemPrompt')!;
    assert.equal(daemonSays.tokens, system);
    const shown = `${daemonSays.percent.toFixed(1)}%`;

    let html = '';
    const page = new BreakdownController(service, { cspSource: 'vscode-resource:', setHtml: (h) => void (html = h) }, () => ({ uri: d.uri, name: 'ws', thread, source: 'client' }), () => 'n0nce', 1);
    await page.refresh();
    page.dispose();
    const row = /<tr data-category="systemPrompt">.*?<\/tr>/.exec(html)?.[0] ?? '';
    assert.ok(row.endsWith(`<td class="num">${shown}</td></tr>`), `${row} (the daemon: ${daemonSays.percent})`);

    const views: GaugeView[] = [];
    service.setActiveThread(thread, d.uri);
    const gauge = new GaugeController(service, { show: (v) => views.push(v) }, () => ({ uri: d.uri, name: 'ws' }), 1);
    gauge.refresh();
    await waitFor(() => views.some((v) => v.tooltip.includes('- System prompt:')), (wake) => {
      const t = setInterval(wake, 20);
      return { dispose: () => clearInterval(t) };
    }, 10_000, "the tooltip's categories");
    gauge.dispose();
    const line = views.at(-1)!.tooltip.split('\n').find((l) => l.startsWith('- System prompt:'))!;
    assert.ok(line.endsWith(`(${shown})`), `${line} (the daemon: ${daemonSays.percent})`);
  });
});

describe('a tree whose listing fails (real daemon, stopped)', () => {
  test('Threads shows one plain-words row that opens the ctxd menu, not the raw error', async () => {
    const gone = await startDaemon();
    const service = attachedService(gone);
    const where = () => ({ uri: gone.uri, name: 'ws', thread: 'default' });
    const threads = new ThreadsModel(service, where, 5);
    const history = new CompactionsModel(service, where, 5);
    try {
      // The daemon went away before the service heard of it (no detach yet): the listing request fails.
      await gone.stop();
      const rows = await threads.nodes();
      const down = 'failed: the ctxd daemon is not running. Restart it from the ctxd menu in the status bar.';
      assert.deepEqual(
        rows.map((n) => [n.label, n.icon, n.command?.command]),
        [[`Listing threads ${down}`, 'warning', COMMANDS.menu]],
      );
      assert.doesNotMatch(rows[0].tooltip ?? '', /connection|Request ctxd\//i);
      assert.deepEqual((await history.nodes()).map((n) => n.label), [`Reading the history ${down}`]);
    } finally {
      threads.dispose();
      history.dispose();
      service.dispose();
    }
  });
});
