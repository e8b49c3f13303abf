/**
 * Install and Set path, driven through a scripted Ui against real processes: a real venv, a real
 * pip, the real daemon's --version. Nothing here touches the system Python's packages.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, test } from 'node:test';
import type { PickItem, Severity, Ui } from '../src/ui';
import { failureLine, installPlan, sourceProblem, venvPython } from '../src/install';
import { FAILURE_ACTIONS, INSTALL_CHOICES, PATH_CHOICES, type WaysOutHost, installFlow, setPathFlow } from '../src/waysOut';
import { PYTHON, REPO } from './daemon';

/** A Ui whose answers are given in order; it records every notification. */
class ScriptedUi implements Ui {
  notes: { severity: Severity; message: string; actions?: string[] }[] = [];
  constructor(private readonly answers: (string | undefined)[]) {}
  private next(): string | undefined {
    assert.ok(this.answers.length > 0, `an unexpected question; notes so far ${JSON.stringify(this.notes)}`);
    return this.answers.shift();
  }
  async pick<T>(items: PickItem<T>[]): Promise<T | undefined> {
    const label = this.next();
    if (label === undefined) return undefined;
    const item = items.find((i) => i.label === label);
    assert.ok(item, `no "${label}" among ${JSON.stringify(items.map((i) => i.label))}`);
    return item.value;
  }
  async input(): Promise<string | undefined> {
    return this.next();
  }
  async confirm(): Promise<boolean> {
    throw new Error('no confirmation expected');
  }
  progress<T>(_title: string, task: () => Promise<T>): Promise<T> {
    return task();
  }
  notify(severity: Severity, message: string): void {
    this.notes.push({ severity, message });
  }
  async ask(severity: Severity, message: string, actions: string[]): Promise<string | undefined> {
    this.notes.push({ severity, message, actions });
    return this.next();
  }
}

function host(ui: ScriptedUi, storage: string, paths: (string | undefined)[] = []) {
  const saved: string[][] = [];
  const opened: string[] = [];
  const log: string[] = [];
  let restarts = 0;
  const h: WaysOutHost = {
    ui,
    pickPath: async () => paths.shift(),
    setDaemonCommand: async (c) => void saved.push(c),
    currentCommand: () => saved[saved.length - 1] ?? [],
    storage,
    basePython: async () => PYTHON,
    log: (line) => void log.push(line),
    progress: (_title, task) => task(() => undefined),
    openInstructions: () => void opened.push('instructions'),
    openSettings: () => void opened.push('settings'),
    showLog: () => void opened.push('log'),
    restart: async () => void restarts++,
  };
  return { h, saved, opened, log, restarts: () => restarts };
}

let tmp: string;
before(() => {
  tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'ctxd-waysout-'));
});
after(() => fs.rmSync(tmp, { recursive: true, force: true }));

describe('Set path', () => {
  test('a command that cannot run ctxd is refused with why; a working one is saved', async () => {
    const env = process.env.PYTHONPATH;
    process.env.PYTHONPATH = REPO; // how the tests' python reaches the repository's ctxd
    try {
      const ui = new ScriptedUi([
        PATH_CHOICES.type,
        `"${PYTHON}" -I -S -m ctxd`, // this Python cannot import ctxd
        FAILURE_ACTIONS.again,
        PATH_CHOICES.type,
        `"${PYTHON}" -m ctxd`,
      ]);
      const { h, saved } = host(ui, tmp);
      assert.equal(await setPathFlow(h), true);
      assert.deepEqual(saved, [[PYTHON, '-m', 'ctxd']]);
      const [refused, found] = ui.notes;
      assert.equal(refused.severity, 'error');
      assert.match(refused.message, /-I -S -m ctxd cannot run ctxd: .*No module named ctxd\. The setting is unchanged\./);
      assert.deepEqual(refused.actions, [FAILURE_ACTIONS.again, FAILURE_ACTIONS.showLog]);
      assert.match(found.message, /^ctxd \d[^ ]* found; the daemon starts with /);
    } finally {
      if (env === undefined) delete process.env.PYTHONPATH;
      else process.env.PYTHONPATH = env;
    }
  });

  test('a picked program is checked too; "Open the setting" opens it', async () => {
    const ui = new ScriptedUi([PATH_CHOICES.pick, undefined]);
    const { h, saved } = host(ui, tmp, ['/nonexistent/bin/ctxd']);
    assert.equal(await setPathFlow(h), false);
    assert.deepEqual(saved, []);
    assert.match(ui.notes[0].message, /^\/nonexistent\/bin\/ctxd cannot run ctxd: \/nonexistent\/bin\/ctxd: not found\./);
    const again = new ScriptedUi([PATH_CHOICES.settings]);
    const other = host(again, tmp);
    await setPathFlow(other.h);
    assert.deepEqual(other.opened, ['settings']);
  });
});

