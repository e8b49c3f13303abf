/**
 * The two ways out of "ctxd is not installed": Install (a venv of the extension's own, filled from
 * a clone or a wheel the user picks) and Set path (a program picked or typed, checked before it
 * is saved). Flows over small host functions, so the tests drive them with a scripted Ui and real
 * processes; vscodeapi.ts supplies the real dialogs and settings.
 */
import type { Ui } from './ui';
import { type SourceKind, installFailedMessage, installPlan, runInstall, sourceProblem } from './install';
import { describe, probeDaemon } from './probe';
import { commandForProgram, resolveDaemonCommand, splitCommandLine } from './settings';

export interface WaysOutHost {
  ui: Ui;
  /** A file or folder from the open dialog. */
  pickPath(options: { title: string; folders: boolean; filters?: Record<string, string[]> }): Promise<string | undefined>;
  /** Saves `ctxd.daemon.command` (the extension restarts the daemon when it changes). */
  setDaemonCommand(command: string[]): Promise<void>;
  currentCommand(): string[];
  /** The extension's own folder (the venv goes in it). */
  storage: string;
  /** The Python that creates the venv. */
  basePython(): Promise<string>;
  log(line: string): void;
  progress<T>(title: string, task: (report: (line: string) => void) => Promise<T>): Promise<T>;
  openInstructions(): void;
  openSettings(): void;
  showLog(): void;
  /** Starts the daemon again (after an install that left the setting as it was). */
  restart(): Promise<void>;
}

export const INSTALL_CHOICES = {
  folder: 'From a folder: a clone of the ctxd repository',
  wheel: 'From a wheel file (ctxd_daemon-….whl)',
  instructions: 'Open the install instructions',
} as const;

export const PATH_CHOICES = {
  pick: 'Choose the ctxd program or a Python that has ctxd…',
  type: 'Type the command…',
  settings: 'Open the setting',
} as const;

export const FAILURE_ACTIONS = { showLog: 'Show log', instructions: 'Open instructions', again: 'Set path' } as const;

/** Installs ctxd into `<storage>/venv` and points the setting at it; true when it runs. */
export async function installFlow(h: WaysOutHost): Promise<boolean> {
  const choice = await h.ui.pick(
    [
      { label: INSTALL_CHOICES.folder, detail: 'git clone the ctxd repository first, then choose its folder', value: 'folder' as const },
      { label: INSTALL_CHOICES.wheel, detail: 'built with "python -m build" or "pip wheel" in a clone', value: 'wheel' as const },
      { label: INSTALL_CHOICES.instructions, detail: 'pipx, a venv of your own, or a clone', value: 'instructions' as const },
    ],
    { title: 'ctxd: Install Daemon', placeHolder: "Install ctxd into a Python environment of the extension's own" },
  );
  if (!choice) return false;
  if (choice === 'instructions') {
    h.openInstructions();
    return false;
  }
  const kind: SourceKind = choice;
  const source = await h.pickPath(
    kind === 'folder'
      ? { title: 'The folder of your ctxd clone', folders: true }
      : { title: 'A ctxd wheel', folders: false, filters: { 'Python wheel': ['whl'] } },
  );
  if (!source) return false;
  const problem = sourceProblem(source, kind);
  if (problem) {
    h.ui.notify('error', `Cannot install from there: ${problem}.`);
    return false;
  }
  const plan = installPlan(h.storage, await h.basePython(), source);
  h.log(`installing ctxd from ${source} into ${plan.venv}`);
  const result = await h.progress('ctxd: installing the daemon', (report) =>
    runInstall(plan, (line) => {
      h.log(line);
      report(line);
    }),
  );
  if (!result.ok) {
    h.log(installFailedMessage(result));
    const next = await h.ui.ask('error', installFailedMessage(result), [FAILURE_ACTIONS.showLog, FAILURE_ACTIONS.instructions]);
    if (next === FAILURE_ACTIONS.showLog) h.showLog();
    if (next === FAILURE_ACTIONS.instructions) h.openInstructions();
    return false;
  }
  const unchanged = JSON.stringify(h.currentCommand()) === JSON.stringify(result.daemonCommand);
  await h.setDaemonCommand(result.daemonCommand);
  if (unchanged) await h.restart();
  h.ui.notify('info', `${result.version || 'ctxd'} is installed in ${plan.venv}; the daemon is starting.`);
  return true;
}

/** Asks for the daemon's command, checks that it runs ctxd, then saves it; true when saved. */
export async function setPathFlow(h: WaysOutHost): Promise<boolean> {
  for (;;) {
    const how = await h.ui.pick(
      [
        { label: PATH_CHOICES.pick, detail: 'a Python runs "-m ctxd"; any other program is ctxd itself', value: 'pick' as const },
        { label: PATH_CHOICES.type, detail: 'program and arguments, e.g. ~/.local/bin/ctxd or ~/venvs/ctxd/bin/python -m ctxd', value: 'type' as const },
        { label: PATH_CHOICES.settings, detail: 'ctxd.daemon.command', value: 'settings' as const },
      ],
      { title: 'ctxd: Set Daemon Path', placeHolder: 'How ctxd is started' },
    );
    if (!how) return false;
    if (how === 'settings') {
      h.openSettings();
      return false;
    }
    let command: string[] | undefined;
    if (how === 'pick') {
      const file = await h.pickPath({ title: 'The ctxd program, or a Python that has ctxd', folders: false });
      command = file ? commandForProgram(file) : undefined;
    } else {
      const line = await h.ui.input({
        title: 'ctxd: Set Daemon Path',
        prompt: 'The command that starts ctxd (ctxd adds --stdio); quote a path with spaces',
        placeHolder: '~/.local/bin/ctxd',
        value: h.currentCommand().map((w) => (/\s/.test(w) ? `"${w}"` : w)).join(' '),
      });
      command = line === undefined ? undefined : splitCommandLine(line);
    }
    if (!command || command.length === 0) return false;
    const resolved = resolveDaemonCommand(
      { daemonCommand: command, model: '', contextWindow: null, autoCompactRatio: null, llmBaseUrl: '', llmModel: '', notifications: 'warnings' },
      { ctxdOnPath: undefined, interpreter: undefined },
    );
    const probe = await probeDaemon(resolved);
    if (probe.ok) {
      await h.setDaemonCommand(command);
      h.ui.notify('info', `${probe.version || 'ctxd'} found; the daemon starts with ${describe(resolved)}.`);
      return true;
    }
    h.log(`${describe(resolved)} --version failed: ${probe.detail}`);
    const next = await h.ui.ask('error', `${describe(resolved)} cannot run ctxd: ${probe.detail}. The setting is unchanged.`, [
      FAILURE_ACTIONS.again,
      FAILURE_ACTIONS.showLog,
    ]);
    if (next === FAILURE_ACTIONS.showLog) h.showLog();
    if (next !== FAILURE_ACTIONS.again) return false;
  }
}
