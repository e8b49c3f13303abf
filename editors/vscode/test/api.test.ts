/** The exported API against the real daemon over stdio. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { type CtxdApi, CtxdService } from '../src/api';
import { ErrorCode, type UsageChangedParams, errorCode } from '../src/protocol';
import { agentOf, readOnlySentence, setAgentNames } from '../src/agents';
import { type Daemon, assistantMessage, startDaemon, userMessage, waitFor } from './daemon';
import { AGENT_NAMES } from './fixtures';

describe('exported API (real daemon)', () => {
  let d: Daemon;
  let service: CtxdService;
  let api: CtxdApi;
  const seen: UsageChangedParams[] = [];

  before(async () => {
    d = await startDaemon();
    service = new CtxdService(async () => d.rpc, () => d.uri);
    service.attach(d.rpc);
    service.onDidChangeUsage((e) => seen.push(e));
    api = service.exports();
  });
  after(async () => {
    service?.dispose();
    await d?.stop();
  });

  test('initialize advertises a protocol the extension speaks and the methods the API uses', () => {
    const caps = d.initializeResult.capabilities.experimental.ctxd;
    // The extension speaks version 2 and degrades, method by method, on a version 1 daemon.
    assert.equal(api.protocolVersion, 2);
    assert.ok([1, 2, 3, 4].includes(caps.protocolVersion), `protocolVersion ${caps.protocolVersion}`);
    for (const m of ['ctxd/record', 'ctxd/usage', 'ctxd/prompt', 'ctxd/rollback', 'ctxd/reportTokenUsage', 'ctxd/setPromptContext']) {
      assert.ok(caps.methods.includes(m), m);
    }
  });

  test("initialize gives every agent's name, which the extension shows (the pure tests' AGENT_NAMES are these)", () => {
    const caps = d.initializeResult.capabilities.experimental.ctxd;
    assert.deepEqual(caps.agents, AGENT_NAMES);
    setAgentNames(caps.agents);
    assert.equal(agentOf('qwen').name, 'Qwen Code');
    assert.equal(readOnlySentence('claude').split(' session')[0], 'This Claude Code');
  });

  test('the exports are frozen and carry only the API', () => {
    assert.ok(Object.isFrozen(api));
    assert.equal(api.apiVersion, 1);
    assert.equal((api as unknown as Record<string, unknown>).attach, undefined);
  });

  test('record defaults to the active folder and thread, and usage follows', async () => {
    const r = await api.record([userMessage('Explain the parser in src/parse.py, please.'), assistantMessage('It is a Pratt parser.')]);
    assert.equal(r.itemCount, 2);
    assert.ok(r.usage.usedTokens > 0);
    assert.deepEqual(api.latestUsage(), r.usage);
    // The daemon's ctxd/usageChanged reaches subscribers; the last value always arrives.
    await waitFor(
      () => seen.some((e) => e.workspace === d.uri && e.thread === 'default' && e.usedTokens === r.usage.usedTokens),
      (wake) => api.onDidChangeUsage(wake),
      10_000,
      'usageChanged',
    );
  });

  test('a second thread is separate; setActiveThread makes it the default', async () => {
    const before = api.latestUsage()!;
    const r = await api.record([userMessage('other thread')], { thread: 'agent-2' });
    assert.equal(r.itemCount, 1);
    assert.deepEqual(api.latestUsage(), before);
    api.setActiveThread('agent-2');
    assert.deepEqual(api.latestUsage(), r.usage);
    const threads = await api.listThreads();
    assert.deepEqual(threads.map((t) => t.thread).sort(), ['agent-2', 'default']);
    api.setActiveThread('default');
  });

  test('getUsage returns a breakdown for the thread', async () => {
    const b = await api.getUsage();
    assert.equal(b.usage.usedTokens, api.latestUsage()!.usedTokens);
    assert.equal(b.contextWindow, b.usage.contextWindow);
    assert.ok(b.categories.length > 0, 'no categories');
    assert.equal(b.categories.reduce((s, c) => s + c.tokens, 0), b.contextWindow);
  });

  test('setPromptContext and reportTokenUsage return usage snapshots', async () => {
    const ctx = await api.setPromptContext({ baseInstructions: 'You are a careful coding agent.', tools: [] });
    assert.ok(ctx.usedTokens > 0);
    const rep = await api.reportTokenUsage({ inputTokens: 5000, outputTokens: 200, totalTokens: 5200 });
    // The API's total is the new baseline and nothing was recorded after it: exactly that total.
    assert.equal(rep.usedTokens, 5200);
    assert.equal(rep.source, 'api');
    assert.equal(api.latestUsage()!.usedTokens, rep.usedTokens);
  });

  test('getPrompt returns model-ready items', async () => {
    const p = await api.getPrompt();
    assert.ok(Array.isArray(p.items));
    assert.ok(p.items.some((i) => i.type === 'message'));
    assert.equal(typeof p.reinjectContext, 'boolean');
  });

  test('rollback drops the last turn and updates the usage', async () => {
    await api.record([userMessage('one more turn to drop'), assistantMessage('ok')]);
    const r = await api.rollback(1);
    assert.equal(r.removedItems, 2);
    assert.deepEqual(api.latestUsage(), r.usage);
  });

  test('a bad item is refused with -32602 and nothing is recorded', async () => {
    const before = (await api.getHistory()).total;
    await assert.rejects(api.record([userMessage('fine'), { type: 'no_such_type' }]), (err) => {
      assert.equal(errorCode(err), ErrorCode.invalidParams);
      return true;
    });
    assert.equal((await api.getHistory()).total, before);
  });

  test('an unknown workspace is refused with -32602', async () => {
    await assert.rejects(api.record([userMessage('x')], { workspace: 'file:///definitely/not/open' }), (err) => {
      assert.equal(errorCode(err), ErrorCode.invalidParams);
      return true;
    });
  });

  test('no folder open: calls fail before reaching the daemon', async () => {
    const lonely = new CtxdService(async () => d.rpc, () => undefined);
    await assert.rejects(lonely.record([userMessage('x')]), /no workspace folder is open/);
    assert.equal(lonely.latestUsage(), undefined);
  });
});

describe('usage cache (no daemon)', () => {
  test('an older historyVersion never replaces a newer one, duplicates do not fire', () => {
    const s = new CtxdService(() => Promise.reject(new Error('unused')), () => 'file:///w');
    const fired: number[] = [];
    s.onDidChangeUsage((e) => fired.push(e.usedTokens));
    const base = { contextWindow: 1000, percent: 0, autoCompactLimit: 900, tier: 'ok' as const, source: 'estimate' as const };
    s.update({ workspace: 'file:///w', thread: 'default' }, { ...base, usedTokens: 10, historyVersion: 2 });
    s.update({ workspace: 'file:///w', thread: 'default' }, { ...base, usedTokens: 10, historyVersion: 2 });
    s.update({ workspace: 'file:///w', thread: 'default' }, { ...base, usedTokens: 5, historyVersion: 1 });
    s.update({ workspace: 'file:///w', thread: 'default' }, { ...base, usedTokens: 20, historyVersion: 2 });
    assert.deepEqual(fired, [10, 20]);
    assert.equal(s.latestUsage()!.usedTokens, 20);
  });

  test('the gauge shows the last thread that changed unless one is set', () => {
    const s = new CtxdService(() => Promise.reject(new Error('unused')), () => 'file:///w');
    const u = { usedTokens: 1, contextWindow: 1000, percent: 0, autoCompactLimit: 900, tier: 'ok' as const, source: 'estimate' as const, historyVersion: 1 };
    assert.equal(s.threads.shownThread('file:///w'), 'default');
    s.update({ workspace: 'file:///w', thread: 'b' }, u);
    assert.equal(s.threads.shownThread('file:///w'), 'b');
    assert.equal(s.threads.activeThread('file:///w'), 'default');
    s.setActiveThread('c');
    assert.equal(s.threads.shownThread('file:///w'), 'c');
    assert.equal(s.threads.activeThread('file:///w'), 'c');
  });
});