describe('Install', () => {
  test('only a ctxd clone or a ctxd wheel is taken', () => {
    assert.equal(sourceProblem(REPO, 'folder'), undefined);
    assert.match(sourceProblem(tmp, 'folder') ?? '', /has no pyproject.toml: choose the folder of a ctxd clone/);
    assert.match(sourceProblem(path.join(tmp, 'numpy-2.0-py3-none-any.whl'), 'wheel') ?? '', /is not a ctxd wheel/);
    const plan = installPlan(path.join(tmp, 'storage'), '/usr/bin/python3', REPO);
    assert.deepEqual(plan.steps.map((s) => [s.command, ...s.args].join(' ')), [
      `/usr/bin/python3 -m venv ${path.join(tmp, 'storage', 'venv')}`,
      `${venvPython(plan.venv)} -m pip install --upgrade --disable-pip-version-check ${REPO}`,
      `${venvPython(plan.venv)} -m ctxd --version`,
    ]);
    assert.deepEqual(plan.daemonCommand, [venvPython(plan.venv), '-m', 'ctxd']);
  });

  test('the instructions are one pick away', async () => {
    const ui = new ScriptedUi([INSTALL_CHOICES.instructions]);
    const { h, opened } = host(ui, tmp);
    assert.equal(await installFlow(h), false);
    assert.deepEqual(opened, ['instructions']);
  });

  test('a failing pip says which step failed and pip\'s own reason; the setting is unchanged', async () => {
    // A "clone" whose build backend does not exist: a real venv, a real pip, failing offline.
    const broken = path.join(tmp, 'broken-clone');
    fs.mkdirSync(broken);
    fs.writeFileSync(
      path.join(broken, 'pyproject.toml'),
      '[build-system]\nrequires = []\nbuild-backend = "no_such_backend_ctxd"\n\n[project]\nname = "ctxd-daemon"\nversion = "0"\n',
    );
    const ui = new ScriptedUi([INSTALL_CHOICES.folder, FAILURE_ACTIONS.showLog]);
    const { h, saved, opened, log } = host(ui, path.join(tmp, 'storage-broken'), [broken]);
    assert.equal(await installFlow(h), false);
    assert.deepEqual(saved, []);
    const failed = ui.notes.find((n) => n.severity === 'error');
    assert.ok(failed, JSON.stringify(ui.notes));
    assert.match(failed.message, /^Installing ctxd failed \(installing ctxd with pip\): .*no_such_backend_ctxd/);
    assert.doesNotMatch(failed.message, /see the terminal|`/);
    assert.deepEqual(failed.actions, [FAILURE_ACTIONS.showLog, FAILURE_ACTIONS.instructions]);
    assert.deepEqual(opened, ['log']);
    assert.ok(fs.existsSync(venvPython(path.join(tmp, 'storage-broken', 'venv'))), 'the venv was made in the storage folder');
    assert.ok(log.some((l) => l.includes('no_such_backend_ctxd')), 'pip\'s output is in the log');
  });

  // What Debian's python3.11 says without python3-venv (ensurepip missing): the venv's python is
  // made, pip is not, and the hint is a few lines above "Failing command". This base Python says
  // it word for word and leaves the same half-made venv.
  const DEBIAN_ENSUREPIP = [
    'The virtual environment was not created successfully because ensurepip is not',
    'available.  On Debian/Ubuntu systems, you need to install the python3-venv',
    'package using the following command.',
    '',
    '    apt install python3.11-venv',
    '',
    'You may need to use sudo with that command.  After installing the python3-venv',
    'package, recreate your virtual environment.',
    '',
  ];

  test('Debian without python3-venv: the message says which package to install, not only "Failing command"', async () => {
    const storage = path.join(tmp, 'storage-debian');
    const fake = path.join(tmp, 'debian-python3');
    const venv = path.join(storage, 'venv');
    fs.writeFileSync(
      fake,
      `#!/bin/sh\n"${PYTHON}" -m venv --without-pip "$3" >/dev/null 2>&1\ncat <<'EOF'\n${DEBIAN_ENSUREPIP.join('\n')}Failing command: $3/bin/python3.11\nEOF\nexit 1\n`,
      { mode: 0o755 },
    );
    const ui = new ScriptedUi([INSTALL_CHOICES.folder, undefined]);
    const { h, saved } = host(ui, storage, [REPO]);
    h.basePython = async () => fake;
    assert.equal(await installFlow(h), false);
    assert.deepEqual(saved, []);
    const failed = ui.notes.find((n) => n.severity === 'error')!;
    assert.match(failed.message, /^Installing ctxd failed \(creating a python environment\): this Python cannot make environments \(ensurepip is missing\): install Debian's python3\.11-venv package \(sudo apt install python3\.11-venv\), then run ctxd: Install Daemon again\./);
    assert.doesNotMatch(failed.message, /Failing command/);
    // The half-made venv (a python, no pip) is made again on the next try, not reused.
    assert.ok(fs.existsSync(venvPython(venv)));
    assert.equal(installPlan(storage, PYTHON, REPO).steps[0].title, 'Making the broken Python environment again');
    assert.deepEqual(installPlan(storage, PYTHON, REPO).steps[0].args, ['-m', 'venv', '--clear', venv]);
  });

  test('a retry after the Debian failure rebuilds the venv and gets past "No module named pip"', { timeout: 300_000 }, async () => {
    // Here the base Python has ensurepip (python3-venv installed since): the broken venv is cleared and made whole.
    const storage = path.join(tmp, 'storage-debian');
    const wheelless = path.join(tmp, 'broken-clone-2');
    fs.mkdirSync(wheelless, { recursive: true });
    fs.writeFileSync(
      path.join(wheelless, 'pyproject.toml'),
      '[build-system]\nrequires = []\nbuild-backend = "no_such_backend_ctxd"\n\n[project]\nname = "ctxd-daemon"\nversion = "0"\n',
    );
    const ui = new ScriptedUi([INSTALL_CHOICES.folder, undefined]);
    const { h } = host(ui, storage, [wheelless]);
    assert.equal(await installFlow(h), false);
    const failed = ui.notes.find((n) => n.severity === 'error')!;
    // pip ran (the build backend is what fails now), so the venv has pip again.
    assert.match(failed.message, /^Installing ctxd failed \(installing ctxd with pip\): .*no_such_backend_ctxd/);
    assert.doesNotMatch(failed.message, /No module named pip/);
    assert.equal(installPlan(storage, PYTHON, REPO).steps[0].title, 'Installing ctxd with pip');
  });

  test('pip\'s reason is the line that says what went wrong', () => {
    assert.equal(
      failureLine('Processing ./x\n  error: subprocess-exited-with-error\nnote: This error originates from a subprocess\nERROR: Could not find a version that satisfies the requirement foo\n'),
      'Could not find a version that satisfies the requirement foo',
    );
  });

  // The whole way: a venv in the storage folder, ctxd from this clone with its dependencies (pip
  // reaches PyPI for them), the setting pointing at the venv, and the daemon answering from it.
  test('from a clone: the venv runs ctxd and the setting names it', { timeout: 600_000 }, async () => {
    const ui = new ScriptedUi([INSTALL_CHOICES.folder]);
    const storage = path.join(tmp, 'storage-ok');
    const { h, saved, log } = host(ui, storage, [REPO]);
    const ok = await installFlow(h);
    assert.equal(ok, true, `${JSON.stringify(ui.notes)}\n${log.slice(-20).join('\n')}`);
    const python = venvPython(path.join(storage, 'venv'));
    assert.deepEqual(saved, [[python, '-m', 'ctxd']]);
    assert.match(ui.notes[ui.notes.length - 1].message, new RegExp(`^ctxd \\d\\S* is installed in ${storage.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}`));
  });
});
