/**
 * Install Agent Hooks… and Show Status's hooks section, running the real `ctxd hooks` (this
 * clone's, `python -m ctxd`) against Claude Code's and Codex's settings in a temporary home: the
 * two agents on this (pretend) machine, the others absent.
 */
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { agentOf } from '../src/agents';
import { type HooksRunner, changedFiles, hookAgents, hooksMarkdown, hooksRunner, hooksSummary, installHooksFlow, parseHooksStatus, presentAgents, readHooksStatus, splitDryRun } from '../src/hooks';
import type { PickItem, Severity, Ui } from '../src/ui';
import { PYTHON, daemonEnv } from './daemon';
import { setAgentNames } from '../src/agents';
import { AGENT_NAMES } from './fixtures';

setAgentNames(AGENT_NAMES); // the names the daemon gives (fixtures.ts)

class HooksUi implements Ui {
  picks: PickItem<unknown>[][] = [];
  placeHolders: (string | undefined)[] = [];
  messages: { severity: Severity; message: string }[] = [];
  confirms: { message: string; detail: string }[] = [];
  constructor(private readonly choose: (items: PickItem<unknown>[]) => unknown, private readonly agree: boolean) {}
  async pick<T>(items: PickItem<T>[], options: { placeHolder?: string }): Promise<T | undefined> {
    this.picks.push(items as PickItem<unknown>[]);
    this.placeHolders.push(options.placeHolder);
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

/** The env of a home with no agent in it: ctxd's daemonEnv, with every agent's folder inside `stateDir`. */
function agentlessEnv(stateDir: string): NodeJS.ProcessEnv {
  const env = daemonEnv(stateDir);
  env.XDG_DATA_HOME = path.join(stateDir, 'data'); // OpenCode's data folder
  delete env.QWEN_HOME;
  delete env.GEMINI_CLI_HOME;
  fs.mkdirSync(env.HOME!, { recursive: true });
  return env;
}

/** The files and folders of the agents not on the machine: none of them may appear. */
function absentFolders(env: NodeJS.ProcessEnv): string[] {
  return [path.join(env.HOME!, '.gemini'), path.join(env.HOME!, '.qwen'), path.join(env.XDG_CONFIG_HOME!, 'opencode'), path.join(env.XDG_DATA_HOME!, 'opencode')];
}

describe('agent hooks from the editor (real ctxd hooks)', () => {
  let tmp: string;
  let env: NodeJS.ProcessEnv;
  let project: string;
  let run: HooksRunner;
  let claudeSettings: string;
  let codexConfig: string;

  before(() => {
    tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ctxd-hooks-'));
    env = agentlessEnv(path.join(tmp, 'state'));
    project = path.join(tmp, 'project');
    fs.mkdirSync(project);
    claudeSettings = path.join(env.CLAUDE_CONFIG_DIR!, 'settings.json');
    fs.mkdirSync(env.CLAUDE_CONFIG_DIR!, { recursive: true });
    fs.mkdirSync(env.CODEX_HOME!, { recursive: true }); // Codex has run here, with no config.toml yet
    codexConfig = path.join(env.CODEX_HOME!, 'config.toml');
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

  test('ctxd hooks status says which agents are on this machine: Claude Code and Codex here', async () => {
    const status = await readHooksStatus(run);
    assert.ok('states' in status, JSON.stringify(status));
    assert.ok(status.states.every((s) => s.present === (s.agent === 'claude' || s.agent === 'codex')), JSON.stringify(status.states.map((s) => s.line)));
    assert.deepEqual(presentAgents(status.states), ['claude', 'codex']);
    // The clause is the line's last: the trust words and a problem read as before it.
    const said = parseHooksStatus(
      'codex user: hooks UserPromptSubmit (trusted); MCP server yes (/c); on this machine yes\n' +
        'gemini user: /g/settings.json: not valid JSON; on this machine no (no folder /g)\n' +
        'qwen user: hooks none; status line no; MCP server no (/q)\n',
    );
    assert.deepEqual(said.map((s) => [s.agent, s.installed, s.trusted, s.problem, s.present]), [
      ['codex', true, true, undefined, true],
      ['gemini', false, undefined, '/g/settings.json: not valid JSON', false],
      ['qwen', false, undefined, undefined, undefined],
    ]);
    assert.deepEqual(presentAgents(said), ['codex', 'qwen'], 'a ctxd that does not say: counted as here');
    assert.deepEqual(splitDryRun('skipped Gemini CLI: not on this machine (no folder /g)\nto install into one anyway: …\n--- /a\n+++ /a\n'), {
      notes: ['skipped Gemini CLI: not on this machine (no folder /g)', 'to install into one anyway: …'],
      diff: '--- /a\n+++ /a\n',
    });
  });

  test('cancelling at the diff writes nothing; the diff named every file first', async () => {
    const before = fs.readFileSync(claudeSettings, 'utf8');
    const opened: string[] = [];
    const ui = new HooksUi((items) => items[0].value, false);
    const outcome = await installHooksFlow({ ui, run, openDiff: async (diff) => void opened.push(diff), log: () => undefined });
    assert.equal(outcome, 'cancelled');
    assert.equal(fs.readFileSync(claudeSettings, 'utf8'), before);
    assert.equal(opened.length, 1);
    assert.match(opened[0], /^--- /);
    assert.doesNotMatch(opened[0], /skipped|not on this machine/, 'the diff alone, without the skipped agents');
    const files = changedFiles(opened[0]);
    assert.ok(files.includes(claudeSettings) && files.includes(codexConfig), opened[0].slice(0, 400));
    assert.ok(files.every((f) => !absentFolders(env).some((d) => f.startsWith(d + path.sep))), files.join(', '));
    // The recommended row: the agents on this machine; then one row per agent, the absent ones saying so.
    const rows = ui.picks[0];
    assert.deepEqual([rows[0].label, rows[0].description], ['Agents on this machine: Claude Code and Codex', 'recommended']);
    assert.deepEqual(rows[0].value, { agents: ['claude', 'codex'], agent: undefined });
    const agents = hookedAgents();
    assert.deepEqual(rows.slice(1).map((r) => r.label), agents.map((a) => agentOf(a).name));
    for (const row of rows.slice(1)) {
      const here = row.label === 'Claude Code' || row.label === 'Codex';
      assert.equal(row.description, here ? 'not installed' : 'not installed; not on this machine', row.label);
    }
    assert.equal(ui.confirms[0].message, "Install ctxd's hooks into Claude Code and Codex?");
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
    assert.doesNotMatch(done.message, /Gemini|Qwen|OpenCode/, 'only the agents installed into are named');
    assert.deepEqual(absentFolders(env).filter((d) => fs.existsSync(d)), [], 'nothing written for an agent not on this machine');
    const page = hooksMarkdown(await readHooksStatus(run)).join('\n');
    assert.match(page, /^## Agent hooks\n\n- Claude Code: installed \(user\)\n- Codex: installed \(user\), not trusted yet: review them in Codex's \/hooks\n- \S.*: not installed$/m);
  });

  test('a second install has nothing to change and says so', async () => {
    const ui = new HooksUi((items) => items.find((i) => i.label === 'Claude Code')?.value, true);
    assert.equal(await installHooksFlow({ ui, run, openDiff: async () => assert.fail('no diff to show'), log: () => undefined }), 'unchanged');
    assert.match(ui.messages[0].message, /already installed in Claude Code: nothing to change/);
    const again = new HooksUi((items) => items[0].value, true);
    assert.equal(await installHooksFlow({ ui: again, run, openDiff: async () => assert.fail('no diff to show'), log: () => undefined }), 'unchanged');
    assert.match(again.messages[0].message, /already installed in Claude Code and Codex: nothing to change\.$/);
  });

  test("an agent not on this machine is installed into when its own row is picked (--agent NAME)", async () => {
    const qwen = path.join(env.HOME!, '.qwen', 'settings.json');
    const ui = new HooksUi((items) => items.find((i) => i.label === 'Qwen Code')?.value, true);
    const outcome = await installHooksFlow({ ui, run, openDiff: async () => undefined, log: () => undefined });
    assert.equal(outcome, 'installed', JSON.stringify(ui.messages));
    assert.equal(ui.confirms[0].message, "Install ctxd's hooks into Qwen Code?");
    assert.ok(fs.existsSync(qwen), 'written although Qwen Code had no folder');
    assert.match(ui.messages.at(-1)!.message, /^ctxd's hooks are installed\. Qwen Code: installed \(user\)/);
    assert.ok(!fs.existsSync(path.join(env.HOME!, '.gemini')), 'no other agent written');
  });

  test('no agent on this machine: no recommended row, and the pick says so', async () => {
    const bare = agentlessEnv(path.join(tmp, 'bare'));
    const runBare = hooksRunner(async () => ({ command: PYTHON, args: ['-m', 'ctxd'] }), () => project, bare);
    const ui = new HooksUi(() => undefined, true);
    assert.equal(await installHooksFlow({ ui, run: runBare, openDiff: async () => assert.fail('nothing picked'), log: () => undefined }), 'cancelled');
    assert.deepEqual(ui.picks[0].map((r) => r.label), hookedAgents().map((a) => agentOf(a).name));
    assert.ok(ui.picks[0].every((r) => r.description?.endsWith('not on this machine')), JSON.stringify(ui.picks[0]));
    assert.match(ui.placeHolders[0] ?? '', /^No agent found on this machine/);
  });

  test('a daemon that cannot run says why; nothing is written', async () => {
    const broken = hooksRunner(async () => ({ command: path.join(tmp, 'no-such-ctxd'), args: [] }), () => project, env);
    const ui = new HooksUi(() => assert.fail('nothing to pick'), true);
    assert.equal(await installHooksFlow({ ui, run: broken, openDiff: async () => undefined, log: () => undefined }), 'failed');
    assert.match(ui.messages[0].message, /^Reading the hooks failed: .*no-such-ctxd: not found\.$/);
    assert.deepEqual(hooksMarkdown(await readHooksStatus(broken)).slice(0, 3), ['## Agent hooks', '', `Could not read them: ${path.join(tmp, 'no-such-ctxd')}: not found.`]);
  });
});
