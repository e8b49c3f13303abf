import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, test } from 'node:test';
import { COMMANDS } from '../src/commandIds';
import {
  type ConfigReader,
  RESTART_SETTINGS,
  findOnPath,
  initializationOptions,
  readSettings,
  resolveDaemonCommand,
  shouldNotify,
  commandForProgram,
  splitCommandLine,
} from '../src/settings';

const manifest = JSON.parse(fs.readFileSync(path.resolve(__dirname, '..', '..', 'package.json'), 'utf8'));

function reader(values: Record<string, unknown>): ConfigReader {
  return { get: <T>(key: string) => values[key] as T | undefined };
}

describe('readSettings', () => {
  test('defaults when nothing is set', () => {
    assert.deepEqual(readSettings(reader({})), {
      daemonCommand: [],
      model: '',
      contextWindow: null,
      autoCompactRatio: null,
      llmBaseUrl: '',
      llmModel: '',
      notifications: 'warnings',
    });
  });

  test('bad values fall back to the defaults instead of reaching the daemon', () => {
    const s = readSettings(
      reader({ 'daemon.command': 'ctxd', contextWindow: -3, autoCompactRatio: 1.5, notifications: 'loud', model: 42 }),
    );
    assert.deepEqual(s.daemonCommand, []);
    assert.equal(s.contextWindow, null);
    assert.equal(s.autoCompactRatio, null);
    assert.equal(s.notifications, 'warnings');
    assert.equal(s.model, '');
  });

  test('initializationOptions carries only what the user set, camelCase, and the trust verdict', () => {
    assert.deepEqual(initializationOptions(readSettings(reader({}))), { ctxd: { trusted: false } });
    assert.deepEqual(initializationOptions(readSettings(reader({})), true), { ctxd: { trusted: true } });
    const s = readSettings(
      reader({ model: ' gpt-5 ', contextWindow: 200000.7, autoCompactRatio: 0.8, 'llm.baseUrl': 'http://127.0.0.1:9/v1', 'llm.model': 'small' }),
    );
    assert.deepEqual(initializationOptions(s), {
      ctxd: { trusted: false, model: 'gpt-5', contextWindow: 200000, autoCompactRatio: 0.8, llm: { baseUrl: 'http://127.0.0.1:9/v1', model: 'small' } },
    });
  });
});

describe('resolveDaemonCommand', () => {
  const none = readSettings(reader({}));
  test('the setting wins', () => {
    const s = readSettings(reader({ 'daemon.command': ['/opt/py/bin/python', '-m', 'ctxd'] }));
    assert.deepEqual(resolveDaemonCommand(s, { ctxdOnPath: '/usr/bin/ctxd', interpreter: ['/x/python'] }), {
      command: '/opt/py/bin/python',
      args: ['-m', 'ctxd'],
    });
  });
  test('then ctxd on PATH', () => {
    assert.deepEqual(resolveDaemonCommand(none, { ctxdOnPath: '/usr/bin/ctxd', interpreter: ['/x/python'] }), {
      command: '/usr/bin/ctxd',
      args: [],
    });
  });
  test('then python -m ctxd with the chosen interpreter, else python3', () => {
    assert.deepEqual(resolveDaemonCommand(none, { ctxdOnPath: undefined, interpreter: ['/x/python'] }), {
      command: '/x/python',
      args: ['-m', 'ctxd'],
    });
    assert.deepEqual(resolveDaemonCommand(none, { ctxdOnPath: undefined, interpreter: undefined }).args, ['-m', 'ctxd']);
  });
  test('findOnPath walks PATH in order', () => {
    const seen: string[] = [];
    const found = findOnPath('ctxd', ['/a', '', '/b', '/c'].join(path.delimiter), (f) => {
      seen.push(f);
      return f.startsWith('/b');
    });
    assert.equal(found, path.join('/b', process.platform === 'win32' ? 'ctxd.exe' : 'ctxd'));
    assert.equal(findOnPath('ctxd', undefined, () => true), undefined);
  });
});

test('notifications level', () => {
  assert.deepEqual(
    (['all', 'warnings', 'errors', 'none'] as const).map((l) => (['info', 'warning', 'error'] as const).map((s) => shouldNotify(s, l))),
    [
      [true, true, true],
      [false, true, true],
      [false, false, true],
      [false, false, false],
    ],
  );
});

