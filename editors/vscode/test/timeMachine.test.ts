/** The time machine (protocol v3): Undo after each history operation, and the History and Snapshots trees, against the real daemon. */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CtxdService } from '../src/api';
import { COMMANDS } from '../src/commandIds';
import { type PickItem, type Severity, type Ui } from '../src/ui';
import { compactFlow, rollbackFlow, snapshotItems } from '../src/commands';
import type { GhostCommit, HistoryResult, OperationRecord } from '../src/protocol';
import { UNDO_RESTORE, restoreSnapshotFlow } from '../src/snapshots';
import { REDO, RestoreMemory, UNDO, lastUndoable, rollbackQuestion, undoFlow, undoLastFlow } from '../src/timeMachine';
import { CompactionsModel, snapshotTree } from '../src/trees';
import { type Daemon, assistantMessage, startDaemon, userMessage, attachedService } from './daemon';
import { setAgentNames } from '../src/agents';
import { AGENT_NAMES } from './fixtures';

setAgentNames(AGENT_NAMES); // the names the daemon gives (fixtures.ts)

/** A Ui that answers from a script, records what it showed, and wakes waiters on each message. */
class ScriptedUi implements Ui {
  messages: { severity: Severity; message: string; actions?: string[] }[] = [];
  confirms: { message: string; detail: string }[] = [];
  private wake: (() => void)[] = [];
  constructor(private readonly answers: { confirm?: boolean[]; ask?: (string | undefined)[] } = {}) {}
  async pick<T>(_items: PickItem<T>[]): Promise<T | undefined> {
    return undefined;
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
    this.push({ severity, message });
  }
  async ask(severity: Severity, message: string, actions: string[]): Promise<string | undefined> {
    this.push({ severity, message, actions });
    return this.answers.ask?.shift();
  }
  private push(m: { severity: Severity; message: string; actions?: string[] }): void {
    this.messages.push(m);
    this.wake.splice(0).forEach((w) => w());
  }
  /** The first message matching `pattern`, once it is shown. */
  async shown(pattern: RegExp): Promise<{ severity: Severity; message: string; actions?: string[] }> {
    const deadline = Date.now() + 15_000;
    for (;;) {
      const m = this.messages.find((x) => pattern.test(x.message));
      if (m) return m;
      if (Date.now() > deadline) throw new Error(`no message ${pattern}: ${JSON.stringify(this.messages)}`);
      await new Promise<void>((resolve) => {
        this.wake.push(resolve);
        setTimeout(resolve, 200);
      });
    }
  }
}

/** The active history's items without the fields the store adds. */
function active(h: HistoryResult): string {
  return JSON.stringify(h.items);
}

