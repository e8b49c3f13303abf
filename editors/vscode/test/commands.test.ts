/** The palette flows with a scripted Ui, against the real daemon. */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CtxdService } from '../src/api';
import { type PickItem, type Severity, type Ui } from '../src/ui';
import { STRATEGY_ITEMS, compactFlow, restoreFlow, rollbackFlow, snapshotFlow, snapshotItems } from '../src/commands';
import { formatAge } from '../src/age';
import type { GhostCommit } from '../src/protocol';
import { Daemon as DaemonLifecycle } from '../src/daemon';
import { type Daemon, CLAUDE_SESSION, assistantMessage, startDaemon, userMessage } from './daemon';

/** A Ui that answers from a script and records what it was shown. */
class ScriptedUi implements Ui {
  picks: PickItem<unknown>[][] = [];
  messages: { severity: Severity; message: string }[] = [];
  progressTitles: string[] = [];
  confirms: string[] = [];
  constructor(
    private readonly answers: {
      pick?: ((items: PickItem<unknown>[]) => unknown)[];
      input?: (string | undefined)[];
      confirm?: boolean[];
      ask?: (string | undefined)[];
    } = {},
  ) {}
  async pick<T>(items: PickItem<T>[]): Promise<T | undefined> {
    this.picks.push(items as PickItem<unknown>[]);
    const next = this.answers.pick?.shift();
    return next ? (next(items as PickItem<unknown>[]) as T | undefined) : undefined;
  }
  async input(): Promise<string | undefined> {
    return this.answers.input?.shift();
  }
  async confirm(message: string): Promise<boolean> {
    this.confirms.push(message);
    return this.answers.confirm?.shift() ?? false;
  }
  async progress<T>(title: string, task: () => Promise<T>): Promise<T> {
    this.progressTitles.push(title);
    return task();
  }
  notify(severity: Severity, message: string): void {
    this.messages.push({ severity, message });
  }
  asked: { message: string; actions: string[] }[] = [];
  async ask(severity: Severity, message: string, actions: string[]): Promise<string | undefined> {
    this.messages.push({ severity, message });
    this.asked.push({ message, actions });
    return this.answers.ask?.shift();
  }
}

const byValue = (v: unknown) => (items: PickItem<unknown>[]) => items.find((i) => i.value === v)?.value;
const first = (items: PickItem<unknown>[]) => items[0]?.value;

function commit(id: string, createdAt: string, message: string): GhostCommit {
  return { id, parent: null, createdAt, message, fileCount: 3, skipped: [], durationMs: 5, thread: null, trigger: 'manual' };
}

describe('pure helpers', () => {
  test('snapshots are listed newest first with message, short id and age', () => {
    const now = Date.parse('2026-01-02T12:00:00Z');
    const items = snapshotItems(
      [
        commit('aaaaaaaaaa', '2026-01-02T11:00:00Z', 'before refactor'),
        commit('bbbbbbbbbb', '2026-01-02T11:59:50Z', '  '),
        commit('cccccccccc', new Date(now - 3 * 86_400_000).toISOString(), 'old'),
      ],
      now,
    );
    assert.deepEqual(
      items.map((i) => [i.label, i.description]),
      [
        ['(no message)', 'bbbbbbb · just now'],
        ['before refactor', 'aaaaaaa · 1 h ago'],
        ['old', 'ccccccc · 3 days ago'],
      ],
    );
  });

  test('ages', () => {
    const now = 1_700_000_000_000;
    assert.equal(formatAge(now - 5 * 60_000, now), '5 min ago');
    assert.equal(formatAge(now - 26 * 3_600_000, now), '1 day ago');
    assert.equal(formatAge(now + 10_000, now), 'just now');
    assert.equal(formatAge(null, now), 'time unknown');
  });
});

