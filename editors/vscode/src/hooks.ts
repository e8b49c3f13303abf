/**
 * ctxd's hooks inside the agents, from the editor: "Install Agent Hooks…" runs the daemon's own
 * command line (`ctxd hooks …`, docs/hooks.md), never writes the agents' files itself. It reads
 * which agents there are, and which are on this machine, from `ctxd hooks status` (so an agent a
 * newer ctxd supports shows up with no change here); it recommends those on this machine, as
 * `ctxd hooks install` with no `--agent` does, shows `--dry-run`'s diff, installs only when the
 * user says so, and says whether each agent trusts the hooks (Codex asks for that in its /hooks).
 * Show Status has the same lines.
 * Free of `vscode`: the process runner and the document opener are passed in; the tests run the
 * real `ctxd hooks` against agent folders in a temporary home.
 */
import { spawn } from 'node:child_process';
import { agentOf } from './agents';
import { pythonSafeEnv } from './probe';
import type { DaemonCommand } from './settings';
import type { Ui } from './ui';

export interface RunResult {
  /** The exit code; -1 when the program could not run (then `stderr` says why). */
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs `ctxd hooks <args>`. */
export type HooksRunner = (args: string[]) => Promise<RunResult>;

/** How long a `ctxd hooks` run may take before it is called failed. */
export const HOOKS_TIMEOUT_MS = 60_000;

/** A runner over the daemon's command, in `cwd` (the project scope is the folder it runs in). */
export function hooksRunner(command: () => Promise<DaemonCommand>, cwd: () => string | undefined, env: NodeJS.ProcessEnv = process.env): HooksRunner {
  return async (args) => {
    const c = await command();
    return new Promise<RunResult>((resolve) => {
      let stdout = '';
      let stderr = '';
      let settled = false;
      const done = (r: RunResult) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        resolve(r);
      };
      const child = spawn(c.command, [...c.args, 'hooks', ...args], { cwd: cwd(), env: pythonSafeEnv(env), stdio: ['ignore', 'pipe', 'pipe'] });
      const timer = setTimeout(() => {
        child.kill('SIGKILL');
        done({ code: -1, stdout, stderr: `ctxd hooks ${args[0]} did not finish within ${HOOKS_TIMEOUT_MS / 1000} s` });
      }, HOOKS_TIMEOUT_MS);
      child.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
      child.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
      child.on('error', (e: NodeJS.ErrnoException) => done({ code: -1, stdout, stderr: `${c.command}: ${e.code === 'ENOENT' ? 'not found' : e.message}` }));
      child.on('close', (code) => done({ code: code ?? -1, stdout, stderr }));
    });
  };
}

/** What `ctxd hooks status` says of one agent in one scope. */
export interface HookState {
  /** `claude`, `codex`, … (the line's first word). */
  agent: string;
  scope: string;
  installed: boolean;
  /** False while the agent has not trusted them (Codex); undefined when it has no such step. */
  trusted: boolean | undefined;
  /** The agent's own words in parentheses (`installed, not trusted yet: review them in Codex's /hooks`). */
  trust: string | undefined;
  /** A line that says the file could not be read, instead of its hooks. */
  problem: string | undefined;
  /** Whether the agent is on this machine (its last clause, `on this machine yes|no (…)`); undefined from a ctxd that does not say. */
  present: boolean | undefined;
  line: string;
}

