// Generates ctxd-protocol.d.ts, the TypeScript types of every ctxd result, notification and request params, from the
// daemon's JSON Schema (docs/protocol.schema.json, itself generated from ctxd/protocol/shapes.py).
// The banner records the schema's SHA-256, so a stale file is caught (CI regenerates and diffs; a
// Python test compares the hash). Run: npm run gen:protocol
import { createHash } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { dirname, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { compile } from 'json-schema-to-typescript';

const here = dirname(fileURLToPath(import.meta.url));
const schemaPath = resolve(here, '..', '..', '..', 'docs', 'protocol.schema.json');
const outPath = resolve(here, '..', 'ctxd-protocol.d.ts');

const text = readFileSync(schemaPath, 'utf8');
const digest = createHash('sha256').update(text).digest('hex');
const banner = [
  '/* eslint-disable */',
  '/**',
  ' * The ctxd wire protocol: results, notifications and request params. GENERATED, do not edit:',
  ' * `npm run gen:protocol` from docs/protocol.schema.json (from ctxd/protocol/shapes.py).',
  ` * schema sha256: ${digest}`,
  ' */',
].join('\n');
const types = await compile(JSON.parse(text), 'CtxdProtocol', {
  bannerComment: banner,
  additionalProperties: false,
  unreachableDefinitions: true,
  format: true,
});
writeFileSync(outPath, types);
