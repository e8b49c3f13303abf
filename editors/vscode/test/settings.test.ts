import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, test } from 'node:test';
import { COMMANDS } from '../src/commands';
import {
  type ConfigReader,
  RESTART_SETTINGS,
  findOnPath,
  initializationOptions,
  readSettings,
  resolveDaemonCommand,
  shouldNotify,
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
    assert.match(props['ctxd.daemon.command'].markdownDescription, /pip install ctxd-daemon/);
  });
  test('runs where the files are; trust limits what a workspace may set', () => {
    assert.deepEqual(manifest.extensionKind, ['workspace']);
    assert.deepEqual(manifest.capabilities.untrustedWorkspaces.restrictedConfigurations, ['ctxd.daemon.command', 'ctxd.llm.baseUrl']);
  });
  test('the ctxd view has the three trees, and every menu entry names a declared command', () => {
    assert.deepEqual(manifest.contributes.views.ctxd.map((v: { name: string }) => v.name), ['Threads', 'Snapshots', 'Compactions']);
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
