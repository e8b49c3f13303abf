/** Issue #40's pure parts: the agents table, names, Codex's own figure, the breakdown's arrows, the Snapshots grouping, tokens not items. */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, test } from 'node:test';
import { AGENTS, FALLBACK_ICON, agentOf, readOnlySentence, setAgentNames } from '../src/agents';
import { renderBreakdownHtml } from '../src/breakdownView';
import { conversationMarkdown } from '../src/conversation';
import { threadFacts, threadName } from '../src/followed';
import type { GhostCommit, OperationRecord, ThreadInfo } from '../src/protocol';
import { codexPercentLeft, gaugeText, gaugeView } from '../src/status';
import { operationLabel } from '../src/timeMachine';
import { snapshotTree, threadNode } from '../src/trees';
import { breakdown, usage, AGENT_NAMES } from './fixtures';

setAgentNames(AGENT_NAMES); // the names the daemon gives (fixtures.ts)

const NOW = Date.parse('2026-12-01T12:00:00Z');

describe('every agent by its own name and icon', () => {
  test('codex, claude, qwen, gemini, opencode, acp and an unknown one', () => {
    const rows = ['codex', 'claude', 'qwen', 'gemini', 'opencode', 'acp', 'futureagent'].map((source) => {
      const info: ThreadInfo = { thread: `${source}:0123456789abcdef`, source: source as never, readOnly: true, itemCount: 3, historyVersion: 1, updatedAt: '2026-12-01T11:00:00Z' };
      const node = threadNode(info, 'file:///w', 'default', NOW);
      return [node.icon, node.description!.split(' · ')[0], gaugeText(usage(), source).split(' ')[1]];
    });
    assert.deepEqual(rows, [
      ['terminal', 'Codex', 'Codex'],
      ['sparkle', 'Claude Code', 'Claude'],
      ['hubot', 'Qwen Code', 'Qwen'],
      ['star-full', 'Gemini CLI', 'Gemini'],
      ['code', 'OpenCode', 'OpenCode'],
      ['plug', 'ACP agent', 'ACP'],
      [FALLBACK_ICON, 'Futureagent', 'Futureagent'],
    ]);
    assert.equal(new Set(Object.values(AGENTS).map((a) => a.icon)).size, Object.keys(AGENTS).length, 'no two agents share an icon');
    assert.ok(!Object.values(AGENTS).some((a) => a.icon === FALLBACK_ICON));
    assert.equal(agentOf(undefined).name, 'ctxd');
  });

  test("an agent's name is the daemon's: the table has none of its own, a new agent needs no code", () => {
    for (const source of ['codex', 'claude', 'qwen', 'gemini', 'opencode']) assert.equal(AGENTS[source].name, undefined, source);
    try {
      setAgentNames({ ...AGENT_NAMES, futureagent: 'Future Agent', bad: 7 });
      assert.deepEqual([agentOf('qwen').name, agentOf('futureagent').name, agentOf('futureagent').icon], ['Qwen Code', 'Future Agent', FALLBACK_ICON]);
      assert.equal(agentOf('bad').name, 'Bad');
      setAgentNames(undefined); // before the daemon answered: the gauge's word
      assert.deepEqual(['claude', 'qwen', 'acp', 'client'].map((s) => agentOf(s).name), ['Claude', 'Qwen', 'ACP agent', 'ctxd']);
    } finally {
      setAgentNames(AGENT_NAMES);
    }
  });

  test('the read-only sentence names the agent\'s own commands (as the Neovim plugin does)', () => {
    assert.equal(readOnlySentence('codex'), 'This Codex session is read-only: use its Esc Esc (backtrack) or /compact; files: Restore Files on a checkpoint in the Snapshots view.');
    assert.equal(readOnlySentence('gemini'), 'This Gemini CLI session is read-only: use its /rewind or /compress; files: Restore Files on a checkpoint in the Snapshots view.');
    assert.equal(readOnlySentence('acp'), "This ACP agent session is read-only: use ACP agent's own commands; files: Restore Files on a checkpoint in the Snapshots view.");
  });

  test('a session is named by its title, else by its agent and short id, never by the raw thread name', () => {
    assert.equal(threadName(threadFacts('claude:ae4a77f8-1c2d-4e5f', { title: 'fix the\nflaky test', source: 'claude', readOnly: true })), 'fix the flaky test');
    assert.equal(threadName(threadFacts('claude:ae4a77f8-1c2d-4e5f')), 'Claude Code session ae4a77f8');
    assert.equal(threadName(threadFacts('default')), 'default');
  });
});

