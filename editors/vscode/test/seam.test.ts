/** The seam holds: only vscodeapi.ts imports `vscode`; only client.ts imports vscode-languageclient. */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { test } from 'node:test';

const SRC = path.resolve(__dirname, '..', '..', 'src');

function importers(pattern: RegExp): string[] {
  return fs
    .readdirSync(SRC)
    .filter((f) => f.endsWith('.ts') && pattern.test(fs.readFileSync(path.join(SRC, f), 'utf8')))
    .sort();
}

test('only vscodeapi.ts imports vscode', () => {
  assert.deepEqual(importers(/from\s+['"]vscode['"]|require\(['"]vscode['"]\)/), ['vscodeapi.ts']);
});

test('only client.ts imports vscode-languageclient', () => {
  assert.deepEqual(importers(/from\s+['"]vscode-languageclient/), ['client.ts']);
});
