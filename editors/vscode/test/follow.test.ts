/** Following the workspace's most recently active thread, and pinning one, against the real daemon. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { CtxdService } from '../src/api';
import { latestThread } from '../src/threadSelection';
import type { ThreadInfo } from '../src/protocol';
import { type Daemon, startDaemon, userMessage, waitFor } from './daemon';

function info(thread: string, itemCount: number, lastActivity: string | null, source: ThreadInfo['source'] = 'client'): ThreadInfo {
  return { thread, itemCount, lastActivity, source, historyVersion: 1, updatedAt: '2026-01-01T00:00:00Z' };
}

describe('latestThread', () => {
  test('picks the most recently active thread with items', () => {
    const threads = [
      info('empty', 0, '2026-03-01T00:00:00Z'),
      info('old', 3, '2026-01-02T00:00:00Z'),
      info('codex-1', 5, '2026-02-01T00:00:00Z', 'codex'),
    ];
    assert.equal(latestThread(threads)?.thread, 'codex-1');
    assert.equal(latestThread([info('empty', 0, '2026-03-01T00:00:00Z')]), undefined);
    // Without lastActivity the update time counts; on a tie the daemon's order wins.
    assert.equal(latestThread([info('a', 1, null), info('b', 1, null)])?.thread, 'a');
  });
});

describe('following the latest thread (real daemon)', () => {
  let d: Daemon;
  let service: CtxdService;

  before(async () => {
    d = await startDaemon();
    service = new CtxdService(async () => d.rpc, () => d.uri);
    service.attach(d.rpc);
  });
  after(async () => {
    service?.dispose();
    await d?.stop();
  });

  const shownIs = (thread: string) =>
    waitFor(() => service.threads.shownThread(d.uri) === thread, (wake) => service.onDidChangeUsage(wake), 10_000, `shown thread ${thread}`);

  test('the gauge follows the thread that was active last, and labels its source', async () => {
    await service.record([userMessage('first thread')], { thread: 'one' });
    await new Promise((r) => setTimeout(r, 20));
    await service.record([userMessage('second thread')], { thread: 'two' });
    await service.threads.followLatest(d.uri);
    assert.equal(service.threads.shownThread(d.uri), 'two');
    assert.equal(service.threads.threadSource(d.uri, 'two'), 'client');
    assert.equal(service.threads.isPinned(d.uri), false);
  });

  test('a picked thread stays shown until the user follows the latest again', async () => {
    service.setActiveThread('one', d.uri);
    assert.equal(service.threads.isPinned(d.uri), true);
    await service.record([userMessage('more on two')], { thread: 'two' });
    await service.threads.followLatest(d.uri);
    assert.equal(service.threads.shownThread(d.uri), 'one');
    await service.threads.unpin(d.uri);
    assert.equal(service.threads.isPinned(d.uri), false);
    assert.equal(service.threads.shownThread(d.uri), 'two');
  });

  test('activity on another thread moves the gauge to it without a call from the caller', async () => {
    await new Promise((r) => setTimeout(r, 20));
    await service.record([userMessage('back to one')], { thread: 'one' });
    await shownIs('one');
  });
});