describe("Codex's own \"% left\"", () => {
  test('the tooltip says the figure Codex shows and why it differs', () => {
    // 63% of the window by the plain share; Codex takes a 12k baseline off both first.
    const u = usage({ usedTokens: 162_800, contextWindow: 258_400, autoCompactLimit: 232_560 });
    assert.equal(codexPercentLeft(u), 100 - Math.round((100 * (162_800 - 12_000)) / (258_400 - 12_000)));
    const tip = gaugeView(u, { folderName: 'w', ...threadFacts('codex:1', { source: 'codex', readOnly: true, title: 'ship it' }) }).tooltip;
    assert.match(tip, /Codex itself shows 39% context left: it sets a 12k-token baseline \(its prompts and tools\) aside from both the tokens and the window; the gauge is the plain share, 63% used\./);
    assert.doesNotMatch(gaugeView(u, { folderName: 'w', ...threadFacts('claude:1') }).tooltip, /Codex itself/);
  });
});

describe('the breakdown page', () => {
  test('each category with details has an arrow that turns when it opens; one without has none', () => {
    const html = renderBreakdownHtml(breakdown(), { cspSource: 'x', nonce: 'n', folderName: 'w', thread: 'Claude Code: fix the tests' });
    const tools = /<details class="category" data-category="builtinTools"><summary><span class="twisty" aria-hidden="true"><\/span>/.test(html);
    assert.ok(tools, html);
    assert.match(html, /<details class="category empty" data-category="systemPrompt">/);
    assert.match(html, /summary \.twisty::before \{ content: '▸'; \}/);
    assert.match(html, /details\[open\] > summary \.twisty::before \{ content: '▾'; \}/);
    assert.match(html, /<span id="thread">Claude Code: fix the tests<\/span>/);
  });
});

describe('Snapshots: checkpoints and safety snapshots under their turn', () => {
  const snap = (id: string, minute: number, more: Partial<GhostCommit>): GhostCommit =>
    ({ id, parent: null, createdAt: new Date(NOW - (60 - minute) * 60_000).toISOString(), message: '', fileCount: 3, skipped: [], durationMs: 1, ...more }) as GhostCommit;
  test('a safety snapshot is named by what it restored and sits under that turn; others under one collapsed node', () => {
    const turn = { index: 3, text: 'fix the tests' };
    const list = [
      snap('a'.repeat(40), 1, { trigger: 'turn', turn, thread: 'claude:x', message: 'fix the tests' }),
      snap('b'.repeat(40), 2, { trigger: 'tool', turn, thread: 'claude:x', message: 'before Edit src/app.py', tool: { name: 'Edit', paths: ['src/app.py'] } as never }),
      snap('c'.repeat(40), 5, { trigger: 'restore', message: `before restoring ${'b'.repeat(12)}` }),
      snap('d'.repeat(40), 6, { trigger: 'manual', message: 'mine' }),
      snap('e'.repeat(40), 7, { trigger: 'restore', message: `before restoring ${'d'.repeat(12)}` }),
      snap('f'.repeat(40), 8, { trigger: 'restore', message: `before restoring ${'d'.repeat(12)}` }),
    ];
    const nodes = snapshotTree(list, NOW, { threadName: () => 'fix the tests session' });
    assert.deepEqual(nodes.map((n) => n.label), ['Safety snapshots', 'mine', 'Turn 3: fix the tests']);
    assert.equal(nodes[0].collapsed, true);
    assert.deepEqual(nodes[0].children!.map((n) => n.label), ['before restoring “mine”', 'before restoring “mine”']);
    const turnNode = nodes[2];
    assert.deepEqual(turnNode.children!.map((n) => n.label), ['start of the turn', 'before Edit src/app.py', 'before restoring “before Edit src/app.py”']);
    assert.match(turnNode.description!, /^2 checkpoints, 1 safety · .* · fix the tests session$/);
    for (const n of [...nodes, ...nodes.flatMap((x) => x.children ?? [])]) assert.doesNotMatch(`${n.label} ${n.description}`, /[0-9a-f]{7}/);
  });
});

describe('History counts tokens, not items', () => {
  test('a row says the tokens before and after; items only when no tokens were recorded', () => {
    const op = (o: Partial<OperationRecord>) => ({ kind: 'rollback', id: 1, itemsBefore: 12, itemsAfter: 6, tokensBefore: 48_000, tokensAfter: 12_500, createdAt: '', ...o }) as OperationRecord;
    assert.equal(operationLabel(op({})), 'Rollback: 48k → 12.5k tokens');
    assert.equal(operationLabel(op({ kind: 'restore', tokensBefore: null, tokensAfter: null })), 'Restore: 6 items taken out');
  });
});