describe('command flows (real daemon)', () => {
  let d: Daemon;
  let service: CtxdService;
  let methods: string[];

  before(async () => {
    d = await startDaemon({ git: true });
    methods = d.initializeResult.capabilities.experimental.ctxd.methods;
    service = new CtxdService(async () => d.rpc, () => d.uri);
    service.attach(d.rpc);
  });
  after(async () => {
    service?.dispose();
    await d?.stop();
  });

  async function converse(turns: number): Promise<void> {
    for (let i = 0; i < turns; i++) {
      await service.record([
        userMessage(`Turn ${i}: please look at module ${i} and tell me what it does. `.repeat(20)),
        assistantMessage(`Module ${i} parses configuration files and validates them. `.repeat(20)),
      ]);
    }
  }

  test('the daemon serves every method the flows use', () => {
    for (const m of ['ctxd/compact', 'ctxd/rollback', 'ctxd/history', 'ctxd/ghost/snapshot', 'ctxd/ghost/list', 'ctxd/ghost/restore']) {
      assert.ok(methods.includes(m), `${m} in ${JSON.stringify(methods)}`);
    }
  });

  test('cancelled pick: nothing is sent, nothing is shown', async () => {
    const ui = new ScriptedUi();
    assert.equal(await compactFlow(ui, service), undefined);
    assert.deepEqual(ui.picks[0].map((i) => i.value), STRATEGY_ITEMS.map((i) => i.value));
    assert.deepEqual(ui.progressTitles, []);
    assert.deepEqual(ui.messages, []);
  });

  test('Roll Back Last Turn asks first, then drops the turn', async () => {
    await converse(2);
    const total = (await service.getHistory()).total;
    const no = new ScriptedUi({ confirm: [false] });
    assert.equal(await rollbackFlow(no, service), undefined);
    assert.equal((await service.getHistory()).total, total);
    const yes = new ScriptedUi({ confirm: [true] });
    const r = await rollbackFlow(yes, service);
    assert.equal(r?.removedItems, 2);
    assert.equal((await service.getHistory()).total, total - 2);
    assert.match(yes.messages[0].message, /^Rolled back the last turn: 2 items removed/);
  });

  test('Roll Back on an agent session says it is read-only instead of asking first', async () => {
    const ui = new ScriptedUi({ confirm: [true] });
    assert.equal(await rollbackFlow(ui, service, { thread: `claude:${CLAUDE_SESSION}` }), undefined);
    assert.deepEqual(ui.confirms, [], 'nothing to confirm: the daemon refuses to write an agent session');
    assert.deepEqual(ui.messages.map((m) => m.severity), ['info']);
    assert.match(ui.messages[0].message, /^This Claude.* session is read-only: use its \/rewind or \/compact; files: Restore Files on a checkpoint/);
  });

  test('Roll Back with no folder open says so instead of asking first', async () => {
    const lonely = new CtxdService(async () => d.rpc, () => undefined);
    try {
      const ui = new ScriptedUi({ confirm: [true] });
      assert.equal(await rollbackFlow(ui, lonely), undefined);
      assert.deepEqual(ui.confirms, []);
      assert.deepEqual(ui.messages, [{ severity: 'error', message: 'Rollback failed: no workspace folder is open.' }]);
    } finally {
      lonely.dispose();
    }
  });

  test('Roll Back while the daemon is not running says so instead of asking first', async () => {
    // The daemon ran, then stopped: launch.ts detaches the service; requests go to the stopped lifecycle.
    const lifecycle = new DaemonLifecycle(async () => { throw new Error('unused'); }, { started: () => undefined, stopped: () => undefined });
    let running = true;
    const down = new CtxdService(() => (running ? Promise.resolve(d.rpc) : lifecycle.rpc()), () => d.uri);
    down.attach(d.rpc, methods);
    running = false;
    down.detach();
    try {
      const ui = new ScriptedUi({ confirm: [true] });
      assert.equal(await rollbackFlow(ui, down), undefined);
      assert.deepEqual(ui.confirms, [], 'no confirmation of a rollback that cannot run');
      assert.deepEqual(ui.messages, [
        { severity: 'error', message: 'Rollback failed: the ctxd daemon is not running. Restart it from the ctxd menu in the status bar.' },
      ]);
    } finally {
      down.dispose();
    }
  });

  test('Compact Conversation (offline) shrinks the thread and reports it', async () => {
    await converse(6);
    const ui = new ScriptedUi({ pick: [byValue('offline')] });
    const r = await compactFlow(ui, service);
    assert.ok(r, JSON.stringify(ui.messages));
    assert.equal(r.strategy, 'offline');
    assert.ok(r.tokensAfter < r.tokensBefore, `${r.tokensAfter} < ${r.tokensBefore}`);
    assert.equal(ui.progressTitles.length, 1);
    assert.match(ui.messages.at(-1)!.message, /^Compacted .* → .* tokens \(shortened without a model\)\. Every compaction drops detail/);
  });

  test('a failing compaction is shown as an error and leaves the ledger as it was', async () => {
    const before = await service.getHistory();
    // No LLM endpoint is configured in this daemon: the llm strategy must fail cleanly.
    const ui = new ScriptedUi({ pick: [byValue('llm')] });
    const r = await compactFlow(ui, service);
    assert.equal(r, undefined);
    assert.equal(ui.messages.at(-1)!.severity, 'error');
    assert.match(ui.messages.at(-1)!.message, /^Compaction failed/);
    const after = await service.getHistory();
    assert.equal(after.historyVersion, before.historyVersion);
    assert.equal(after.total, before.total);
  });

  test('Take Snapshot, then Restore Snapshot (files only) brings a file back', async () => {
    const file = path.join(d.folder, 'notes.txt');
    fs.writeFileSync(file, 'version 1\n');
    const snapUi = new ScriptedUi({ input: ['before the edit'] });
    const snap = await snapshotFlow(snapUi, service);
    assert.ok(snap, JSON.stringify(snapUi.messages));
    assert.equal(snap.message, 'before the edit');
    assert.match(snapUi.messages[0].message, /^Snapshot [0-9a-f]{7} taken/);

    fs.writeFileSync(file, 'version 2\n');
    const ui = new ScriptedUi({ pick: [first, byValue('files')], confirm: [true] });
    const r = await restoreFlow(ui, service);
    assert.ok(r, JSON.stringify(ui.messages));
    assert.equal(ui.picks[0][0].label, 'before the edit');
    assert.deepEqual(ui.picks[1].map((i) => i.value), ['files', 'conversation']);
    assert.equal(fs.readFileSync(file, 'utf8'), 'version 1\n');
    assert.match(ui.messages.at(-1)!.message, /^Restored [0-9a-f]{7}: /);
  });

  test('Restore Snapshot (files and conversation) also rolls the thread back', async () => {
    const snap = await snapshotFlow(new ScriptedUi({ input: ['checkpoint'] }), service);
    assert.ok(snap);
    const atSnapshot = (await service.getHistory()).total;
    await converse(1);
    assert.equal((await service.getHistory()).total, atSnapshot + 2);
    const ui = new ScriptedUi({ pick: [first, byValue('conversation')], confirm: [true] });
    const r = await restoreFlow(ui, service);
    assert.ok(r, JSON.stringify(ui.messages));
    assert.equal(r.id, snap.id);
    assert.ok((r.removedItems ?? 0) >= 2, `removedItems ${r.removedItems}`);
    assert.ok((await service.getHistory()).total <= atSnapshot);
    assert.match(ui.messages.at(-1)!.message, /conversation items dropped\.$/);
  });

  test('Restore Snapshot declined at the confirmation changes nothing', async () => {
    const before = await service.getHistory();
    const ui = new ScriptedUi({ pick: [first, byValue('conversation')], confirm: [false] });
    assert.equal(await restoreFlow(ui, service), undefined);
    assert.deepEqual(ui.progressTitles, []);
    assert.equal((await service.getHistory()).total, before.total);
  });

  test('Take Snapshot cancelled at the message box does nothing', async () => {
    const ui = new ScriptedUi({ input: [undefined] });
    assert.equal(await snapshotFlow(ui, service), undefined);
    assert.deepEqual(ui.progressTitles, []);
  });
});