/** `ctxd hooks status`'s lines: `claude user: hooks UserPromptSubmit, …; status line yes; … (path)`. */
export function parseHooksStatus(text: string): HookState[] {
  const states: HookState[] = [];
  for (const line of text.split(/\r?\n/)) {
    const head = /^([a-z][a-z0-9-]*) (user|project): (.*)$/.exec(line.trim());
    if (!head) continue;
    const [, agent, scope, all] = head;
    const here = /; on this machine (yes|no)\b[^;]*$/.exec(all);
    const present = here ? here[1] === 'yes' : undefined;
    const rest = here ? all.slice(0, here.index) : all;
    const hooks = /^hooks (.*)$/.exec(rest);
    if (!hooks) {
      states.push({ agent, scope, installed: false, trusted: undefined, trust: undefined, problem: rest, present, line });
      continue;
    }
    const installed = !hooks[1].startsWith('none');
    // Codex's trust, in parentheses after the events (its words may hold a ";" of their own).
    const words = /^[^(;]*\((.*?)\);/.exec(hooks[1])?.[1] ?? /^[^(;]*\((.*?)\)\s*$/.exec(hooks[1])?.[1];
    const trust = installed && words && !words.startsWith('/') ? words : undefined;
    states.push({ agent, scope, installed, trusted: trust === undefined ? undefined : trust === 'trusted', trust, problem: undefined, present, line });
  }
  return states;
}

/** The agents `ctxd hooks` knows, in its order. */
export function hookAgents(states: readonly HookState[]): string[] {
  return [...new Set(states.map((s) => s.agent))];
}

/** The agents on this machine, in ctxd's order: what `ctxd hooks install` with no `--agent` installs into.
 * An agent whose lines do not say (an older ctxd) counts as here. */
export function presentAgents(states: readonly HookState[]): string[] {
  return hookAgents(states).filter((a) => states.every((s) => s.agent !== a || s.present !== false));
}

/** One line per agent: "Claude Code: installed (user)", "Codex: installed (user), not trusted yet: review them in Codex's /hooks". */
export function hooksSummary(states: readonly HookState[]): string[] {
  return hookAgents(states).map((agent) => {
    const mine = states.filter((s) => s.agent === agent);
    const name = agentOf(agent).name;
    const problems = mine.filter((s) => s.problem).map((s) => `${s.scope}: ${s.problem}`);
    const scopes = mine.filter((s) => s.installed);
    if (scopes.length === 0) return `${name}: not installed${problems.length ? ` (${problems.join('; ')})` : ''}`;
    const untrusted = scopes.find((s) => s.trusted === false);
    const trusted = scopes.length > 0 && scopes.every((s) => s.trusted === true);
    // Codex's words start "installed, not trusted yet": the line has said installed already.
    const trust = untrusted ? `, ${untrusted.trust?.replace(/^installed,\s*/, '')}` : trusted ? ', trusted' : '';
    return `${name}: installed (${scopes.map((s) => s.scope).join(', ')})${trust}${problems.length ? ` (${problems.join('; ')})` : ''}`;
  });
}

/** The last line of a failed run, for a message. */
export function failureText(r: RunResult): string {
  const lines = (r.stderr.trim() || r.stdout.trim()).split(/\r?\n/);
  return lines[lines.length - 1]?.replace(/^ctxd hooks \w+:\s*/, '') || `exit code ${r.code}`;
}

/** Reads `ctxd hooks status`; undefined (the failure shown) when it could not run. */
export async function readHooksStatus(run: HooksRunner): Promise<{ states: HookState[] } | { error: string }> {
  const r = await run(['status', '--agent', 'all']);
  if (r.code !== 0) return { error: failureText(r) };
  return { states: parseHooksStatus(r.stdout) };
}

/** A dry run's output: the lines before the diff (`skipped Gemini CLI: not on this machine …`, when
 * no agent was named) and the diff itself (or "nothing to change"). */
export function splitDryRun(stdout: string): { notes: string[]; diff: string } {
  const lines = stdout.split(/\r?\n/);
  let start = lines.findIndex((l) => l.startsWith('--- '));
  if (start < 0) start = lines.findIndex((l) => l.trim() === 'nothing to change');
  if (start < 0) start = lines.length;
  return { notes: lines.slice(0, start).filter((l) => l.trim()), diff: lines.slice(start).join('\n') };
}

/** The files a dry run's diff changes (`+++ b/<path>` lines; `/dev/null` for a file removed). */
export function changedFiles(diff: string): string[] {
  const files: string[] = [];
  for (const m of diff.matchAll(/^\+\+\+ (?:b\/)?(.+)$/gm)) if (m[1].trim() !== '/dev/null') files.push(m[1].trim());
  for (const m of diff.matchAll(/^--- (?:a\/)?(.+)$/gm)) if (!files.includes(m[1].trim()) && m[1].trim() !== '/dev/null') files.push(m[1].trim());
  return files;
}

function names(agents: readonly string[]): string {
  const words = agents.map((a) => agentOf(a).name);
  return words.length <= 1 ? (words[0] ?? '') : `${words.slice(0, -1).join(', ')} and ${words[words.length - 1]}`;
}

export interface HooksHost {
  ui: Ui;
  run: HooksRunner;
  /** Opens the dry run's diff read-only, beside the confirmation. */
  openDiff(content: string): Promise<void>;
  log(line: string): void;
}

export type HooksOutcome = 'installed' | 'unchanged' | 'cancelled' | 'failed';

/** Install Agent Hooks…: pick the agents, show the diff, confirm, install, say what the agents make of it. */
export async function installHooksFlow(h: HooksHost): Promise<HooksOutcome> {
  const status = await h.ui.progress('ctxd: reading which agents have ctxd hooks…', () => readHooksStatus(h.run));
  if ('error' in status) {
    h.ui.notify('error', `Reading the hooks failed: ${status.error}.`);
    return 'failed';
  }
  const agents = hookAgents(status.states);
  if (agents.length === 0) {
    h.ui.notify('error', 'This ctxd lists no agent to install hooks into: update it (git pull in your clone, then ctxd: Install Daemon).');
    return 'failed';
  }
  const summary = new Map(agents.map((a, i) => [a, hooksSummary(status.states)[i]]));
  const here = presentAgents(status.states);
  // The recommended row is what `ctxd hooks install` does with no --agent: the agents on this
  // machine. An agent row installs into that one, here or not (`--agent NAME`).
  const chosen = await h.ui.pick<{ agents: string[]; agent: string | undefined }>(
    [
      ...(here.length > 0
        ? [{ label: `Agents on this machine: ${names(here)}`, description: 'recommended', detail: 'checkpoints before each turn and tool, the status line, and the recall MCP server', value: { agents: here, agent: undefined } }]
        : []),
      ...agents.map((a) => {
        const said = summary.get(a)?.replace(/^[^:]*:\s*/, '') ?? '';
        return { label: agentOf(a).name, description: here.includes(a) ? said : `${said}; not on this machine`, value: { agents: [a], agent: a } };
      }),
    ],
    {
      title: 'ctxd: Install Agent Hooks',
      placeHolder: here.length > 0
        ? 'Which agents get ctxd’s hooks (your user settings; the diff shows first)'
        : 'No agent found on this machine (none has its folder yet): pick one to install into anyway',
    },
  );
  if (!chosen) return 'cancelled';
  const agentArgs = chosen.agent === undefined ? [] : ['--agent', chosen.agent];
  const dry = await h.ui.progress('ctxd: preparing the change…', () => h.run(['install', ...agentArgs, '--dry-run']));
  if (dry.code !== 0) {
    h.log(`ctxd hooks install --dry-run: ${dry.stderr || dry.stdout}`);
    h.ui.notify('error', `Installing the hooks failed: ${failureText(dry)}. Nothing was written.`);
    return 'failed';
  }
  const { notes, diff } = splitDryRun(dry.stdout);
  for (const note of notes) h.log(`ctxd hooks install --dry-run: ${note}`);
  if (!diff.trim() || /^nothing to change\s*$/.test(diff.trim())) {
    h.ui.notify('info', `ctxd's hooks are already installed in ${names(chosen.agents)}: nothing to change.`);
    return 'unchanged';
  }
  await h.openDiff(diff);
  const files = changedFiles(diff);
  const ok = await h.ui.confirm(
    `Install ctxd's hooks into ${names(chosen.agents)}?`,
    `The diff shows every change (${files.length} file${files.length === 1 ? '' : 's'}: ${files.join(', ')}). Only ctxd's own entries are added; ` +
      'the rest of each file stays as it is. "ctxd hooks uninstall" removes them again.',
    'Install',
  );
  if (!ok) return 'cancelled';
  const done = await h.ui.progress('ctxd: installing the hooks…', () => h.run(['install', ...agentArgs]));
  h.log(`ctxd hooks ${['install', ...agentArgs].join(' ')}: ${done.stdout}${done.stderr}`);
  if (done.code !== 0) {
    // ctxd writes every file or none when it reports a failure; a run that did not finish says nothing of them.
    const files = done.code > 0 ? "The agents' files are as they were." : 'Show Status says what is installed.';
    h.ui.notify('error', `Installing the hooks failed: ${failureText(done)}. ${files}`);
    return 'failed';
  }
  const after = await readHooksStatus(h.run);
  const lines = 'states' in after ? hooksSummary(after.states.filter((s) => chosen.agents.includes(s.agent))) : [];
  h.ui.notify('info', `ctxd's hooks are installed. ${lines.join('. ')}${lines.length ? '.' : ''} Show Status says whether they are installed and trusted.`);
  return 'installed';
}

/** Show Status's "Agent hooks" section (Markdown lines). */
export function hooksMarkdown(status: { states: HookState[] } | { error: string }): string[] {
  const out = ['## Agent hooks', ''];
  if ('error' in status) {
    out.push(`Could not read them: ${status.error}.`);
    return out;
  }
  if (status.states.length === 0) out.push('This ctxd lists no agent.');
  for (const line of hooksSummary(status.states)) out.push(`- ${line}`);
  if (status.states.length > 0 && !status.states.some((s) => s.installed)) out.push('', 'Install them with "ctxd: Install Agent Hooks…".');
  return out;
}
