/**
 * Starts the real ctxd daemon (`python -m ctxd --stdio`, as VS Code's client would) with its state in
 * a temporary folder, and speaks to it through vscode-jsonrpc, the library under
 * vscode-languageclient. A daemon that cannot start fails the tests that need it, with its stderr.
 */
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import {
  type MessageConnection,
  StreamMessageReader,
  StreamMessageWriter,
  createMessageConnection,
} from 'vscode-jsonrpc/node';
import type { Rpc } from '../src/protocol';

/** The repository root (this file runs from editors/vscode/out/test/). */
export const REPO = path.resolve(__dirname, '..', '..', '..', '..');
export const PYTHON = process.env.CTXD_TEST_PYTHON ?? (process.platform === 'win32' ? 'python' : 'python3');

function daemonEnv(stateDir: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('CTXD_')) env[k] = v;
  env.XDG_STATE_HOME = stateDir;
  env.XDG_CONFIG_HOME = path.join(stateDir, 'config');
  env.PYTHONPATH = [REPO, process.env.PYTHONPATH].filter(Boolean).join(path.delimiter);
  env.PYTHONUNBUFFERED = '1';
  return env;
}

let probed = false;

/** Throws, with the interpreter's own error, when `python -m ctxd` cannot run here. */
function requireDaemon(): void {
  if (probed) return;
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ctxd-probe-'));
  const r = spawnSync(PYTHON, ['-m', 'ctxd', '--version'], { env: daemonEnv(tmp), encoding: 'utf8', timeout: 30_000 });
  fs.rmSync(tmp, { recursive: true, force: true });
  if (r.status !== 0) {
    throw new Error(`\`${PYTHON} -m ctxd --version\` failed (set CTXD_TEST_PYTHON to the venv's python): ${(r.stderr || String(r.error)).trim()}`);
  }
  probed = true;
}

export interface Daemon {
  conn: MessageConnection;
  rpc: Rpc;
  proc: ChildProcess;
  /** The workspace folder on disk and its URI. */
  folder: string;
  uri: string;
  initializeResult: any;
  stderr(): string;
  stop(): Promise<void>;
}

export interface StartOptions {
  /** `initializationOptions.ctxd`. */
  options?: Record<string, unknown>;
  /** Make the workspace a git repository with one commit (for snapshots). */
  git?: boolean;
}

function git(cwd: string, ...args: string[]): void {
  const r = spawnSync('git', args, { cwd, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`git ${args.join(' ')}: ${r.stderr}`);
}

export async function startDaemon(opts: StartOptions = {}): Promise<Daemon> {
  requireDaemon();
  const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ctxd-vscode-'));
  const stateDir = path.join(tmp, 'state');
  const folder = path.join(tmp, 'ws');
  fs.mkdirSync(stateDir);
  fs.mkdirSync(folder);
  if (opts.git) {
    fs.writeFileSync(path.join(folder, 'README.md'), 'hello\n');
    git(folder, 'init', '-q', '-b', 'main');
    git(folder, '-c', 'user.name=t', '-c', 'user.email=t@example.invalid', 'add', '-A');
    git(folder, '-c', 'user.name=t', '-c', 'user.email=t@example.invalid', 'commit', '-q', '-m', 'init');
  }
  const proc = spawn(PYTHON, ['-m', 'ctxd', '--stdio'], { cwd: folder, env: daemonEnv(stateDir), stdio: 'pipe' });
  let err = '';
  proc.stderr!.on('data', (d: Buffer) => {
    err += d.toString();
  });
  const conn = createMessageConnection(new StreamMessageReader(proc.stdout!), new StreamMessageWriter(proc.stdin!));
  conn.listen();
  const uri = pathToFileURL(folder).href;
  const initializeResult = await conn.sendRequest('initialize', {
    processId: process.pid,
    rootUri: null,
    capabilities: {},
    workspaceFolders: [{ uri, name: 'ws' }],
    initializationOptions: { ctxd: opts.options ?? {} },
  });
  await conn.sendNotification('initialized', {});
  const rpc: Rpc = {
    sendRequest: <R>(method: string, params: unknown) => conn.sendRequest<R>(method, params),
    onNotification: (method, handler) => conn.onNotification(method, handler),
  };
  return {
    conn,
    rpc,
    proc,
    folder,
    uri,
    initializeResult,
    stderr: () => err,
    async stop() {
      const exited = new Promise<void>((resolve) => {
        if (proc.exitCode !== null) resolve();
        else proc.once('exit', () => resolve());
      });
      try {
        await Promise.race([conn.sendRequest('shutdown'), delay(5000)]);
        await conn.sendNotification('exit');
      } catch {
        // Already gone.
      }
      const timer = setTimeout(() => proc.kill('SIGKILL'), 5000);
      await exited;
      clearTimeout(timer);
      conn.dispose();
      fs.rmSync(tmp, { recursive: true, force: true });
    },
  };
}

export function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Resolves when `check` holds, re-checking on every event of `on`; rejects after `timeoutMs`. */
export function waitFor(check: () => boolean, subscribe: (wake: () => void) => { dispose(): void }, timeoutMs = 10_000, what = 'condition'): Promise<void> {
  return new Promise((resolve, reject) => {
    if (check()) return resolve();
    const timer = setTimeout(() => {
      sub.dispose();
      reject(new Error(`timed out waiting for ${what}`));
    }, timeoutMs);
    const sub = subscribe(() => {
      if (check()) {
        clearTimeout(timer);
        sub.dispose();
        resolve();
      }
    });
  });
}

export function userMessage(text: string): { type: string; role: string; content: { type: string; text: string }[] } {
  return { type: 'message', role: 'user', content: [{ type: 'input_text', text }] };
}

export function assistantMessage(text: string): { type: string; role: string; content: { type: string; text: string }[] } {
  return { type: 'message', role: 'assistant', content: [{ type: 'output_text', text }] };
}