describe('package.json', () => {
  const props = manifest.contributes.configuration.properties as Record<string, any>;
  test('declares every setting the extension reads, with scope and description', () => {
    const read = ['ctxd.daemon.command', 'ctxd.model', 'ctxd.contextWindow', 'ctxd.autoCompactRatio', 'ctxd.llm.baseUrl', 'ctxd.llm.model', 'ctxd.notifications'];
    for (const key of [...read, ...RESTART_SETTINGS]) {
      assert.ok(props[key], key);
      assert.ok(props[key].scope, `${key} scope`);
      assert.ok(props[key].description || props[key].markdownDescription, `${key} description`);
    }
    assert.deepEqual(props['ctxd.notifications'].enum, ['all', 'warnings', 'errors', 'none']);
  });
  test('settings are shown daemon command first, in a fixed order', () => {
    const ordered = Object.entries(props).sort((a, b) => a[1].order - b[1].order).map(([k]) => k);
    assert.equal(ordered[0], 'ctxd.daemon.command');
    assert.deepEqual(new Set(Object.values(props).map((p) => p.order)).size, ordered.length);
    assert.doesNotMatch(props['ctxd.daemon.command'].markdownDescription, /ctxd-daemon/);
    assert.match(props['ctxd.daemon.command'].markdownDescription, /Install Daemon…\* installs ctxd from a clone or a wheel/);
  });
  test('runs where the files are; trust limits what a workspace may set', () => {
    assert.deepEqual(manifest.extensionKind, ['workspace']);
    assert.deepEqual(manifest.capabilities.untrustedWorkspaces.restrictedConfigurations, ['ctxd.daemon.command', 'ctxd.llm.baseUrl']);
  });
  test('the ctxd view has the three trees, and every menu entry names a declared command', () => {
    assert.deepEqual(manifest.contributes.views.ctxd.map((v: { name: string }) => v.name), ['Threads', 'Snapshots', 'History']);
    const declared = new Set(manifest.contributes.commands.map((c: { command: string }) => c.command));
    for (const entries of Object.values(manifest.contributes.menus) as { command: string }[][]) {
      for (const e of entries) assert.ok(declared.has(e.command), e.command);
    }
  });
  test('contributes exactly the commands the extension registers', () => {
    const declared = manifest.contributes.commands.map((c: { command: string }) => c.command).sort();
    assert.deepEqual(declared, Object.values(COMMANDS).sort());
  });
  test('ships the API typings', () => {
    assert.equal(manifest.types, './ctxd-api.d.ts');
    assert.ok(fs.existsSync(path.resolve(__dirname, '..', '..', 'ctxd-api.d.ts')));
  });
});

describe('the daemon command as people write it', () => {
  const withCommand = (daemonCommand: string[]) => readSettings(reader({ 'daemon.command': daemonCommand }));
  test('~ stands for the home folder, in the program and in its arguments', () => {
    const c = resolveDaemonCommand(withCommand(['~/venvs/ctxd/bin/python', '-m', 'ctxd', '--config', '~/c.toml']), {
      ctxdOnPath: undefined,
      interpreter: undefined,
      home: '/home/ann',
    });
    assert.deepEqual(c, { command: '/home/ann/venvs/ctxd/bin/python', args: ['-m', 'ctxd', '--config', '/home/ann/c.toml'] });
    assert.equal(resolveDaemonCommand(withCommand(['~']), { ctxdOnPath: undefined, interpreter: undefined, home: '/h' }).command, '/h');
    assert.equal(resolveDaemonCommand(withCommand(['a~/b']), { ctxdOnPath: undefined, interpreter: undefined, home: '/h' }).command, 'a~/b');
  });
  test('a typed command line keeps quoted spaces; a picked Python runs -m ctxd', () => {
    assert.deepEqual(splitCommandLine(' "/my env/bin/python"  -m ctxd '), ['/my env/bin/python', '-m', 'ctxd']);
    assert.deepEqual(splitCommandLine("~/bin/ctxd '--x y'"), ['~/bin/ctxd', '--x y']);
    assert.deepEqual(commandForProgram('/v/bin/python3.12'), ['/v/bin/python3.12', '-m', 'ctxd']);
    assert.deepEqual(commandForProgram('/usr/local/bin/ctxd'), ['/usr/local/bin/ctxd']);
  });
});

describe('the extension\'s face', () => {
  test('the breakdown tab comes back after a window reload', () => {
    assert.ok(manifest.activationEvents.includes('onWebviewPanel:ctxd.breakdown'));
  });
  test('the activity-bar icon is a gauge, not the Extensions icon\'s four squares', () => {
    const svg = fs.readFileSync(path.resolve(__dirname, '..', '..', manifest.contributes.viewsContainers.activitybar[0].icon), 'utf8');
    assert.equal((svg.match(/<rect/g) ?? []).length, 0, svg);
    assert.match(svg, /<path d="M[\d.]+ [\d.]+a[\d.]+ [\d.]+ 0 1 1/, 'a dial: an arc');
  });
});

describe('install instructions', () => {
  test('the READMEs say how to install from a clone or a wheel, never an unpublished package', () => {
    const repoReadme = fs.readFileSync(path.resolve(__dirname, '..', '..', '..', '..', 'README.md'), 'utf8');
    const extReadme = fs.readFileSync(path.resolve(__dirname, '..', '..', 'README.md'), 'utf8');
    for (const text of [repoReadme, extReadme]) {
      assert.doesNotMatch(text, /pip install ctxd-daemon/);
      assert.match(text, /pipx install ~\/src\/ctxd/);
      assert.match(text, /python3 -m venv ~\/\.local\/share\/ctxd/);
      assert.match(text, /pip wheel --no-deps -w dist ~\/src\/ctxd/);
    }
  });
});
