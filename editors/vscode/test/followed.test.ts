/**
 * Followed agent sessions (issue #40) against the real daemon following a real Claude Code
 * 2.1.332 transcript and a real Codex 0.171.0 rollout (tests/fixtures/agents): named by their
 * title and agent, never by their `claude:…` id; nothing that writes their conversation is offered
 * or run (each refusal says what works instead); their history reads as a conversation.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { CtxdService } from '../src/api';
import { BreakdownController } from '../src/breakdownPanel';
import { COMMANDS } from '../src/commandIds';
import { type CommandHost, commandTable } from '../src/commandTable';
import { GaugeController, type GaugeSink } from '../src/gauge';
import type { GhostCommit, RecallHit, ThreadInfo } from '../src/protocol';
import type { LiveSearch, SearchAnswer } from '../src/recall';
import type { GaugeView } from '../src/status';
import { RestoreMemory } from '../src/timeMachine';
import { SnapshotsModel, ThreadsModel, operationNodes } from '../src/trees';
import type { PickItem, Severity, Ui } from '../src/ui';
import type { WaysOutHost } from '../src/waysOut';
import { CLAUDE_SESSION, CLAUDE_TITLE, type Daemon, claudeSession, codexSession, startDaemon, waitFor, attachedService } from './daemon';
import { setAgentNames } from '../src/agents';

const CLAUDE = `claude:${CLAUDE_SESSION}`;
const SENTENCE_CLAUDE = 'This Claude Code session is read-only: use its /rewind or /compact; files: Restore Files on a checkpoint in the Snapshots view.';

class RecordingUi implements Ui {
  picks: { items: PickItem<unknown>[]; placeHolder?: string }[] = [];
  messages: { severity: Severity; message: string }[] = [];
  confirms: string[] = [];
  async pick<T>(items: PickItem<T>[], o: { placeHolder?: string }): Promise<T | undefined> {
    this.picks.push({ items: items as PickItem<unknown>[], placeHolder: o.placeHolder });
    return undefined;
  }
  async input(): Promise<string | undefined> {
    return undefined;
  }
  async confirm(message: string): Promise<boolean> {
    this.confirms.push(message);
    return false;
  }
  async progress<T>(_t: string, task: () => Promise<T>): Promise<T> {
    return task();
  }
  notify(severity: Severity, message: string): void {
    this.messages.push({ severity, message });
  }
  async ask(severity: Severity, message: string): Promise<string | undefined> {
    this.messages.push({ severity, message });
    return undefined;
  }
}

describe('followed sessions (real daemon, real agents\' files)', () => {
  let d: Daemon;
  let service: CtxdService;
  let codex: string;
  let threads: ThreadInfo[] = [];
  const shown = (thread: string) => ({ uri: d.uri, name: 'ws', ...service.threads.facts(d.uri, thread) });

  function host(ui: Ui, thread: string) {
    const opened: { name: string; content: string; language: string }[] = [];
    const h: CommandHost = {
      ui,
      service,
      shown: () => shown(thread),
      stopped: () => undefined,
      memory: new RestoreMemory(),
      redraw: () => undefined,
      refreshTrees: () => undefined,
      setUndoRestore: () => undefined,
      openBreakdown: async () => undefined,
      closeTierNotice: async () => undefined,
      execute: () => undefined,
      restart: () => undefined,
      showLog: () => undefined,
      waysOut: {} as WaysOutHost,
      liveSearch: (async () => undefined) as LiveSearch,
      openReadOnly: async (name, content, language) => void opened.push({ name, content, language }),
      openSnapshotDiff: async () => undefined,
      hooks: async () => ({ code: 0, stdout: '', stderr: '' }),
      openWelcome: () => undefined,
      focusHistory: () => undefined,
      log: () => undefined,
      now: Date.now,
    };
    return { h, opened };
  }

  before(async () => {
    let codexId = '';
    d = await startDaemon({ git: true, sessions: [claudeSession, (f, env) => void (codexId = codexSession(f, env))] });
    setAgentNames(d.initializeResult.capabilities.experimental.ctxd.agents); // as the extension's client does
    codex = `codex:${codexId}`;
    service = attachedService(d);
    // The daemon reads the agents' files as it starts; their threads are listed once read.
    const listed = async () => {
      threads = await service.listThreads(d.uri);
      return [CLAUDE, codex].every((t) => threads.some((i) => i.thread === t && i.itemCount > 0));
    };
    const deadline = Date.now() + 30_000;
    while (!(await listed())) {
      if (Date.now() > deadline) throw new Error(`the sessions were not listed: ${JSON.stringify(threads.map((t) => t.thread))}\n${d.stderr()}`);
      await new Promise((r) => setTimeout(r, 200));
    }
    await service.threads.followLatest(d.uri);
  });
  after(async () => {
    service?.dispose();
    await d?.stop();
  });

  test('the Threads view names each session by its title and agent, with its own icon and its cost', async () => {
    const model = new ThreadsModel(service, () => shown('default'), 1);
    const nodes = await model.nodes();
    model.dispose();
    const claude = nodes.find((n) => n.id === `thread:${CLAUDE}`)!;
    const cx = nodes.find((n) => n.id === `thread:${codex}`)!;
    assert.equal(claude.label, CLAUDE_TITLE);
    assert.equal(claude.icon, 'sparkle');
    assert.equal(cx.icon, 'terminal');
    assert.match(claude.description!, /^Claude Code · \d+% · [\d.]+k · \$\d+\.\d\d · /);
    assert.match(cx.description!, /^Codex · \d+% · [\d.]+k · \$\d+\.\d\d · /);
    assert.equal(claude.contextValue, 'thread.readOnly');
    for (const n of [claude, cx]) assert.doesNotMatch(`${n.label} ${n.description} ${n.tooltip}`, /claude:|codex:/);
    assert.ok(claude.tooltip!.includes(SENTENCE_CLAUDE), claude.tooltip);
  });

  test('Roll Back, Undo Last, Undo, Compact Now and Restore Files and Conversation are refused before the daemon is asked, each saying what works', async () => {
    const ui = new RecordingUi();
    const { h } = host(ui, CLAUDE);
    const table = commandTable(h);
    const snap = { id: 'f'.repeat(40), fileCount: 1 } as GhostCommit;
    const op = { kind: 'compaction', id: 1, itemsBefore: 4, itemsAfter: 2, tokensBefore: 10, tokensAfter: 5, createdAt: new Date().toISOString() };
    await table[COMMANDS.rollback]();
    await table[COMMANDS.undoLast]();
    await table[COMMANDS.undoOperation]({ id: 'x', label: 'x', operation: op });
    await table[COMMANDS.compactNow]();
    await table[COMMANDS.restoreFilesAndConversation](snap);
    assert.deepEqual(ui.messages, Array(5).fill({ severity: 'info', message: SENTENCE_CLAUDE }));
    assert.deepEqual(ui.confirms, [], 'nothing asked to confirm an action that cannot run');
  });

  test('the menu\'s "Restore files…" on a followed session restores files only: no conversation choice, no error naming the session\'s id', async () => {
    const snap = await service.snapshot({ thread: 'default', message: 'files of the session' });
    const ui = new RecordingUi();
    // The snapshot, then (were it asked) the last choice: "Files and conversation".
    ui.pick = async <T>(items: PickItem<T>[], o: { placeHolder?: string }): Promise<T | undefined> => {
      ui.picks.push({ items: items as PickItem<unknown>[], placeHolder: o.placeHolder });
      return (items.find((i) => (i.value as GhostCommit).id === snap.id) ?? items.at(-1))?.value;
    };
    await commandTable(host(ui, CLAUDE).h)[COMMANDS.restore]();
    assert.deepEqual(ui.picks.map((p) => p.placeHolder), ['Snapshot to restore (newest first)'], 'no "What to restore" pick');
    assert.deepEqual(ui.messages, []);
    assert.deepEqual(ui.confirms, [`Restore snapshot ${snap.id.slice(0, 7)}?`]);
  });

  test("Codex's sentence names its own commands; the menu names the session and leaves out what would fail", async () => {
    const ui = new RecordingUi();
    const { h } = host(ui, codex);
    await commandTable(h)[COMMANDS.rollback]();
    assert.equal(ui.messages[0].message, 'This Codex session is read-only: use its Esc Esc (backtrack) or /compact; files: Restore Files on a checkpoint in the Snapshots view.');
    const menuUi = new RecordingUi();
    await commandTable(host(menuUi, CLAUDE).h)[COMMANDS.menu]();
    const { items, placeHolder } = menuUi.picks[0];
    assert.equal(placeHolder, `ws · Claude Code: ${CLAUDE_TITLE} (read-only)`);
    for (const gone of [COMMANDS.compactNow, COMMANDS.rollback, COMMANDS.undoLast]) assert.ok(!items.some((i) => i.value === gone), gone);
    assert.ok(items.some((i) => i.value === COMMANDS.restore && /\/rewind or \/compact/.test(i.detail ?? '')));
  });

  test('the Snapshots rows of a followed session offer Restore Files only, and its History rows no Undo', async () => {
    await service.snapshot({ thread: 'default', message: 'before the refactor' });
    const model = new SnapshotsModel(service, () => shown(CLAUDE), 1);
    const nodes = await model.nodes();
    model.dispose();
    const flat = nodes.flatMap((n) => [n, ...(n.children ?? [])]).filter((n) => n.id.startsWith('snapshot:'));
    assert.ok(flat.length > 0);
    for (const n of flat) assert.equal(n.contextValue, 'snapshot.filesOnly');
    const op = { kind: 'compaction' as const, id: 1, itemsBefore: 40, itemsAfter: 12, tokensBefore: 48_000, tokensAfter: 6_100, createdAt: new Date().toISOString() };
    const rows = operationNodes({ items: [], historyVersion: 1, total: 0, operations: [op] }, d.uri, shown(CLAUDE), Date.now());
    assert.equal(rows[0].contextValue, 'operation.readOnly');
    assert.equal(rows[0].label, 'Compaction: 48k → 6.1k tokens');
    assert.ok(rows[0].tooltip!.includes(SENTENCE_CLAUDE));
  });

  test('the gauge and the breakdown name the session by its title; Codex\'s own "% left" is explained', async () => {
    const views: GaugeView[] = [];
    const sink: GaugeSink = { show: (v) => views.push(v) };
    service.setActiveThread(codex, d.uri);
    const gauge = new GaugeController(service, sink, () => ({ uri: d.uri, name: 'ws' }), 1);
    await service.getUsage({ thread: codex });
    gauge.refresh();
    await waitFor(() => views.some((v) => /Codex itself shows \d+% context left/.test(v.tooltip)), (wake) => {
      const t = setInterval(wake, 50);
      return { dispose: () => clearInterval(t) };
    }, 10_000, 'the Codex note');
    const tip = views.at(-1)!.tooltip;
    assert.match(tip, /12k-token baseline/);
    assert.doesNotMatch(tip, /codex:/);
    gauge.dispose();

    service.setActiveThread(CLAUDE, d.uri);
    let html = '';
    const panel = new BreakdownController(service, { cspSource: 'vscode-resource:', setHtml: (h) => void (html = h) }, () => shown(CLAUDE), () => 'n0nce', 1);
    await panel.refresh();
    panel.dispose();
    assert.ok(html.includes(`Claude Code: ${CLAUDE_TITLE}`), html.slice(0, 2000));
    assert.doesNotMatch(html, /claude:2009/);
    assert.ok(html.includes('This Claude Code session is read-only'));
    assert.ok(!html.includes('id="compact"'), 'no Compact now button');
  });

  test('a search hit in the session opens as a conversation: the user\'s words, the tool and its file, real line breaks', async () => {
    const ui = new RecordingUi();
    const { h, opened } = host(ui, CLAUDE);
    h.liveSearch = (async <T>(_o: unknown, answer: (q: string) => Promise<SearchAnswer<T>>) => {
      const a = await answer('hello.txt');
      const hits = a.items as unknown as PickItem<RecallHit>[];
      for (const row of hits) assert.doesNotMatch(row.detail ?? '', /claude:/);
      return (hits.find((i) => i.value.thread === CLAUDE && i.value.type === 'function_call') ?? hits.find((i) => i.value.thread === CLAUDE))?.value as T;
    }) as LiveSearch;
    await commandTable(h)[COMMANDS.searchHistory]();
    assert.equal(opened.length, 1, JSON.stringify(ui.messages));
    const doc = opened[0].content;
    assert.ok(doc.startsWith(`# The Claude Code session "${CLAUDE_TITLE}"\n`), doc);
    assert.doesNotMatch(doc, /\\n|"type":|claude:2009/);
    assert.match(doc, /### (Tool call: \w+ · \S*hello\.txt|You|Claude Code)/);
  });

  test('Undo restore asks first, and a click on the row and then its icon undoes once', async () => {
    const file = path.join(d.folder, 'README.md');
    const snap = await service.snapshot({ thread: 'default', message: 'clean' });
    fs.writeFileSync(file, 'edited\n');
    const restored = await service.restore(snap.id, { thread: 'default' });
    assert.equal(fs.readFileSync(file, 'utf8'), 'hello\n');
    const row = { id: `undo:${restored.undoId}`, label: 'Undo restore', command: { command: COMMANDS.undoRestore, title: 'Undo restore', arguments: [restored.undoId, false] } };
    // A click, then No: nothing changes.
    const no = new RecordingUi();
    await commandTable(host(no, 'default').h)[COMMANDS.undoRestore](...row.command.arguments);
    assert.deepEqual(no.confirms, ['Undo the restore (back to ' + restored.undoId!.slice(0, 7) + ')?']);
    assert.equal(fs.readFileSync(file, 'utf8'), 'hello\n');
    // A click on the row and then on its inline icon (which passes the row): one question, one undo.
    const yes = new RecordingUi();
    yes.confirm = async (message: string) => (yes.confirms.push(message), new Promise<boolean>((r) => setTimeout(() => r(true), 100)));
    const table = commandTable(host(yes, 'default').h);
    const [first, second] = await Promise.all([table[COMMANDS.undoRestore](...row.command.arguments), table[COMMANDS.undoRestore](row)]);
    assert.equal(first, true);
    assert.equal(second, undefined);
    assert.equal(yes.confirms.length, 1);
    assert.equal(fs.readFileSync(file, 'utf8'), 'edited\n');
    assert.equal(yes.messages.filter((m) => /^Restore undone/.test(m.message)).length, 1);
    // Clicked again later: it is done, nothing runs.
    assert.equal(await table[COMMANDS.undoRestore](row), undefined);
    assert.equal(yes.confirms.length, 1);
  });

  test('archived items open as a conversation, not as JSON', async () => {
    const ui = new RecordingUi();
    const { h, opened } = host(ui, 'default');
    const items = [
      { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'Add hello.txt\nand the docs' }] },
      { type: 'function_call', call_id: 'c1', name: 'Write', arguments: JSON.stringify({ file_path: '/w/hello.txt', content: 'hi' }) },
      { type: 'function_call_output', call_id: 'c1', output: 'File created' },
      { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: 'Done.' }] },
    ];
    await service.record(items as never, { thread: 'archive-me' });
    for (let i = 0; i < 8; i++) {
      await service.record(
        [
          { type: 'message', role: 'user', content: [{ type: 'input_text', text: `Turn ${i}: explain module ${i}. `.repeat(20) }] },
          { type: 'message', role: 'assistant', content: [{ type: 'output_text', text: `Module ${i} reads files. `.repeat(20) }] },
        ] as never,
        { thread: 'archive-me' },
      );
    }
    const done = await service.compact({ thread: 'archive-me', strategy: 'offline' });
    assert.notEqual(done.undoId, undefined);
    await commandTable(h)[COMMANDS.openArchived](d.uri, 'archive-me', done.undoId);
    const doc = opened[0];
    assert.equal(doc.language, 'markdown');
    assert.match(doc.name, /^archived\/archive-me/);
    assert.match(doc.content, /^# What the compaction of thread "archive-me" took out\n/);
    assert.match(doc.content, /### You\n\nAdd hello\.txt\nand the docs/);
    assert.match(doc.content, /### Tool call: Write · \/w\/hello\.txt/);
    assert.match(doc.content, /### Tool result of Write · \/w\/hello\.txt/);
    assert.doesNotMatch(doc.content, /"type":/);
  });
});
