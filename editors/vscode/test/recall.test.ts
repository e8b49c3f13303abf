/** "Search history…": ctxd/recall as the user types, the chosen item opened whole, against the real daemon. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { CtxdService } from '../src/api';
import type { RecallHit } from '../src/protocol';
import { type LiveSearch, type SearchAnswer, itemDocument, recallItems, recallNote, searchHistoryFlow } from '../src/recall';
import type { PickItem, Severity, Ui } from '../src/ui';
import { type Daemon, assistantMessage, startDaemon, userMessage, attachedService } from './daemon';

class RecordingUi implements Ui {
  messages: { severity: Severity; message: string }[] = [];
  async pick<T>(): Promise<T | undefined> {
    return undefined;
  }
  async input(): Promise<string | undefined> {
    return undefined;
  }
  async confirm(): Promise<boolean> {
    return false;
  }
  async progress<T>(_title: string, task: () => Promise<T>): Promise<T> {
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

/** A search box the test types into: each query in turn, then the row `choose` picks from the last answer. */
function typing(queries: string[], choose: (items: PickItem<unknown>[]) => PickItem<unknown> | undefined, seen: SearchAnswer<unknown>[]): LiveSearch {
  return (async <T>(_o: unknown, answer: (q: string) => Promise<SearchAnswer<T>>) => {
    let last: SearchAnswer<T> = { items: [], note: '' };
    for (const q of ['', ...queries]) {
      last = await answer(q);
      seen.push(last as SearchAnswer<unknown>);
    }
    return choose(last.items as PickItem<unknown>[])?.value as T | undefined;
  }) as LiveSearch;
}

const hit = (over: Partial<RecallHit> = {}): RecallHit => ({ thread: 'default', seq: 3, type: 'message', role: 'user', snippet: 'the  port\nis 8123', archived: true, ...over });

