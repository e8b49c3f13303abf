/** The registered commands' bodies (commandTable.ts) run against the real daemon, the editor's own parts recorded. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { CtxdService } from '../src/api';
import { COMMANDS } from '../src/commandIds';
import { type CommandHost, type CommandTable, FOLLOW_LATEST, commandTable, snapshotOf } from '../src/commandTable';
import type { GhostCommit, RecallHit } from '../src/protocol';
import type { LiveSearch, SearchAnswer } from '../src/recall';
import { RestoreMemory } from '../src/timeMachine';
import type { PickItem, Severity, Ui } from '../src/ui';
import type { WaysOutHost } from '../src/waysOut';
import { Daemon as DaemonLifecycle } from '../src/daemon';
import { type Daemon, assistantMessage, startDaemon, userMessage, attachedService } from './daemon';

class ScriptedUi implements Ui {
  picks: PickItem<unknown>[][] = [];
  messages: { severity: Severity; message: string }[] = [];
  constructor(private readonly answers: ((items: PickItem<unknown>[]) => unknown)[] = []) {}
  async pick<T>(items: PickItem<T>[]): Promise<T | undefined> {
    this.picks.push(items as PickItem<unknown>[]);
    return this.answers.shift()?.(items as PickItem<unknown>[]) as T | undefined;
  }
  async input(): Promise<string | undefined> {
    return undefined;
  }
  async confirm(): Promise<boolean> {
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

/** A host whose editor parts (documents, trees, redraws) are recorded; the service talks to the real daemon. */
function host(service: CtxdService, uri: string, ui: Ui, thread?: () => string) {
  const seen = { opened: [] as { name: string; content: string; language: string }[], executed: [] as string[], redraws: 0, closedNotices: 0 };
  const h: CommandHost = {
    ui,
    service,
    shown: () => ({ uri, name: 'ws', thread: thread ? thread() : service.threads.shownThread(uri) }),
    stopped: () => undefined,
    memory: new RestoreMemory(),
    redraw: () => void seen.redraws++,
    refreshTrees: () => undefined,
    setUndoRestore: () => undefined,
    openBreakdown: async () => undefined,
    closeTierNotice: async () => void seen.closedNotices++,
    execute: (c) => void seen.executed.push(c),
    restart: () => undefined,
    showLog: () => undefined,
    waysOut: {} as WaysOutHost,
    liveSearch: (async () => undefined) as LiveSearch,
    openReadOnly: async (name, content, language) => void seen.opened.push({ name, content, language }),
    openSnapshotDiff: async () => undefined,
    hooks: async () => ({ code: 0, stdout: 'claude user: hooks none; status line no; MCP server no (/x)\n', stderr: '' }),
    openWelcome: () => void seen.executed.push('welcome'),
    focusHistory: () => void seen.executed.push('history'),
    log: () => undefined,
    now: Date.now,
  };
  return { h, seen };
}

