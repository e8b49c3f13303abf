/**
 * The extension's settings: read once into a typed, fully defaulted object, turned into the
 * daemon's command line and `initializationOptions.ctxd`. Pure; the `vscode` configuration is
 * passed in as a reader.
 */
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';

export type NotificationLevel = 'all' | 'warnings' | 'errors' | 'none';

export interface ExtensionSettings {
  /** Program and arguments; empty means "find it" (see resolveDaemonCommand). */
  daemonCommand: string[];
  model: string;
  contextWindow: number | null;
  autoCompactRatio: number | null;
  llmBaseUrl: string;
  llmModel: string;
  notifications: NotificationLevel;
}

/** What `vscode.workspace.getConfiguration('ctxd')` offers, reduced to what is read here. */
export interface ConfigReader {
  get<T>(key: string): T | undefined;
}

export const SECTION = 'ctxd';

/** Settings whose change restarts the daemon (they are passed at start-up). */
export const RESTART_SETTINGS: readonly string[] = [
  'ctxd.daemon.command',
  'ctxd.model',
  'ctxd.contextWindow',
  'ctxd.autoCompactRatio',
  'ctxd.llm.baseUrl',
  'ctxd.llm.model',
];

const LEVELS: readonly NotificationLevel[] = ['all', 'warnings', 'errors', 'none'];

function str(v: unknown): string {
  return typeof v === 'string' ? v.trim() : '';
}

function positive(v: unknown): number | null {
  return typeof v === 'number' && Number.isFinite(v) && v > 0 ? v : null;
}

export function readSettings(cfg: ConfigReader): ExtensionSettings {
  const command = cfg.get<unknown>('daemon.command');
  const notifications = cfg.get<unknown>('notifications');
  const ratio = positive(cfg.get<unknown>('autoCompactRatio'));
  const window = positive(cfg.get<unknown>('contextWindow'));
  return {
    daemonCommand: Array.isArray(command) ? command.filter((s): s is string => typeof s === 'string' && s !== '') : [],
    model: str(cfg.get('model')),
    contextWindow: window === null ? null : Math.floor(window),
    autoCompactRatio: ratio !== null && ratio <= 1 ? ratio : null,
    llmBaseUrl: str(cfg.get('llm.baseUrl')),
    llmModel: str(cfg.get('llm.model')),
    notifications: LEVELS.includes(notifications as NotificationLevel) ? (notifications as NotificationLevel) : 'warnings',
  };
}

/**
 * `initializationOptions` for the daemon: only what the user set, in the protocol's camelCase, and
 * VS Code's workspace-trust verdict (the daemon ignores a repository's risky settings without it).
 */
export function initializationOptions(s: ExtensionSettings, trusted = false): { ctxd: Record<string, unknown> } {
  const ctxd: Record<string, unknown> = { trusted };
  if (s.model) ctxd.model = s.model;
  if (s.contextWindow !== null) ctxd.contextWindow = s.contextWindow;
  if (s.autoCompactRatio !== null) ctxd.autoCompactRatio = s.autoCompactRatio;
  const llm: Record<string, string> = {};
  if (s.llmBaseUrl) llm.baseUrl = s.llmBaseUrl;
  if (s.llmModel) llm.model = s.llmModel;
  if (Object.keys(llm).length > 0) ctxd.llm = llm;
  return { ctxd };
}

export interface DaemonCommand {
  command: string;
  args: string[];
}

/** Finds an executable on a PATH string, as a shell would. */
export function findOnPath(
  name: string,
  pathEnv: string | undefined,
  isExecutable: (file: string) => boolean = defaultIsExecutable,
): string | undefined {
  for (const dir of (pathEnv ?? '').split(path.delimiter)) {
    if (!dir) continue;
    const candidates = process.platform === 'win32' ? [`${name}.exe`, `${name}.cmd`, name] : [name];
    for (const c of candidates) {
      const file = path.join(dir, c);
      if (isExecutable(file)) return file;
    }
  }
  return undefined;
}

function defaultIsExecutable(file: string): boolean {
  try {
    fs.accessSync(file, fs.constants.X_OK);
    return fs.statSync(file).isFile();
  } catch {
    return false;
  }
}

/**
 * The daemon's command line (the language client appends `--stdio`): the setting if given,
 * else `ctxd` on PATH, else `python -m ctxd` with the interpreter the user chose, else `python3`.
 */
export function resolveDaemonCommand(
  s: ExtensionSettings,
  env: { ctxdOnPath: string | undefined; interpreter: string[] | undefined; home?: string },
): DaemonCommand {
  if (s.daemonCommand.length > 0) {
    const [command, ...args] = s.daemonCommand.map((part) => expandHome(part, env.home ?? os.homedir()));
    return { command, args };
  }
  if (env.ctxdOnPath) return { command: env.ctxdOnPath, args: [] };
  const python = env.interpreter && env.interpreter.length > 0 ? env.interpreter : [defaultPython()];
  return { command: python[0], args: [...python.slice(1), '-m', 'ctxd'] };
}

/** `~` or `~/…` as a shell reads it (no shell runs the command, so nobody else would). */
export function expandHome(part: string, home: string): string {
  if (part === '~') return home;
  if (part.startsWith('~/') || (process.platform === 'win32' && part.startsWith('~\\'))) return path.join(home, part.slice(2));
  return part;
}

/**
 * A command line typed by a person, as the setting's array: words split on spaces, with
 * "double" or 'single' quotes keeping spaces inside one word.
 */
export function splitCommandLine(line: string): string[] {
  const words: string[] = [];
  const re = /"([^"]*)"|'([^']*)'|(\S+)/g;
  for (let m = re.exec(line); m; m = re.exec(line)) words.push(m[1] ?? m[2] ?? m[3]);
  return words;
}

/** The setting for a program the user picked: a Python runs `-m ctxd`, anything else is ctxd itself. */
export function commandForProgram(file: string): string[] {
  return /^python[\d.]*(\.exe)?$/i.test(path.basename(file)) ? [file, '-m', 'ctxd'] : [file];
}

function defaultPython(): string {
  return process.platform === 'win32' ? 'python' : 'python3';
}

/** Whether a message of this severity is shown under the user's notification level. */
export function shouldNotify(severity: 'info' | 'warning' | 'error', level: NotificationLevel): boolean {
  switch (level) {
    case 'all':
      return true;
    case 'warnings':
      return severity !== 'info';
    case 'errors':
      return severity === 'error';
    case 'none':
      return false;
  }
}
