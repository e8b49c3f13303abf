/**
 * Checks, before the language client starts, that the daemon command can run at all, so a missing
 * daemon becomes one helpful notification (Install / Set path / Show log) instead of the client's
 * raw "couldn't create connection" error. Uses node only; tested with real processes.
 */
import { spawn } from 'node:child_process';
import type { DaemonCommand } from './settings';

/** The daemon's name on PyPI (the import package and the command are `ctxd`). */
export const DISTRIBUTION = 'ctxd-daemon';

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
    const child = spawn(command.command, [...command.args, '--version'], { env, stdio: ['ignore', 'pipe', 'pipe'] });
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

/** The install command line for a Python interpreter (quoted for a POSIX shell or PowerShell). */
export function installCommandLine(python: string): string {
  const quoted = /^[\w./:\\-]+$/.test(python) ? python : `"${python.replace(/"/g, '\\"')}"`;
  return `${quoted} -m pip install --upgrade ${DISTRIBUTION}`;
}

export function notInstalledMessage(command: DaemonCommand): string {
  const python = interpreterOf(command);
  return python
    ? `The ctxd daemon is not installed in ${python}. Install it with \`pip install ${DISTRIBUTION}\`, or set the path to ctxd.`
    : `The ctxd daemon was not found (${command.command}). Install it with \`pip install ${DISTRIBUTION}\`, or set the path to ctxd.`;
}