describe('command table', () => {
  let d: Daemon;
  let service: CtxdService;

  before(async () => {
    d = await startDaemon();
    service = attachedService(d);
    await service.record([userMessage('The build server is ci-runner-7.'), assistantMessage('Noted: ci-runner-7.')], { thread: 'alpha' });
    for (let i = 0; i < 8; i++) {
      await service.record(
        [userMessage(`Turn ${i}: explain module ${i}. `.repeat(20)), assistantMessage(`Module ${i} reads and checks files. `.repeat(20))],
        { thread: 'alpha' },
      );
    }
    await service.compact({ thread: 'alpha', strategy: 'offline' });
    await service.record([userMessage('another thread')], { thread: 'beta' });
  });
  after(async () => {
    service?.dispose();
    await d?.stop();
  });

  test('the table has a body for every command the extension declares', () => {
    const { h } = host(service, d.uri, new ScriptedUi());
    assert.deepEqual(Object.keys(commandTable(h)).sort(), Object.values(COMMANDS).sort());
  });

  test('Switch Thread pins the picked thread, and "Follow the latest" unpins', async () => {
    const ui = new ScriptedUi([(items) => items.find((i) => i.value === 'alpha')!.value, () => FOLLOW_LATEST]);
    const { h, seen } = host(service, d.uri, ui);
    const table: CommandTable = commandTable(h);
    await table[COMMANDS.switchThread]();
    assert.ok(ui.picks[0].some((i) => i.value === 'beta'), 'every thread is offered');
    assert.equal(service.threads.isPinned(d.uri), true);
    assert.equal(service.threads.shownThread(d.uri), 'alpha');
    assert.equal(seen.redraws, 1);
    await table[COMMANDS.switchThread]();
    assert.equal(service.threads.isPinned(d.uri), false);
    assert.equal(service.threads.shownThread(d.uri), 'beta');
    assert.equal(seen.redraws, 2);
  });

  test('Open Archived Items opens what the compaction replaced, read-only, as a conversation', async () => {
    const { h, seen } = host(service, d.uri, new ScriptedUi());
    await commandTable(h)[COMMANDS.openArchived](d.uri, 'alpha');
    assert.equal(seen.opened.length, 1);
    assert.equal(seen.opened[0].name, 'archived/The_build_server_is_ci-runner-7..md');
    assert.equal(seen.opened[0].language, 'markdown');
    assert.match(seen.opened[0].content, /### You\n\nThe build server is ci-runner-7\.\n\n### Assistant\n\nNoted: ci-runner-7\./);
  });

  test('Show Status opens the daemon status as Markdown', async () => {
    const { h, seen } = host(service, d.uri, new ScriptedUi());
    await commandTable(h)[COMMANDS.showStatus]();
    assert.equal(seen.opened[0]?.name, 'ctxd-status.md');
    assert.match(seen.opened[0].content, /^# ctxd .* \(protocol 4\)/);
  });

  test('Search History opens the chosen item as a Markdown document', async () => {
    const { h, seen } = host(service, d.uri, new ScriptedUi());
    const answers: SearchAnswer<unknown>[] = [];
    h.liveSearch = (async <T>(_o: unknown, answer: (q: string) => Promise<SearchAnswer<T>>) => {
      const a = await answer('ci-runner-7');
      answers.push(a as SearchAnswer<unknown>);
      return a.items.find((i) => i.label === '$(archive)' && /ci-runner-7/.test(i.description ?? ''))?.value;
    }) as LiveSearch;
    await commandTable(h)[COMMANDS.searchHistory]();
    assert.equal((answers[0].items[0].value as RecallHit).thread, 'alpha');
    assert.equal(seen.opened.length, 1);
    assert.equal(seen.opened[0].language, 'markdown');
    assert.match(seen.opened[0].content, /^# Thread "The build server is ci-runner-7\."\n\nA compaction replaced this item/);
    assert.doesNotMatch(seen.opened[0].content, /```json|"type":/);
  });

  test('Compact Now on a followed thread says what works instead, after closing the tier notice', async () => {
    const ui = new ScriptedUi();
    const { h, seen } = host(service, d.uri, ui, () => 'codex:0199');
    assert.equal(await commandTable(h)[COMMANDS.compactNow](), undefined);
    assert.equal(seen.closedNotices, 1);
    assert.equal(ui.messages[0].message, 'This Codex session is read-only: use its Esc Esc (backtrack) or /compact; files: Restore Files on a checkpoint in the Snapshots view.');
  });

  test('the menu runs the command picked', async () => {
    const ui = new ScriptedUi([(items) => items.find((i) => i.value === COMMANDS.showStatus)?.value]);
    const { h, seen } = host(service, d.uri, ui);
    await commandTable(h)[COMMANDS.menu]();
    assert.deepEqual(seen.executed, [COMMANDS.showStatus]);
  });

  test('a snapshot is taken from a tree node or the snapshot itself', () => {
    const snap = { id: 'abc', fileCount: 2 } as GhostCommit;
    assert.equal(snapshotOf(snap), snap);
    assert.equal(snapshotOf({ id: 'n', label: 'x', command: { command: 'c', title: 't', arguments: [snap] } }), snap);
    assert.equal(snapshotOf(undefined), undefined);
  });
});

describe('commands with no folder open, or with the daemon not running', () => {
  let d: Daemon;
  before(async () => {
    d = await startDaemon();
  });
  after(async () => {
    await d?.stop();
  });

  test('Undo Last History Operation with no folder open says so; it does not throw', async () => {
    const service = new CtxdService(async () => d.rpc, () => undefined);
    service.attach(d.rpc, d.initializeResult.capabilities.experimental.ctxd.methods);
    const ui = new ScriptedUi();
    const { h } = host(service, d.uri, ui);
    h.shown = () => undefined;
    await commandTable(h)[COMMANDS.undoLast]();
    assert.deepEqual(ui.messages, [{ severity: 'error', message: 'Undo failed: no workspace folder is open.' }]);
    service.dispose();
  });

  test('Undo Last and Search History while the daemon is not running say so, not "update it"', async () => {
    // The daemon ran, then stopped (a crash storm): launch.ts detaches the service; requests go to the stopped lifecycle.
    const lifecycle = new DaemonLifecycle(async () => { throw new Error('unused'); }, { started: () => undefined, stopped: () => undefined });
    let running = true;
    const service = new CtxdService(() => (running ? Promise.resolve(d.rpc) : lifecycle.rpc()), () => d.uri);
    service.attach(d.rpc, d.initializeResult.capabilities.experimental.ctxd.methods);
    running = false;
    service.detach();
    const ui = new ScriptedUi();
    const { h } = host(service, d.uri, ui, () => 'default');
    h.stopped = () => ({ kind: 'crashed', message: 'ctxd stopped after 5 crashes in 3 minutes.', crashes: 5 });
    h.liveSearch = (async () => assert.fail('no search box while the daemon is not running')) as LiveSearch;
    const table = commandTable(h);
    await table[COMMANDS.undoLast]();
    await table[COMMANDS.searchHistory]();
    const down = 'failed: the ctxd daemon is not running. Restart it from the ctxd menu in the status bar.';
    assert.deepEqual(ui.messages, [
      { severity: 'error', message: `Undo ${down}` },
      { severity: 'error', message: `Search ${down}` },
    ]);
    service.dispose();
  });
});