describe('conversation text', () => {
  test('shell commands and patches name what they touch', () => {
    const md = conversationMarkdown(
      [
        { type: 'function_call', call_id: '1', name: 'exec_command', arguments: JSON.stringify({ cmd: 'pytest -q tests' }) },
        { type: 'custom_tool_call', call_id: '2', name: 'apply_patch', input: '*** Begin Patch\n*** Update File: src/app.py\n@@\n-a\n+b\n*** End Patch' },
        { type: 'function_call_output', call_id: '1', output: 'line 1\nline 2' },
      ] as never,
      'codex',
    );
    assert.equal(
      md,
      '### Tool call: exec_command · pytest -q tests\n\n### Tool call: apply_patch · src/app.py\n\n### Tool result of exec_command · pytest -q tests\n\n```text\nline 1\nline 2\n```',
    );
  });
});

describe('package.json: menus, welcome views and the walkthrough', () => {
  const pkg = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'package.json'), 'utf8'));
  const c = pkg.contributes;

  test('nothing that writes a followed session\'s conversation is in its menus', () => {
    const palette = Object.fromEntries(c.menus.commandPalette.map((e: { command: string; when: string }) => [e.command, e.when]));
    for (const id of ['ctxd.compact', 'ctxd.compactNow', 'ctxd.rollback', 'ctxd.undoLast']) assert.equal(palette[id], '!ctxd.shownReadOnly', id);
    for (const e of c.menus['view/title'].filter((x: { command: string }) => ['ctxd.compactNow', 'ctxd.undoLast'].includes(x.command))) {
      assert.match(e.when, /&& !ctxd\.shownReadOnly$/);
    }
    const items = c.menus['view/item/context'];
    const whenOf = (id: string) => items.filter((e: { command: string }) => e.command === id).map((e: { when: string }) => e.when);
    // snapshot.filesOnly (a followed session's rows) gets Restore Files, not Restore Files and Conversation.
    assert.deepEqual(whenOf('ctxd.restoreFilesAndConversation'), ['view == ctxd.snapshots && viewItem == snapshot']);
    assert.ok(whenOf('ctxd.restoreFiles').every((w: string) => /viewItem =~ \/\^snapshot\(\\\.filesOnly\)\?\$\//.test(w)));
    // operation.readOnly (a followed session's history) has no Undo.
    assert.ok(whenOf('ctxd.undoOperation').every((w: string) => /viewItem == operation$/.test(w)));
  });

  test('empty views offer Install (and Install Agent Hooks once ctxd runs); the walkthrough has Install, Set path and hooks', () => {
    const welcome = c.viewsWelcome as { view: string; contents: string; when: string }[];
    for (const view of ['ctxd.threads', 'ctxd.snapshots', 'ctxd.compactions']) {
      const missing = welcome.find((w) => w.view === view && /ctxd\.daemonState == notInstalled/.test(w.when));
      assert.match(missing?.contents ?? '', /\[Install ctxd\]\(command:ctxd\.install\)/, view);
    }
    assert.match(welcome.find((w) => w.view === 'ctxd.threads' && /== running/.test(w.when))!.contents, /\(command:ctxd\.installHooks\)/);
    const steps = c.walkthroughs[0].steps as { description: string; media: { markdown: string } }[];
    assert.deepEqual(steps.map((s) => /\(command:(ctxd\.\w+)\)/.exec(s.description)?.[1]), ['ctxd.install', 'ctxd.setDaemonPath', 'ctxd.installHooks', 'ctxd.showUsage']);
    for (const s of steps) assert.ok(fs.existsSync(path.join(__dirname, '..', '..', s.media.markdown)), s.media.markdown);
    const shipped = fs.readFileSync(path.join(__dirname, '..', '..', '.vscodeignore'), 'utf8');
    assert.match(shipped, /^!media\/walkthrough\/\*\.md$/m);
  });
});

describe('a title is text, never an icon', () => {
  test('a session titled with "$(…)" shows it as typed in the menu', async () => {
    const { menuItems } = await import('../src/quickMenu');
    const items = menuItems({ down: undefined, supports: () => true, thread: threadFacts('claude:1', { title: 'run $(zap) now', source: 'claude', readOnly: true }) });
    assert.equal(items[0].description, 'the Claude Code session "run $\u200b(zap) now"');
  });
});
