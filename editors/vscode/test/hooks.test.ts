/**
 * Install Agent Hooks… and Show Status's hooks section, running the real `ctxd hooks` (this
 * clone's, `python -m ctxd`) against Claude Code's and Codex's settings in a temporary home.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { agentOf } from '../src/agents';
import { type HooksRunner, changedFiles, hookAgents, hooksMarkdown, hooksRunner, hooksSummary, installHooksFlow, parseHooksStatus, readHooksStatus } from '../src/hooks';
import type { PickItem, Severity, Ui } from '../src/ui';
import { PYTHON, daemonEnv } from './daemon';
import { setAgentNames } from '../src/agents';
import { AGENT_NAMES } from './fixtures';

setAgentNames(AGENT_NAMES); // the names the daemon gives (fixtures.ts)

class HooksUi implements Ui {
  picks: PickItem<unknown>[][] = [];
  messages: { severity: Severity; message: string }[] = [];
  confirms: { message: string; detail: string }[] = [];
  constructor(private readonly choose: (items: PickItem<unknown>[]) => unknown, private readonly agree: boolean) {}
  async pick<T>(items: PickItem<T>[]): Promise<T | undefined> {
    this.picks.push(items as PickItem<unknown>[]);
    return this.choose(items as PickItem<unknown>[]) as T | undefined;
  }
  async input(): Promise<string | undefined> {
    return undefined;
  }
  async confirm(message: string, detail: string): Promise<boolean> {
    this.confirms.push({ message, detail });
    return this.agree;
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

/** The agents this ctxd hooks, by name in the order `ctxd hooks status` lists them, asked of ctxd's
 * registry: adding or removing an agent needs no edit here. */
function hookedAgents(): string[] {
  const out = execFileSync(PYTHON, ['-c', 'import json, ctxd.agents as a; print(json.dumps(sorted(x.name for x in a.with_hooks())))'], { encoding: 'utf8' });
  const agents = JSON.parse(out) as string[];
  assert.ok(agents.includes('claude') && agents.includes('codex'), out);
  return agents;
}

/** "Claude Code, Codex and Qwen Code". */
function inWords(agents: readonly string[]): string {
  const words = agents.map((a) => agentOf(a).name);
  return `${words.slice(0, -1).join(', ')} and ${words[words.length - 1]}`;
}

describe('agent hooks from the editor (real ctxd hooks)', () => {
  let tmp: string;
  let env: NodeJS.ProcessEnv;
  let project: string;
  let run: HooksRunner;
  let claudeSettings: string;

  before(() => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ctxd-hooks-'));
    env = daemonEnv(path.join(tmp, 'state'));
    fs.mkdirSync(env.HOME!, { recursive: true });
    project = path.join(tmp, 'project');
    fs.mkdirSync(project);
    claudeSettings = path.join(env.CLAUDE_CONFIG_DIR!, 'settings.json');
    fs.mkdirSync(env.CLAUDE_CONFIG_DIR!, { recursive: true });
    fs.writeFileSync(claudeSettings, '{\n  "theme": "dark"\n}\n');
    run = hooksRunner(async () => ({ command: PYTHON, args: ['-m', 'ctxd'] }), () => project, env);
  });
  after(() => fs.rmSync(tmp, { recursive: true, force: true }));

  test("the agents come from ctxd hooks status, not from a list of the extension's own", async () => {
    const status = await readHooksStatus(run);
    assert.ok('states' in status, JSON.stringify(status));
    const agents = hookedAgents();
    assert.deepEqual(hookAgents(status.states), agents);
    assert.deepEqual(hooksSummary(status.states), agents.map((a) => `${agentOf(a).name}: not installed`));
    // An agent a newer ctxd adds appears by its own name.
    const newer = parseHooksStatus('claude user: hooks none; status line no; MCP server no (/a)\nqwen user: hooks UserPromptSubmit (trusted); MCP server no (/b)\nfutureagent user: hooks none (/c)\n');
    assert.deepEqual(hookAgents(newer), ['claude', 'qwen', 'futureagent']);
    assert.deepEqual(hooksSummary(newer), ['Claude Code: not installed', 'Qwen Code: installed (user), trusted', 'Futureagent: not installed']);
  });

  test('cancelling at the diff writes nothing; the diff named every file first', async () => {
    const before = fs.readFileSync(claudeSettings, 'utf8');
    const opened: string[] = [];
    const ui = new HooksUi((items) => items[0].value, false);
    const outcome = await installHooksFlow({ ui, run, openDiff: async (diff) => void opened.push(diff), log: () => undefined });
    assert.equal(outcome, 'cancelled');
    assert.equal(fs.readFileSync(claudeSettings, 'utf8'), before);
    assert.equal(opened.length, 1);
    assert.match(opened[0], /^--- /m);
    assert.ok(changedFiles(opened[0]).includes(claudeSettings), opened[0].slice(0, 400));
    const every = inWords(hookedAgents());
    assert.equal(ui.picks[0][0].label, `All agents: ${every}`);
    assert.equal(ui.confirms[0].message, `Install ctxd's hooks into ${every}?`);
    assert.ok(ui.confirms[0].detail.includes(claudeSettings));
  });

  test('installed after the diff; Show Status says installed, and Codex not trusted yet', async () => {
    const ui = new HooksUi((items) => items[0].value, true);
    const outcome = await installHooksFlow({ ui, run, openDiff: async () => undefined, log: () => undefined });
    assert.equal(outcome, 'installed', JSON.stringify(ui.messages));
    const settings = JSON.parse(fs.readFileSync(claudeSettings, 'utf8'));
    assert.equal(settings.theme, 'dark', "the user's own setting stays");
    assert.ok(JSON.stringify(settings.hooks).includes(' hook'), 'ctxd hook entries written');
    const done = ui.messages.at(-1)!;
    assert.equal(done.severity, 'info');
    assert.match(done.message, /Claude Code: installed \(user\)/);
    assert.match(done.message, /Codex: installed \(user\), not trusted yet: review them in Codex's \/hooks/);
    const page = hooksMarkdown(await readHooksStatus(run)).join('\n');
    assert.match(page, /^## Agent hooks\n\n- Claude Code: installed \(user\)\n- Codex: installed \(user\), not trusted yet: review them in Codex's \/hooks$/m);
  });

  test('a second install has nothing to change and says so', async () => {
    const ui = new HooksUi((items) => items.find((i) => i.label === 'Claude Code')?.value, true);
    assert.equal(await installHooksFlow({ ui, run, openDiff: async () => assert.fail('no diff to show'), log: () => undefined }), 'unchanged');
    assert.match(ui.messages[0].message, /already installed in Claude Code: nothing to change/);
  });

  test('a daemon that cannot run says why; nothing is written', async () => {
    const broken = hooksRunner(async () => ({ command: path.join(tmp, 'no-such-ctxd'), args: [] }), () => project, env);
    const ui = new HooksUi(() => assert.fail('nothing to pick'), true);
    assert.equal(await installHooksFlow({ ui, run: broken, openDiff: async () => undefined, log: () => undefined }), 'failed');
    assert.match(ui.messages[0].message, /^Reading the hooks failed: .*no-such-ctxd: not found\.$/);
    assert.deepEqual(hooksMarkdown(await readHooksStatus(broken)).slice(0, 3), ['## Agent hooks', '', `Could not read them: ${path.join(tmp, 'no-such-ctxd')}: not found.`]);
  });
});
