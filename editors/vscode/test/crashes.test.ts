/** The crash-storm policy and the daemon probe (real processes: a missing program, a missing module). */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { CrashPolicy, crashStormMessage } from '../src/crashes';
import { installCommandLine, interpreterOf, notInstalledMessage, probeDaemon } from '../src/probe';
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

  test('Install targets the interpreter of a `python -m ctxd` command, with the free name', () => {
    assert.equal(interpreterOf({ command: '/venv/bin/python', args: ['-m', 'ctxd'] }), '/venv/bin/python');
    assert.equal(interpreterOf({ command: '/usr/local/bin/ctxd', args: [] }), undefined);
    assert.equal(installCommandLine('/venv/bin/python'), '/venv/bin/python -m pip install --upgrade ctxd-daemon');
    assert.equal(installCommandLine('/my env/python'), '"/my env/python" -m pip install --upgrade ctxd-daemon');
    assert.match(notInstalledMessage({ command: '/venv/bin/python', args: ['-m', 'ctxd'] }), /not installed in \/venv\/bin\/python.*pip install ctxd-daemon/);
  });
});
