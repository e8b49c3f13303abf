/** The pure UI decisions: the status item's menu, tier notifications, failure notices, error sentences. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { COMMANDS } from '../src/commandIds';
import { friendlyError } from '../src/errors';
import { ACTIONS, FailureNotices } from '../src/failures';
import { Method } from '../src/protocol';
import { menuItems } from '../src/quickMenu';
import { statusMarkdown } from '../src/statusReport';
import { TIER_ACTIONS, TierWatcher, tierActions, tierMessage } from '../src/tierNotices';
import { gaugeText, strategyText } from '../src/status';
import { plainText } from '../src/text';
import { compactionLabel } from '../src/trees';
import { threadFacts } from '../src/followed';
import { usage, AGENT_NAMES } from './fixtures';
import { setAgentNames } from '../src/agents';

setAgentNames(AGENT_NAMES); // the names the daemon gives (fixtures.ts)

const t = (thread: string, more: { title?: string; source?: string; readOnly?: boolean } = {}) => ({ ...threadFacts(thread), ...more });

const all = () => true;

describe('status item menu', () => {
  test('a running daemon: breakdown, compact, snapshot, switch thread, search, the time machine (restore, roll back, undo, history), hooks, status, log', () => {
    const items = menuItems({ down: undefined, supports: all, thread: t('e2e') });
    assert.deepEqual(
      items.map((i) => i.value),
      [
        COMMANDS.showUsage,
        COMMANDS.compactNow,
        COMMANDS.snapshot,
        COMMANDS.switchThread,
        COMMANDS.searchHistory,
        COMMANDS.restore,
        COMMANDS.rollback,
        COMMANDS.undoLast,
        COMMANDS.showHistory,
        COMMANDS.installHooks,
        COMMANDS.showStatus,
        COMMANDS.showLog,
      ],
    );
    assert.equal(items[0].label, '$(graph) Open breakdown');
    assert.equal(items[1].description, 'thread "e2e"');
  });

  test('a followed session is offered nothing that writes its conversation, and is told what works instead', () => {
    for (const [thread, agent, own] of [
      ['codex:0199a213-81c0', 'Codex', 'its Esc Esc (backtrack) or /compact'],
      ['claude:7f2c1d9e', 'Claude Code', 'its /rewind or /compact'],
    ]) {
      const items = menuItems({ down: undefined, supports: all, thread: t(thread, { title: 'fix the tests' }) });
      for (const gone of [COMMANDS.compactNow, COMMANDS.rollback, COMMANDS.undoLast]) assert.ok(!items.some((i) => i.value === gone), `${thread} ${gone}`);
      assert.equal(items[0].value, COMMANDS.showUsage);
      assert.equal(items[0].description, `the ${agent} session "fix the tests"`);
      const restore = items.find((i) => i.value === COMMANDS.restore)!;
      assert.equal(restore.label, '$(history) Restore files…');
      assert.equal(restore.detail, `The conversation is ${agent}'s: use ${own} there.`);
      assert.ok(items.some((i) => i.value === COMMANDS.searchHistory) && items.some((i) => i.value === COMMANDS.showHistory));
    }
  });

  test('what the daemon does not serve is left out', () => {
    const items = menuItems({
      down: undefined,
      supports: (m) => ![Method.ghostSnapshot, Method.ghostRestore, Method.status, Method.undo, Method.recall, Method.rollback, Method.history].includes(m as never),
      thread: t('x'),
    });
    assert.deepEqual(items.map((i) => i.value), [COMMANDS.showUsage, COMMANDS.compactNow, COMMANDS.switchThread, COMMANDS.showLog]);
  });

  test('not installed: install, set path, restart, log', () => {
    const items = menuItems({
      down: { kind: 'notInstalled', message: 'not installed', command: { command: 'python3', args: ['-m', 'ctxd'] } },
      supports: all,
      thread: undefined,
    });
    assert.deepEqual(items.map((i) => i.value), [COMMANDS.install, COMMANDS.setDaemonPath, COMMANDS.restart, COMMANDS.showLog, COMMANDS.showUsage]);
    assert.match(items[0].detail ?? '', /from a ctxd clone or wheel, into a Python environment of the extension's own/);
    assert.doesNotMatch(items[0].detail ?? '', /ctxd-daemon/);
  });

  test('a crash storm: restart (saying why) and log', () => {
    const items = menuItems({ down: { kind: 'crashed', message: 'ctxd stopped after 5 crashes in 3 minutes.', crashes: 5 }, supports: all, thread: t('a') });
    assert.deepEqual(items.map((i) => i.value), [COMMANDS.restart, COMMANDS.showLog, COMMANDS.showUsage]);
    assert.equal(items[0].detail, 'ctxd stopped after 5 crashes in 3 minutes.');
  });
});

describe('tier notifications', () => {
  test('one per crossing upwards, none while the tier holds or drops', () => {
    const w = new TierWatcher();
    assert.deepEqual(
      ['ok', 'warn', 'warn', 'compact', 'compact', 'ok', 'warn', 'ok'].map((t) => w.observe('a', t as never).up),
      [undefined, 'warn', undefined, 'compact', undefined, undefined, 'warn', undefined],
    );
    assert.equal(w.observe('b', 'compact').up, 'compact');
  });

  test('every change of tier, down as well as up, makes an open notice stale', () => {
    const w = new TierWatcher();
    assert.deepEqual(
      ['warn', 'warn', 'compact', 'ok', 'ok'].map((t) => w.observe('a', t as never).changed),
      [true, false, true, true, false],
    );
  });

  test('the message has the gauge\'s own figures, and how much is left or that the limit is reached', () => {
    const warn = usage({ usedTokens: 100_000, contextWindow: 128_000, autoCompactLimit: 115_200, tier: 'warn' });
    assert.equal(
      tierMessage('warn', t('e2e'), warn),
      'ctxd: thread "e2e" is at 78% · 100k/128k: 15.2k tokens left before auto-compact (at 115.2k).',
    );
    assert.ok(tierMessage('warn', t('e2e'), warn).includes(gaugeText(warn).replace('$(pulse) ', '')));
    assert.equal(
      tierMessage('compact', t('e2e'), usage({ usedTokens: 120_000, autoCompactLimit: 115_200, tier: 'compact' })),
      'ctxd: thread "e2e" is at 94% · 120k/128k: it reached the auto-compact limit (115.2k).',
    );
    assert.deepEqual(Object.values(TIER_ACTIONS), ['Compact now', 'Open breakdown']);
  });

  test('a followed thread is offered the breakdown only, and told its agent compacts it', () => {
    assert.deepEqual(tierActions(t('e2e')), ['Compact now', 'Open breakdown']);
    assert.deepEqual(tierActions(t('claude:7f2c1d9e')), ['Open breakdown']);
    assert.deepEqual(tierActions(t('codex:0199a213')), ['Open breakdown']);
    // A session of an agent ctxd learnt of later: read-only because its listing says so.
    assert.deepEqual(tierActions(t('newagent:1', { source: 'newagent', readOnly: true })), ['Open breakdown']);
    assert.equal(
      tierMessage('compact', t('claude:7f2c1d9e-aaaa', { title: 'fix the flaky test' }), usage({ usedTokens: 170_000, autoCompactLimit: 167_000 })),
      "ctxd: the Claude Code session \"fix the flaky test\" reached its agent's auto-compact point (170k of 167k tokens): the agent compacts it next.",
    );
    assert.equal(
      tierMessage('compact', t('claude:7f2c1d9e-aaaa'), usage({ usedTokens: 170_000, autoCompactLimit: 167_000 })),
      "ctxd: the Claude Code session 7f2c1d9e reached its agent's auto-compact point (170k of 167k tokens): the agent compacts it next.",
    );
  });
});

describe('compactions list', () => {
  test("an agent's compaction shows its fill before, and after once the agent reported it", () => {
    assert.equal(compactionLabel({ tokensBefore: 15_546, tokensAfter: null, archivedItems: 6 }), '15.5k → … tokens');
    assert.equal(compactionLabel({ tokensBefore: 15_546, tokensAfter: 3_015, archivedItems: 6 }), '15.5k → 3k tokens');
    assert.equal(compactionLabel({ tokensBefore: null, tokensAfter: null, archivedItems: 6 }), '6 items replaced');
  });
});

describe('failure notices', () => {
  const missing = { kind: 'notInstalled' as const, message: 'The ctxd daemon is not installed in /v/python.', command: { command: '/v/python', args: ['-m', 'ctxd'] } };

  test('not installed: one notice with Install, Set path, Show log; not repeated by restarts', () => {
    const n = new FailureNotices();
    assert.deepEqual(n.stopped(missing), { message: missing.message, actions: [ACTIONS.install, ACTIONS.setPath, ACTIONS.showLog] });
    assert.equal(n.stopped(missing), undefined);
    n.started();
    assert.ok(n.stopped(missing));
  });

  test('a crash storm offers Restart', () => {
    const n = new FailureNotices();
    assert.deepEqual(n.stopped({ kind: 'crashed', message: 'ctxd stopped after 5 crashes in 3 minutes.', crashes: 5 })?.actions, [
      ACTIONS.restart,
      ACTIONS.showLog,
    ]);
  });
});

describe('status page', () => {
  test('problems first with their source and key, then tokenizers, agents, trust', () => {
    const md = statusMarkdown({
      version: '0.2.0',
      protocolVersion: 2,
      stateDir: '/s',
      trusted: false,
      problems: [{ source: '.ctxd.toml', key: 'llm.base_url', message: 'ignored: the workspace is not trusted' }],
      tokenizers: [{ name: 'o200k_base', status: 'exact' }],
      sources: [{ agent: 'codex', root: '/h/.codex', enabled: true, sessions: 2 }],
    });
    assert.ok(md.startsWith('# ctxd 0.2.0 (protocol 2)\n'));
    assert.match(md, /- \*\*\.ctxd\.toml `llm\.base_url`\*\*: ignored: the workspace is not trusted/);
    assert.match(md, /- o200k_base: loaded; counts are exact/);
    assert.match(md, /- Codex: 2 sessions \(\/h\/\.codex\)/);
    assert.match(md, /Trusted: no \(settings that reach off the machine are ignored\)/);
    assert.ok(md.indexOf('## Problems') < md.indexOf('## Token counting'));
  });

  test('kinds of record an agent wrote that ctxd does not read are named, per version', () => {
    const md = statusMarkdown({
      version: '0.2.0',
      protocolVersion: 3,
      stateDir: '/s',
      trusted: true,
      problems: [],
      tokenizers: [],
      sources: [
        { agent: 'codex', root: '/h/.codex', enabled: true, sessions: 1,
          unread: [{ version: '0.171.0', kinds: ['last_usage_includes_reasoning', 'token_usage_record', 'world_state'], records: 7 }] },
        { agent: 'claude', root: '/h/.claude', enabled: true, sessions: 1, unread: [{ version: null, kinds: ['hologram'], records: 1 }] },
      ],
    });
    assert.match(md, /- Codex: 1 sessions \(\/h\/\.codex\)\n {2}- Codex 0\.171\.0 wrote 3 kinds of record ctxd does not read: last_usage_includes_reasoning, token_usage_record, world_state\n/);
    assert.match(md, /- Claude Code wrote 1 kind of record ctxd does not read: hologram/);
  });
});

describe('error sentences', () => {
  const err = (code: number, message: string) => Object.assign(new Error(message), { code });

  test('the protocol codes say what is unchanged (v2 and v1 codes)', () => {
    assert.equal(friendlyError('Compaction', err(1001, 'nothing worth compacting')), 'Compaction failed: nothing worth compacting. The conversation is unchanged.');
    assert.equal(friendlyError('Compaction', err(-32001, 'model unreachable.')), 'Compaction failed: model unreachable. The conversation is unchanged.');
    assert.equal(friendlyError('Restore', err(1002, 'git failed')), 'Restore failed: git failed. The working tree is unchanged.');
    assert.equal(friendlyError('Restore', err(-32800, 'cancelled')), 'Restore was cancelled; nothing was changed.');
  });

  test('never the raw JSON-RPC text', () => {
    assert.equal(
      friendlyError('Comparing with the snapshot', err(-32601, 'Unhandled method ctxd/ghost/diff')),
      'Comparing with the snapshot needs a newer ctxd daemon: update your clone (git pull) and run ctxd: Install Daemon again.',
    );
    assert.equal(
      friendlyError('Reading the usage', err(-32097, 'Pending response rejected since connection got disposed')),
      'Reading the usage failed: the ctxd daemon is not running. Restart it from the ctxd menu in the status bar.',
    );
    assert.equal(
      friendlyError('Snapshot', err(-32602, 'Request ctxd/ghost/snapshot failed with message: ctxd: workspace file:///x is not open')),
      'Snapshot failed: workspace file:///x is not open.',
    );
  });
});

describe('words people read', () => {
  test('toasts show no Markdown backticks, on one line', () => {
    assert.equal(plainText('Install it with `pip install x`, or set ``ctxd.daemon.command``.'), 'Install it with "pip install x", or set "ctxd.daemon.command".');
    assert.equal(plainText('a ` lone\nline'), "a ' lone line");
  });

  test('the status page says what each tokenizer state means', () => {
    const page = statusMarkdown({
      version: '1', protocolVersion: 3, problems: [], trusted: true, stateDir: '/s', sources: [],
      tokenizers: [{ name: 'cl100k_base', status: 'idle' }, { name: 'o200k_base', status: 'exact' }],
    } as never);
    assert.match(page, /- cl100k_base: not needed yet \(no thread uses it\)/);
    assert.match(page, /- o200k_base: loaded; counts are exact/);
    assert.doesNotMatch(page, /: idle|: exact$/m);
  });

  test('a compaction says how it was done, not its strategy code', () => {
    assert.equal(strategyText(undefined), 'compacted by the agent itself');
    assert.equal(strategyText('offline'), 'shortened without a model');
    assert.equal(strategyText('llm'), 'summarised by the model');
  });
});
