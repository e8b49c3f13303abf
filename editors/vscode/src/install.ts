/**
 * Installs the daemon where the extension owns it: a venv in the extension's global storage,
 * filled with pip from what the user has (a clone of the ctxd repository, or a built wheel). The
 * name on PyPI is not ctxd's, and the system pip is refused by PEP 668 distributions, so neither
 * is used. Free of `vscode`; tested with a real venv and a real pip.
 */
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { pythonSafeEnv } from './probe';

/** Where a user reads how to install ctxd by hand (README.md of the extension). */
export const INSTRUCTIONS = 'README.md';

export type SourceKind = 'folder' | 'wheel';

/** Why `source` cannot be installed from, or undefined when it can. */
export function sourceProblem(source: string, kind: SourceKind): string | undefined {
  if (kind === 'wheel') {
    if (!/^ctxd_daemon-[^/\\]+\.whl$/.test(path.basename(source))) return `${path.basename(source)} is not a ctxd wheel (ctxd_daemon-….whl)`;
    return fs.existsSync(source) ? undefined : `${source} does not exist`;
  }
  const pyproject = path.join(source, 'pyproject.toml');
  let text = '';
  try {
    text = fs.readFileSync(pyproject, 'utf8');
  } catch {
    return `${source} has no pyproject.toml: choose the folder of a ctxd clone`;
  }
  return /^name\s*=\s*"ctxd-daemon"/m.test(text) ? undefined : `${source} is not a ctxd clone (its pyproject.toml names another project)`;
}

/** The venv's interpreter. */
export function venvPython(venv: string): string {
  return process.platform === 'win32' ? path.join(venv, 'Scripts', 'python.exe') : path.join(venv, 'bin', 'python');
}

export interface InstallStep {
  /** What the step does, in words ("Creating a Python environment"). */
  title: string;
  command: string;
  args: string[];
}

export interface InstallPlan {
  venv: string;
  steps: InstallStep[];
  /** The value for `ctxd.daemon.command` once the steps succeeded. */
  daemonCommand: string[];
}

/**
 * Whether the venv can be installed into: `none` (make it), `ok`, or `broken` (an interpreter but
 * no pip: what `python -m venv` leaves where ensurepip is missing, as on Debian without
 * python3-venv; pip would fail with "No module named pip" until it is made again).
 */
export function venvState(venv: string): 'none' | 'ok' | 'broken' {
  if (!fs.existsSync(venvPython(venv))) return fs.existsSync(venv) ? 'broken' : 'none';
  const libs = process.platform === 'win32' ? [path.join(venv, 'Lib')] : [path.join(venv, 'lib'), path.join(venv, 'lib64')];
  for (const lib of libs) {
    let entries: string[] = [];
    try {
      entries = fs.readdirSync(lib);
    } catch {
      continue;
    }
    const dirs = process.platform === 'win32' ? [lib] : entries.filter((e) => e.startsWith('python')).map((e) => path.join(lib, e));
    if (dirs.some((d) => fs.existsSync(path.join(d, 'site-packages', 'pip', '__init__.py')))) return 'ok';
  }
  return 'broken';
}

/** The steps that install `source` into `<storage>/venv` with `basePython` (3.11 or later); a broken venv is made again. */
export function installPlan(storage: string, basePython: string, source: string): InstallPlan {
  const venv = path.join(storage, 'venv');
  const python = venvPython(venv);
  const steps: InstallStep[] = [];
  const state = venvState(venv);
  if (state === 'none') steps.push({ title: 'Creating a Python environment', command: basePython, args: ['-m', 'venv', venv] });
  if (state === 'broken') steps.push({ title: 'Making the broken Python environment again', command: basePython, args: ['-m', 'venv', '--clear', venv] });
  steps.push({ title: 'Installing ctxd with pip', command: python, args: ['-m', 'pip', 'install', '--upgrade', '--disable-pip-version-check', source] });
  steps.push({ title: 'Checking that ctxd runs', command: python, args: ['-m', 'ctxd', '--version'] });
  return { venv, steps, daemonCommand: [python, '-m', 'ctxd'] };
}

export type InstallResult = { ok: true; daemonCommand: string[]; version: string } | { ok: false; step: string; detail: string };

/**
 * The line of pip's (or Python's) output that says what went wrong. Debian's Python without
 * python3-venv ends with "Failing command: …" and names the package to install a few lines up:
 * that package is the message.
 */
export function failureLine(output: string): string {
  const apt = /\bapt(?:-get)? install (python3[\w.]*-venv)\b/.exec(output);
  if (apt) {
    return `this Python cannot make environments (ensurepip is missing): install Debian's ${apt[1]} package (sudo apt install ${apt[1]}), then run ctxd: Install Daemon again`;
  }
  const lines = output.split(/\r?\n/).map((l) => l.trim()).filter(Boolean);
  const error = [...lines].reverse().find((l) => /^(ERROR|error|\w*Error)\b|No module named|not found/i.test(l));
  return (error ?? lines[lines.length - 1] ?? 'no output').replace(/^ERROR:\s*/, '');
}

/**
 * Runs the plan's steps in turn, each from a neutral folder (a `ctxd` folder in the current one
 * would shadow the package), every output line going to `log`. Stops at the first failure.
 */
export async function runInstall(plan: InstallPlan, log: (line: string) => void): Promise<InstallResult> {
  const cwd = fs.mkdtempSync(path.join(os.tmpdir(), 'ctxd-install-'));
  let version = '';
  try {
    for (const step of plan.steps) {
      log(`${step.title}: ${[step.command, ...step.args].join(' ')}`);
      const { code, output } = await run(step.command, step.args, cwd, log);
      if (code !== 0) return { ok: false, step: step.title, detail: failureLine(output) };
      version = output.trim().split(/\r?\n/).pop() ?? '';
    }
  } finally {
    fs.rmSync(cwd, { recursive: true, force: true });
  }
  return { ok: true, daemonCommand: plan.daemonCommand, version };
}

function run(command: string, args: string[], cwd: string, log: (line: string) => void): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve) => {
    let output = '';
    const env = pythonSafeEnv({ ...process.env, PIP_NO_INPUT: '1' });
    delete env.PYTHONPATH; // the venv must run ctxd on its own, not through a development checkout
    const child = spawn(command, args, { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    const take = (d: Buffer) => {
      const text = d.toString();
      output += text;
      for (const line of text.split(/\r?\n/)) if (line.trim()) log(line);
    };
    child.stdout.on('data', take);
    child.stderr.on('data', take);
    child.on('error', (e) => resolve({ code: -1, output: `${command}: ${e.message}` }));
    child.on('close', (code) => resolve({ code, output }));
  });
}

/** The one sentence a failed install shows (no Markdown: notifications show it literally). */
export function installFailedMessage(r: Extract<InstallResult, { ok: false }>): string {
  return `Installing ctxd failed (${r.step.toLowerCase()}): ${r.detail}. The "ctxd" output has the whole log.`;
}
