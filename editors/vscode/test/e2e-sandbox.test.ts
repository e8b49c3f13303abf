/**
 * The end-to-end check must not write into the user's own folders: code-server's first run writes
 * a config.yaml with a generated password where CODE_SERVER_CONFIG or XDG_CONFIG_HOME point
 * (default ~/.config/code-server), even for `--version`. A stand-in code-server that follows that
 * rule runs the way run.sh runs code-server, with HOME in a temp folder.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { test } from 'node:test';

const E2E = path.resolve(__dirname, '..', '..', 'test', 'e2e');

test('run.sh runs code-server with its config in a temp folder, never in ~/.config', () => {
  const home = fs.mkdtempSync(path.join(os.tmpdir(), 'ctxd-home-'));
  const stub = path.join(home, 'code-server');
  // What code-server 4.x does on start (src/node/cli.ts readConfigFile): a missing config file is
  // written, with a random password, before anything else.
  fs.writeFileSync(
    stub,
    '#!/usr/bin/env bash\ncfg="${CODE_SERVER_CONFIG:-${XDG_CONFIG_HOME:-$HOME/.config}/code-server/config.yaml}"\n' +
      '[[ -f "$cfg" ]] || { mkdir -p "$(dirname "$cfg")"; printf "password: 0123456789abcdef\\n" > "$cfg"; }\necho "4.100.3 stub"\n',
    { mode: 0o755 },
  );
  try {
    const run = fs.readFileSync(path.join(E2E, 'run.sh'), 'utf8');
    const sourced = run.indexOf('. "$HERE/sandbox.sh"');
    const firstRun = run.indexOf('"$CODE_SERVER"');
    assert.ok(sourced > 0 && sourced < firstRun, 'run.sh sources sandbox.sh before it first runs code-server');
    const env: NodeJS.ProcessEnv = { PATH: process.env.PATH, HOME: home };
    const r = spawnSync('bash', ['-c', `. "${path.join(E2E, 'sandbox.sh')}"; "${stub}" --version; echo "WORK=$WORK"; rm -rf "$WORK"`], {
      env,
      encoding: 'utf8',
    });
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /4\.100\.3 stub/);
    const work = /WORK=(.*)/.exec(r.stdout)?.[1] ?? '';
    assert.ok(work.startsWith(os.tmpdir()) || work.startsWith('/tmp'), work);
    assert.equal(fs.existsSync(path.join(home, '.config')), false, 'nothing written under ~/.config');
  } finally {
    fs.rmSync(home, { recursive: true, force: true });
  }
});