describe('time machine (real daemon)', () => {
  let d: Daemon;
  let service: CtxdService;

  before(async () => {
    d = await startDaemon({ git: true });
    setAgentNames(d.initializeResult.capabilities.experimental.ctxd.agents); // as the extension's client does
    service = attachedService(d);
  });
  after(async () => {
    service?.dispose();
    await d?.stop();
  });

  async function converse(thread: string, turns: number): Promise<void> {
    for (let i = 0; i < turns; i++) {
      await service.record(
        [userMessage(`Turn ${i}: please look at module ${i}. `.repeat(20)), assistantMessage(`Module ${i} parses configuration. `.repeat(20))],
        { thread },
      );
    }
  }

  test('Compact offers Undo; Undo puts the history back, and offers Redo', async () => {
    await converse('compact', 6);
    const t = { thread: 'compact' };
    const before = await service.getHistory(t);
    const ui = new ScriptedUi({ ask: [UNDO, undefined] });
    const r = await compactFlow(ui, service, t, 'offline');
    assert.ok(r?.undoId !== undefined, JSON.stringify(ui.messages));
    const compacted = await ui.shown(/^Compacted /);
    assert.deepEqual(compacted.actions, [UNDO]);
    const undone = await ui.shown(/^Compaction undone: /);
    assert.deepEqual(undone.actions, [REDO]);
    const back = await service.getHistory(t);
    assert.equal(active(back), active(before));
    const ops = (await service.getHistory({ ...t, includeArchived: true, limit: 0 })).operations!;
    assert.deepEqual(ops.map((o) => [o.kind, o.undoneBy !== undefined]), [['compaction', true], ['undo', false]]);
  });

  test('Roll Back after a compaction warns that it crosses it; declined changes nothing; Undo brings the compaction back', async () => {
    await converse('cross', 6);
    const t = { thread: 'cross' };
    await service.compact({ ...t, strategy: 'offline' });
    const compacted = await service.getHistory(t);

    const no = new ScriptedUi({ confirm: [false] });
    assert.equal(await rollbackFlow(no, service, t), undefined);
    assert.equal(no.confirms[0].message, 'Roll back past a compaction?');
    assert.match(no.confirms[0].detail, /^This goes back past a compaction: /);
    assert.match(no.confirms[0].detail, /items of the conversation are taken out, leaving .* tokens in use\. Nothing is deleted: you can undo it\./);
    assert.equal(active(await service.getHistory(t)), active(compacted));

    const yes = new ScriptedUi({ confirm: [true], ask: [UNDO] });
    const r = await rollbackFlow(yes, service, t);
    assert.ok(r?.crossesCompaction, JSON.stringify(r));
    const rolled = await yes.shown(/^Rolled back the last turn and the compaction it went past: /);
    assert.deepEqual(rolled.actions, [UNDO]);
    await yes.shown(/^Rollback undone: /);
    assert.equal(active(await service.getHistory(t)), active(compacted));
    const ops = (await service.getHistory({ ...t, includeArchived: true, limit: 0 })).operations!;
    assert.deepEqual(ops.map((o) => [o.kind, o.undoneBy !== undefined]), [['compaction', false], ['rollback', true], ['undo', false]]);
  });

  test('Undo of a compaction under a newer one shows the daemon\'s sentence: which operation to undo first', async () => {
    await converse('older', 6);
    const t = { thread: 'older' };
    const first = (await service.compact({ ...t, strategy: 'offline' })).undoId!;
    await converse('older', 6);
    const second = (await service.compact({ ...t, strategy: 'offline' })).undoId!;
    const compacted = await service.getHistory(t);
    const ui = new ScriptedUi();
    assert.equal(await undoFlow(ui, service, { kind: 'compaction', id: first }, t), undefined);
    const shown = await ui.shown(/^Undo failed: /);
    assert.equal(shown.severity, 'error');
    const sentence =
      `^Undo failed: operation ${first} \\(a compaction, \\d+ → \\d+ items\\) of thread 'older' cannot be undone while a later ` +
      `operation is in effect: operation ${second} \\(a compaction, \\d+ → \\d+ items\\) came after it and summarised the ` +
      `history as operation ${first} left it\\. Undo operation ${second} first, then operation ${first}\\. Nothing was changed\\.$`;
    assert.match(shown.message, new RegExp(sentence));
    assert.equal(active(await service.getHistory(t)), active(compacted));
  });

  test('Roll Back without a compaction in the way asks plainly', async () => {
    await converse('plain', 2);
    const ui = new ScriptedUi({ confirm: [false] });
    await rollbackFlow(ui, service, { thread: 'plain' });
    assert.equal(ui.confirms[0].message, 'Roll back the last turn?');
    assert.doesNotMatch(ui.confirms[0].detail, /compaction/);
    const empty = new ScriptedUi();
    assert.equal(await rollbackFlow(empty, service, { thread: 'never-recorded' }), undefined);
    assert.deepEqual(empty.confirms, []);
  });

  test('Restore Files and Conversation, then Undo restore: the files and the conversation come back', async () => {
    const t = { thread: 'default' };
    const file = path.join(d.folder, 'app.py');
    fs.writeFileSync(file, 'v1\n');
    await converse('default', 1);
    const snap = await service.snapshot({ ...t, message: 'before v2' });
    await converse('default', 2);
    fs.writeFileSync(file, 'v2\n');
    const before = await service.getHistory(t);

    const memory = new RestoreMemory();
    let undoable: [string | undefined, boolean] | undefined;
    const ui = new ScriptedUi({ confirm: [true], ask: [UNDO_RESTORE] });
    const r = await restoreSnapshotFlow(ui, service, snap.id, true, t, (id, both) => (undoable = [id, both]), memory);
    assert.ok(r?.operationId !== undefined && r.undoId, JSON.stringify(r));
    assert.deepEqual(undoable, [r.undoId, true]);
    assert.equal(memory.recall(service.target(t), r.operationId), r.undoId);
    await ui.shown(/^Restore undone: 1 file put back, 0 removed, and the conversation is as it was before the restore\.$/);
    assert.equal(fs.readFileSync(file, 'utf8'), 'v2\n');
    assert.equal(active(await service.getHistory(t)), active(before));
  });

  test('Undo Last History Operation: the latest one in effect, after a confirmation, with the files for a restore this window ran', async () => {
    const t = { thread: 'last' };
    const file = path.join(d.folder, 'last.txt');
    fs.writeFileSync(file, 'one\n');
    await converse('last', 1);
    const snap = await service.snapshot({ ...t, message: 'last one' });
    await converse('last', 5);
    await service.compact({ ...t, strategy: 'offline' });
    fs.writeFileSync(file, 'two\n');
    const memory = new RestoreMemory();
    const beforeRestore = await service.getHistory(t);
    await restoreSnapshotFlow(new ScriptedUi({ confirm: [true] }), service, snap.id, true, t, undefined, memory);
    assert.equal(fs.readFileSync(file, 'utf8'), 'one\n');

    const declined = new ScriptedUi({ confirm: [false] });
    assert.equal(await undoLastFlow(declined, service, t, memory), undefined);
    assert.match(declined.confirms[0].message, /^Undo the restore of the conversation of /);
    assert.match(declined.confirms[0].detail, /The files go back too\./);

    const ui = new ScriptedUi({ confirm: [true, true] });
    assert.ok(await undoLastFlow(ui, service, t, memory));
    await ui.shown(/^Restore undone: the files and the conversation are as they were before it/);
    assert.equal(fs.readFileSync(file, 'utf8'), 'two\n');
    assert.equal(active(await service.getHistory(t)), active(beforeRestore));
    // Next: the compaction (the restore and its undo are no longer candidates).
    assert.ok(await undoLastFlow(ui, service, t, memory));
    assert.match(ui.confirms[1].message, /^Undo the compaction of /);
    await ui.shown(/^Compaction undone: /);
    const nothing = new ScriptedUi();
    assert.equal(await undoLastFlow(nothing, service, t, memory), undefined);
    assert.match(nothing.messages[0].message, /^Nothing to undo in thread "last"/);
  });

  test('the History tree lists every operation, newest first, says which are undone, and redraws on a history change', async () => {
    const where = () => ({ uri: d.uri, name: 'ws', thread: 'cross' });
    const model = new CompactionsModel(service, where, 5, () => Date.now());
    try {
      const nodes = await model.nodes();
      assert.deepEqual(
        nodes.map((n) => [n.label.split(':')[0], n.contextValue]),
        [['Undo', 'operation'], ['Rollback', 'operation.undone'], ['Compaction', 'operation']],
      );
      assert.match(nodes[1].description ?? '', / · undone$/);
      assert.match(nodes[2].description ?? '', /^shortened without a model · /);
      assert.match(nodes[2].label, /^Compaction: [\d.]+k? → [\d.]+k? tokens$/);
      assert.match(nodes[2].tooltip ?? '', /\(\d+ → \d+ items\)/);
      assert.equal(nodes[2].command?.command, COMMANDS.openArchived);
      let redraws = 0;
      const sub = model.onDidChange(() => redraws++);
      await service.record([userMessage('one more turn')], { thread: 'cross' });
      await service.rollback(1, { thread: 'cross' });
      const deadline = Date.now() + 10_000;
      while (redraws === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
      sub.dispose();
      assert.ok(redraws > 0, 'the History tree redraws after a rollback');
      assert.equal((await model.nodes())[0].label.split(':')[0], 'Rollback');
    } finally {
      model.dispose();
    }
  });
});

function commit(id: string, minutesAgo: number, extra: Partial<GhostCommit>): GhostCommit {
  const createdAt = new Date(Date.parse('2026-01-02T12:00:00Z') - minutesAgo * 60_000).toISOString();
  return { id, parent: null, createdAt, message: '', fileCount: 3, skipped: [], durationMs: 5, thread: 'claude:s1', trigger: 'manual', ...extra };
}

describe('time machine (pure)', () => {
  test('checkpoints sit under their turn, in the order taken; the trigger is said in plain words', () => {
    const now = Date.parse('2026-01-02T12:00:00Z');
    const turn3 = { index: 3, text: 'fix the tests' };
    const nodes = snapshotTree(
      [
        commit('manual0000', 1, { message: 'mine', thread: null }),
        commit('bash000000', 2, { trigger: 'tool', turn: turn3, tool: { name: 'Bash' }, message: 'before Bash: sed -i s/a/b/ app.py' }),
        commit('edit000000', 4, { trigger: 'tool', turn: turn3, tool: { name: 'Edit', paths: ['src/app.py'] }, message: '' }),
        commit('turn300000', 5, { trigger: 'turn', turn: turn3, message: 'fix the tests' }),
        commit('turn200000', 30, { trigger: 'turn', turn: { index: 2, text: 'add a flag' }, message: 'add a flag' }),
      ],
      now,
    );
    assert.deepEqual(nodes.map((n) => n.label), ['mine', 'Turn 3: fix the tests', 'Turn 2: add a flag']);
    const turn = nodes[1];
    assert.deepEqual(turn.children!.map((c) => c.label), ['start of the turn', 'before Edit src/app.py', 'before Bash: sed -i s/a/b/ app.py']);
    assert.match(turn.description!, /^3 checkpoints · 2 min ago · Claude Code session s1$/);
    assert.match(turn.children![1].description!, /^before Edit ran · 4 min ago · 3 files$/);
    assert.match(turn.children![1].tooltip!, /\nSnapshot edit000$/);
    assert.match(turn.children![0].description!, /^when the turn began · /);
    assert.ok(turn.children!.every((c) => c.contextValue === 'snapshot'));
    assert.equal(nodes[0].description, '1 min ago · 3 files');
  });

  test('the Restore Snapshot pick names an agent checkpoint by its turn and tool', () => {
    const now = Date.parse('2026-01-02T12:00:00Z');
    const turn3 = { index: 3, text: 'fix the tests' };
    const items = snapshotItems(
      [
        commit('edit000000', 4, { trigger: 'tool', turn: turn3, tool: { name: 'Edit', paths: ['src/app.py'] }, message: 'before Edit src/app.py' }),
        commit('turn300000', 5, { trigger: 'turn', turn: turn3, message: 'fix the tests' }),
      ],
      now,
    );
    assert.deepEqual(items.map((i) => i.label), ['Turn 3: fix the tests › before Edit src/app.py', 'Turn 3: fix the tests › start of the turn']);
  });

  test('Undo Last picks the newest operation in effect that is not an undo', () => {
    const op = (id: number, kind: OperationRecord['kind'], undoneBy?: number): OperationRecord => ({
      id, kind, createdAt: '2026-01-01T00:00:00Z', itemsBefore: 4, itemsAfter: 2, tokensBefore: null, tokensAfter: null,
      ...(undoneBy === undefined ? {} : { undoneBy }),
    });
    assert.equal(lastUndoable([op(1, 'compaction'), op(2, 'rollback', 3), op(3, 'undo')])?.id, 1);
    assert.equal(lastUndoable([op(1, 'compaction', 2), op(2, 'rollback')])?.id, 2);
    assert.equal(lastUndoable([op(1, 'compaction', 2), op(2, 'undo')]), undefined);
    assert.equal(lastUndoable(undefined), undefined);
  });

  test('the rollback question', () => {
    assert.equal(rollbackQuestion({ removedItems: 2, tokensAfter: 1200 }).message, 'Roll back the last turn?');
    const crossing = rollbackQuestion({ removedItems: 5, crossesCompaction: true, tokensAfter: 48_000 });
    assert.equal(crossing.message, 'Roll back past a compaction?');
    assert.match(crossing.detail, /^This goes back past a compaction: .* 5 items of the conversation are taken out, leaving 48k tokens in use\./);
  });
});
