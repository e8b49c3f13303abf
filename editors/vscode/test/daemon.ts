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
import { CtxdService } from '../src/api';
import type { Rpc } from '../src/protocol';

/** The repository root (this file runs from editors/vscode/out/test/). */
export const REPO = path.resolve(__dirname, '..', '..', '..', '..');
export const PYTHON = process.env.CTXD_TEST_PYTHON ?? (process.platform === 'win32' ? 'python' : 'python3');

/**
 * The daemon's environment: its state, its config and the agents' homes (Claude Code's and
 * Codex's sessions, their hook settings) all in the test's temporary folder, never the user's.
 */
export function daemonEnv(stateDir: string): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('CTXD_')) env[k] = v;
  env.XDG_STATE_HOME = stateDir;
  env.XDG_CONFIG_HOME = path.join(stateDir, 'config');
  env.HOME = path.join(stateDir, 'home');
  env.CLAUDE_CONFIG_DIR = path.join(stateDir, 'home', '.claude');
  env.CODEX_HOME = path.join(stateDir, 'home', '.codex');
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
  /** The daemon's environment (its state dir, and the agents' homes under it). */
  env: NodeJS.ProcessEnv;
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
  /** Agent sessions to write before the daemon starts (`claudeSession`, `codexSession`). */
  sessions?: ((folder: string, env: NodeJS.ProcessEnv) => void)[];
}

/** A file the real agents wrote (tests/fixtures/agents), its workspace path made `folder`. */
function fixture(name: string, folder: string): string {
  return fs.readFileSync(path.join(REPO, 'tests', 'fixtures', 'agents', name), 'utf8').replaceAll('/home/user/app', folder);
}

/**
 * The Claude Code 2.1.332 session of tests/fixtures/agents (two turns: Write, Edit, Bash, Read
 * and Agent tool uses), where Claude Code keeps it for `folder`. Its thread: `claude:` + this id.
 */
export const CLAUDE_SESSION = '2009bcc5-85ba-431c-b4e2-481f4e482c80';
export const CLAUDE_TITLE = 'Add hello.txt and docs, drop the notes';
export function claudeSession(folder: string, env: NodeJS.ProcessEnv): void {
  const project = path.join(env.CLAUDE_CONFIG_DIR!, 'projects', folder.replace(/[^A-Za-z0-9]/g, '-'));
  fs.mkdirSync(project, { recursive: true });
  fs.writeFileSync(path.join(project, `${CLAUDE_SESSION}.jsonl`), fixture('claude-2.1.332.jsonl', folder));
}

/** The Codex 0.171.0 session of tests/fixtures/agents, where Codex keeps it. Its thread: `codex:` + its id. */
export function codexSession(folder: string, env: NodeJS.ProcessEnv): string {
  const text = fixture('codex-0.171.0.jsonl', folder);
  const meta = JSON.parse(text.split('\n')[0]) as { payload: { id: string; timestamp: string } };
  const day = meta.payload.timestamp.slice(0, 10).split('-');
  const dir = path.join(env.CODEX_HOME!, 'sessions', ...day);
  fs.mkdirSync(dir, { recursive: true });
  fs.writeFileSync(path.join(dir, `rollout-${meta.payload.timestamp.slice(0, 19).replace(/:/g, '-')}-${meta.payload.id}.jsonl`), text);
  return meta.payload.id;
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
  const env = daemonEnv(stateDir);
  fs.mkdirSync(env.HOME!, { recursive: true });
  for (const write of opts.sessions ?? []) write(folder, env);
  if (opts.git) {
    fs.writeFileSync(path.join(folder, 'README.md'), 'hello\n');
    git(folder, 'init', '-q', '-b', 'main');
    git(folder, '-c', 'user.name=t', '-c', 'user.email=t@example.invalid', 'add', '-A');
    git(folder, '-c', 'user.name=t', '-c', 'user.email=t@example.invalid', 'commit', '-q', '-m', 'init');
  }
  const proc = spawn(PYTHON, ['-m', 'ctxd', '--stdio'], { cwd: folder, env, stdio: 'pipe' });
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
    env,
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

/** A service on `d`, attached as the extension attaches one once the daemon answered `initialize`. */
export function attachedService(d: Daemon): CtxdService {
  const service = new CtxdService(async () => d.rpc, () => d.uri);
  service.attach(d.rpc, d.initializeResult.capabilities.experimental.ctxd.methods);
  return service;
}
