/** The crash-storm policy and the daemon probe (real processes: a missing program, a missing module). */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { CrashPolicy, crashStormMessage } from '../src/crashes';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { spawnSync } from 'node:child_process';
import { interpreterOf, notInstalledMessage, probeDaemon, pythonSafeEnv } from '../src/probe';
import { PYTHON } from './daemon';

describe('crash policy', () => {
  test('four crashes within three minutes restart, the fifth stops with its count', () => {
    const p = new CrashPolicy(4, 180_000);
    for (let i = 0; i < 4; i++) assert.deepEqual(p.crashed(i * 1000), { restart: true });
    assert.deepEqual(p.crashed(5000), { restart: false, crashes: 5 });
    assert.equal(crashStormMessage(5), 'ctxd stopped after 5 crashes in 3 minutes.');
  });

  test('crashes spread over more than the window keep restarting', () => {
    const p = new CrashPolicy(2, 1000);
    assert.deepEqual(p.crashed(0), { restart: true });
    assert.deepEqual(p.crashed(600), { restart: true });
    assert.deepEqual(p.crashed(1200), { restart: true });
    assert.deepEqual(p.crashed(1300), { restart: false, crashes: 3 });
  });
});

describe('daemon probe', () => {
  test('a program that does not exist is "not installed"', async () => {
    const r = await probeDaemon({ command: '/nonexistent/ctxd-probe-test', args: [] });
    assert.deepEqual(r, { ok: false, notInstalled: true, detail: '/nonexistent/ctxd-probe-test: not found' });
  });

  test('a Python without the ctxd module is "not installed"', async () => {
    // -I ignores PYTHONPATH and the working folder, -S every site-packages: no ctxd to import.
    const r = await probeDaemon({ command: PYTHON, args: ['-I', '-S', '-m', 'ctxd'] });
    assert.equal(r.ok, false);
    assert.equal(r.ok === false && r.notInstalled, true, JSON.stringify(r));
    assert.match(r.ok === false ? r.detail : '', /No module named ctxd/);
  });

  test('another failure is not "not installed" and keeps the last stderr line', async () => {
    const r = await probeDaemon({ command: PYTHON, args: ['-c', "import sys; sys.stderr.write('boom: bad config\\n'); sys.exit(3)"] });
    assert.deepEqual(r, { ok: false, notInstalled: false, detail: 'boom: bad config' });
  });

  test('the real daemon answers --version', async () => {
    const r = await probeDaemon({ command: PYTHON, args: ['-m', 'ctxd'] }, 30_000, {
      ...process.env,
      PYTHONPATH: require('node:path').resolve(__dirname, '..', '..', '..', '..'),
    });
    assert.equal(r.ok, true, JSON.stringify(r));
  });

  test('Install starts from the interpreter of a `python -m ctxd` command; the message names no unpublished package', () => {
    assert.equal(interpreterOf({ command: '/venv/bin/python', args: ['-m', 'ctxd'] }), '/venv/bin/python');
    assert.equal(interpreterOf({ command: '/usr/local/bin/ctxd', args: [] }), undefined);
    const message = notInstalledMessage({ command: '/venv/bin/python', args: ['-m', 'ctxd'] });
    assert.match(message, /not installed in \/venv\/bin\/python\. Install puts it in a Python environment of the extension's own, from a ctxd clone or wheel/);
    assert.doesNotMatch(message, /ctxd-daemon|pip install|`/);
  });

  test('a `ctxd` folder in the current folder does not answer for the daemon', async () => {
    // The extension host's folder may hold a folder named ctxd (a project, a checkout): `python -m
    // ctxd` there would run it instead of the installed daemon.
    const here = fs.mkdtempSync(path.join(os.tmpdir(), 'ctxd-shadow-'));
    fs.mkdirSync(path.join(here, 'ctxd'));
    fs.writeFileSync(path.join(here, 'ctxd', '__init__.py'), '');
    fs.writeFileSync(path.join(here, 'ctxd', '__main__.py'), 'print("shadow 9.9")\n');
    const before = process.cwd();
    process.chdir(here);
    try {
      const r = await probeDaemon({ command: PYTHON, args: ['-m', 'ctxd'] }, 30_000, {
        ...process.env,
        PYTHONPATH: path.resolve(__dirname, '..', '..', '..', '..'),
      });
      assert.equal(r.ok, true, JSON.stringify(r));
      assert.doesNotMatch(r.ok ? r.version : '', /shadow/);
      assert.match(r.ok ? r.version : '', /^ctxd \d/);
    } finally {
      process.chdir(before);
      fs.rmSync(here, { recursive: true, force: true });
    }
  });

  test("the daemon's environment keeps a project's `ctxd` folder from answering in the workspace", () => {
    // The language client runs the daemon in the first workspace folder (client.ts).
    const here = fs.mkdtempSync(path.join(os.tmpdir(), 'ctxd-shadow-'));
    fs.mkdirSync(path.join(here, 'ctxd'));
    fs.writeFileSync(path.join(here, 'ctxd', '__init__.py'), '');
    fs.writeFileSync(path.join(here, 'ctxd', '__main__.py'), 'print("shadow 9.9")\n');
    const env: NodeJS.ProcessEnv = { ...process.env, PYTHONPATH: path.resolve(__dirname, '..', '..', '..', '..') };
    delete env.PYTHONSAFEPATH;
    const version = (e: NodeJS.ProcessEnv) => spawnSync(PYTHON, ['-m', 'ctxd', '--version'], { cwd: here, env: e, encoding: 'utf8' }).stdout.trim();
    try {
      assert.equal(version(env), 'shadow 9.9'); // what it guards against
      assert.match(version(pythonSafeEnv(env)), /^ctxd \d/);
    } finally {
      fs.rmSync(here, { recursive: true, force: true });
    }
  });
});
