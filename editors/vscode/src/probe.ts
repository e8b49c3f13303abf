/**
 * Checks, before the language client starts, that the daemon command can run at all, so a missing
 * daemon becomes one helpful notification (Install / Set path / Show log) instead of the client's
 * raw "couldn't create connection" error. Uses node only; tested with real processes.
 */
import { spawn } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import type { DaemonCommand } from './settings';

/**
 * An empty folder to run the probe in: `python -m ctxd` puts its current folder first on
 * `sys.path`, so a `ctxd` folder in the extension host's folder would answer instead of the daemon.
 */
function neutralFolder(): string {
  const dir = path.join(os.tmpdir(), `ctxd-probe-${process.pid}`);
  fs.mkdirSync(dir, { recursive: true });
  return dir;
}

/**
 * The environment of every process that runs ctxd (the daemon, its probe, `ctxd hooks`, the install): in the
 * workspace, `python -m ctxd` would otherwise put that folder first on `sys.path`, and a `ctxd`
 * folder of the project's would run instead of ctxd. PYTHONSAFEPATH (Python 3.11+) keeps it off.
 */
export function pythonSafeEnv(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return { ...env, PYTHONSAFEPATH: '1' };
}

export type ProbeResult =
  | { ok: true; version: string }
  | { ok: false; notInstalled: boolean; detail: string };

/** Runs `<command> <args> --version`; a missing program or a missing Python module is "not installed". */
export function probeDaemon(command: DaemonCommand, timeoutMs = 20_000, env: NodeJS.ProcessEnv = process.env): Promise<ProbeResult> {
  return new Promise((resolve) => {
    let out = '';
    let err = '';
    let settled = false;
    const done = (r: ProbeResult) => {
      if (!settled) {
        settled = true;
        clearTimeout(timer);
        resolve(r);
      }
    };
    const child = spawn(command.command, [...command.args, '--version'], {
      cwd: neutralFolder(),
      env: pythonSafeEnv(env),
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      done({ ok: false, notInstalled: false, detail: `\`${describe(command)} --version\` did not answer within ${timeoutMs / 1000} s` });
    }, timeoutMs);
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    child.on('error', (e: NodeJS.ErrnoException) =>
      done({ ok: false, notInstalled: e.code === 'ENOENT', detail: `${command.command}: ${e.code === 'ENOENT' ? 'not found' : e.message}` }),
    );
    child.on('close', (code) => {
      if (code === 0) return done({ ok: true, version: out.trim() });
      const last = err.trim().split('\n').pop() ?? '';
      // No ctxd, or a ctxd without its dependencies (`No module named 'lsprotocol'`): installing fixes both.
      done({ ok: false, notInstalled: /No module named /.test(err), detail: last || `exit code ${code}` });
    });
  });
}

export function describe(command: DaemonCommand): string {
  return [command.command, ...command.args].join(' ');
}

/** The interpreter a `python -m ctxd` command runs, which is where Install puts the daemon. */
export function interpreterOf(command: DaemonCommand): string | undefined {
  const m = command.args.indexOf('-m');
  return m >= 0 && command.args[m + 1] === 'ctxd' ? command.command : undefined;
}

export function notInstalledMessage(command: DaemonCommand): string {
  const python = interpreterOf(command);
  const where = python ? `is not installed in ${python}` : `was not found (${command.command})`;
  return `The ctxd daemon ${where}. Install puts it in a Python environment of the extension's own, from a ctxd clone or wheel; or set the path to a ctxd you installed.`;
}
