/** What activate() wires, run without VS Code: the daemon's launch and stop notices, and the tier notices. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { CtxdService } from '../src/api';
import { COMMANDS } from '../src/commandIds';
import { DaemonStartError, type StopReason } from '../src/daemon';
import { type LaunchHost, daemonEvents, launchDaemon } from '../src/launch';
import type { ExtensionSettings } from '../src/settings';
import { ON_SCREEN_MS, TIER_ACTIONS, TierNotices } from '../src/tierNotices';
import { PYTHON } from './daemon';
import { usage } from './fixtures';

const settings = (over: Partial<ExtensionSettings> = {}): ExtensionSettings => ({
  daemonCommand: [],
  model: '',
  contextWindow: null,
  autoCompactRatio: null,
  llmBaseUrl: '',
  llmModel: '',
  notifications: 'warnings',
  ...over,
});

const quietLog = () => {
  const lines: string[] = [];
  return { lines, log: { info: (l: string) => lines.push(l), warn: (l: string) => lines.push(l), error: (l: string) => lines.push(l) } };
};

describe('launching the daemon', () => {
  test('a Python without ctxd is "not installed", said once in the log, and no client is made', async () => {
    const { lines, log } = quietLog();
    let clients = 0;
    const host: LaunchHost = {
      settings: () => settings({ daemonCommand: [PYTHON, '-I', '-S', '-m', 'ctxd'] }),
      pythonInterpreter: async () => undefined,
      isTrusted: () => false,
      cwd: () => undefined,
      log,
      createClient: () => {
        clients++;
        throw new Error('unused');
      },
      compactingNow: () => false,
      showMessage: () => undefined,
    };
    const err = await launchDaemon(host).then(
      () => undefined,
      (e: unknown) => e,
    );
    assert.ok(err instanceof DaemonStartError, String(err));
    assert.equal(err.reason.kind, 'notInstalled');
    assert.match(err.reason.message, /^The ctxd daemon is not installed in /);
    assert.equal(clients, 0);
    assert.equal(lines.filter((l) => /--version` failed/.test(l)).length, 1);
  });
});

describe('daemon stops', () => {
  test('one notice per distinct failure; its button runs the way out', async () => {
    const asked: { message: string; actions: string[] }[] = [];
    const executed: string[] = [];
    const downs: (StopReason | undefined)[] = [];
    const service = new CtxdService(() => Promise.reject(new Error('unused')), () => undefined);
    const events = daemonEvents({
      service,
      log: quietLog().log,
      setDown: (r) => downs.push(r),
      ask: async (_s, message, actions) => (asked.push({ message, actions }), 'Install'),
      execute: (c) => executed.push(c),
      showLog: () => undefined,
      restart: () => undefined,
    });
    const reason: StopReason = { kind: 'notInstalled', message: 'The ctxd daemon is not installed in python3.', command: { command: 'python3', args: ['-m', 'ctxd'] } };
    events.stopped(reason);
    events.stopped(reason);
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(asked, [{ message: reason.message, actions: ['Install', 'Set path', 'Show log'] }]);
    assert.deepEqual(executed, [COMMANDS.install]);
    assert.deepEqual(downs, [reason, reason]);
    events.dispose();
    service.dispose();
  });
});

describe('tier notices', () => {
  test('a crossing into warn asks once; its button runs Compact Now; a later change hides the stale notice', async () => {
    const asked: string[] = [];
    const executed: string[] = [];
    let hidden = 0;
    let answer: (choice: string | undefined) => void = () => undefined;
    const notices = new TierNotices({
      shown: () => ({ uri: 'file:///w', thread: 'default' }),
      warningsShown: () => true,
      ask: (_s, message) => (asked.push(message), new Promise((r) => (answer = r))),
      hideToasts: async () => void hidden++,
      execute: (c) => executed.push(c),
    });
    const at = (tier: 'ok' | 'warn' | 'compact', thread = 'default') => ({ workspace: 'file:///w', thread, ...usage({ tier }) });
    notices.observe(at('warn', 'other'));
    notices.observe(at('warn'));
    notices.observe(at('warn'));
    await new Promise((r) => setImmediate(r));
    assert.equal(asked.length, 1, 'one notice, for the shown thread only');
    notices.observe(at('ok'));
    await new Promise((r) => setImmediate(r));
    assert.equal(hidden, 1, 'the warn notice no longer holds');
    notices.observe(at('compact'));
    await new Promise((r) => setImmediate(r));
    assert.equal(asked.length, 2);
    answer(TIER_ACTIONS.compact);
    await new Promise((r) => setImmediate(r));
    assert.deepEqual(executed, [COMMANDS.compactNow]);
  });

  test('a notice past its time on screen is not hidden by a later change: that would hide other messages', async () => {
    let clock = 0;
    let hidden = 0;
    const notices = new TierNotices({
      shown: () => ({ uri: 'file:///w', thread: 'default' }),
      warningsShown: () => true,
      ask: () => new Promise(() => undefined), // left unanswered in the notification centre
      hideToasts: async () => void hidden++,
      execute: () => undefined,
      now: () => clock,
    });
    const at = (tier: 'ok' | 'warn' | 'compact') => ({ workspace: 'file:///w', thread: 'default', ...usage({ tier }) });
    notices.observe(at('warn'));
    await new Promise((r) => setImmediate(r));
    clock += ON_SCREEN_MS + 1;
    notices.observe(at('ok'));
    await new Promise((r) => setImmediate(r));
    assert.equal(hidden, 0, 'VS Code hid that toast already; hiding the toasts now hides only others');
    notices.observe(at('warn'));
    await new Promise((r) => setImmediate(r));
    clock += 1_000;
    notices.observe(at('ok'));
    await new Promise((r) => setImmediate(r));
    assert.equal(hidden, 1, 'a notice still on screen is hidden when it no longer holds');
  });
});