describe('search results in words', () => {
  test('a row says where the match is and whether a compaction replaced it', () => {
    const now = Date.parse('2026-01-02T12:00:00Z');
    const [row, live] = recallItems(
      [hit({ turn: { index: 2, text: 'which port?' }, createdAt: '2026-01-02T11:00:00Z' }), hit({ archived: false, type: 'function_call_output', role: undefined })],
      now,
    );
    assert.equal(row.label, '$(archive)');
    assert.equal(row.description, 'the port is 8123');
    assert.equal(row.detail, 'replaced by a compaction · thread "default" · turn 2: which port? · your message · 1 h ago');
    assert.equal(live.label, '$(comment)');
    assert.equal(live.description, 'the port is 8123');
    assert.equal(live.detail, 'in the conversation · thread "default" · tool output');
    // A shell's "$(pwd)" stays text: VS Code would draw "$(name)" as an icon.
    assert.equal(recallItems([hit({ archived: false, snippet: 'cd $(pwd)' })], now)[0].description, 'cd $\u200b(pwd)');
    assert.equal(recallNote({ results: [hit()], total: 7 }), 'The best 1 of 7 matching items.');
    assert.equal(recallNote({ results: [], total: 0 }), 'No item matches.');
  });

  test('the document names the item and says it was replaced', () => {
    const doc = itemDocument({ seq: 3, archived: true, item: { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'which port?\nthe API one' }] } }, { thread: 'codex:ab/c' });
    assert.equal(doc.name, 'history/Codex_session_ab_c-item-3.md');
    assert.match(doc.content, /^# The Codex session ab\/c\n\nA compaction replaced this item/);
    // The user's words with their own line breaks, no JSON.
    assert.match(doc.content, /### You\n\nwhich port\?\nthe API one\n/);
    assert.doesNotMatch(doc.content, /"type"|```json/);
  });
});

describe('Search history (real daemon)', () => {
  let d: Daemon;
  let service: CtxdService;

  before(async () => {
    d = await startDaemon();
    service = attachedService(d);
    await service.record([userMessage('Which port does the staging proxy listen on?'), assistantMessage('The staging proxy listens on port 48213, set in deploy/proxy.conf.')]);
    for (let i = 0; i < 8; i++) {
      await service.record([
        userMessage(`Turn ${i}: please look at module ${i} and tell me what it does. `.repeat(20)),
        assistantMessage(`Module ${i} parses configuration files and validates them. `.repeat(20)),
      ]);
    }
    const compacted = await service.compact({ strategy: 'offline' });
    assert.ok(compacted.tokensAfter < compacted.tokensBefore);
    await service.record([userMessage('Now rename the flaky test test_gateway_retry_budget.'), assistantMessage('Renamed it.')], { thread: 'other' });
  });
  after(async () => {
    service?.dispose();
    await d?.stop();
  });

  test('a fact only the compacted part had is found, marked replaced, and opens whole and read-only', async () => {
    const seen: SearchAnswer<unknown>[] = [];
    const opened: { name: string; content: string }[] = [];
    const ui = new RecordingUi();
    const result = await searchHistoryFlow(
      ui,
      service,
      typing(['staging port'], (items) => items.find((i) => /48213/.test(i.description ?? '')), seen),
      async (name, content) => void opened.push({ name, content }),
      d.uri,
    );
    assert.deepEqual(ui.messages, []);
    assert.equal(seen[0].items.length, 0, 'an empty box sends nothing');
    const rows = seen[1].items as PickItem<RecallHit>[];
    assert.ok(rows.length > 0, JSON.stringify(seen[1]));
    const fact = rows.findIndex((r) => /48213/.test(r.description ?? ''));
    assert.ok(fact >= 0 && fact < 3, `the fact's item in the top 3: ${JSON.stringify(rows.map((r) => r.description))}`);
    assert.equal(rows[fact].label, '$(archive)');
    assert.match(rows[fact].detail ?? '', /^replaced by a compaction · /);
    assert.ok(result);
    assert.equal(result.archived, true);
    assert.equal(opened.length, 1);
    assert.match(opened[0].content, /A compaction replaced this item/);
    assert.match(opened[0].content, /port 48213, set in deploy\/proxy\.conf/);
  });

  test("every thread of the folder is searched; an item still in the conversation says so", async () => {
    const seen: SearchAnswer<unknown>[] = [];
    const opened: string[] = [];
    const result = await searchHistoryFlow(
      new RecordingUi(),
      service,
      typing(['gateway retry'], (items) => items[0], seen),
      async (_n, content) => void opened.push(content),
      d.uri,
    );
    const rows = seen[1].items as PickItem<RecallHit>[];
    assert.equal(rows[0].value.thread, 'other');
    assert.match(rows[0].detail ?? '', /^in the conversation · /);
    assert.equal(result?.archived, false);
    assert.match(opened[0], /^# Thread "[^"]+"\n\nThis item is in the conversation the model sees\./);
  });

  test("the rows keep the daemon's rank order: their labels give VS Code's quick pick nothing to re-sort by", async () => {
    // VS Code re-sorts a quick pick's rows whose label matches the typed words (matched rows
    // first, then by where the match is); only a proposed API turns that off. A row's label is an
    // icon alone, so no row matches and the daemon's order stays.
    const query = 'module';
    const seen: SearchAnswer<unknown>[] = [];
    await searchHistoryFlow(new RecordingUi(), service, typing([query], () => undefined, seen), async () => undefined, d.uri);
    const rows = seen[1].items as PickItem<RecallHit>[];
    const daemon = await service.recall(query, { workspace: d.uri, scope: 'workspace', limit: 50 });
    assert.ok(daemon.results.length >= 5, JSON.stringify(daemon));
    assert.deepEqual(
      rows.map((r) => [r.value.thread, r.value.seq]),
      daemon.results.map((h) => [h.thread, h.seq]),
    );
    for (const row of rows) {
      assert.equal(row.label.replace(/\$\([\w-]+\)/g, '').trim(), '', `a label VS Code could match: ${row.label}`);
      assert.match(row.description ?? '', /module/i);
    }
  });

  test('a query the daemon refuses is said in the box, not thrown', async () => {
    const seen: SearchAnswer<unknown>[] = [];
    const result = await searchHistoryFlow(new RecordingUi(), service, typing(['""'], () => undefined, seen), async () => undefined, d.uri);
    assert.equal(result, undefined);
    assert.deepEqual(seen[1].items, []);
    assert.match(seen[1].note, /^Search failed: .*query/i);
  });

  test('a daemon without ctxd/recall: one sentence, no search box', async () => {
    const old = new CtxdService(async () => d.rpc, () => d.uri);
    old.attach(d.rpc, ['ctxd/record']);
    const ui = new RecordingUi();
    let opened = false;
    const search = (async () => {
      opened = true;
      return undefined;
    }) as LiveSearch;
    assert.equal(await searchHistoryFlow(ui, old, search, async () => undefined, d.uri), undefined);
    assert.equal(opened, false);
    assert.match(ui.messages[0].message, /cannot search history/);
    old.dispose();
  });
});
