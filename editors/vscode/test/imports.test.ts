/**
 * No import cycle among the extension's modules (type-only imports included: a circle of types
 * is still a circle a reader has to hold in mind). Reads src/ as text, like madge does.
 */
import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, test } from 'node:test';

/** editors/vscode/src (this file runs from editors/vscode/out/test/). */
const SRC = path.resolve(__dirname, '..', '..', 'src');

/** Each module of `dir` (by base name) and the modules of `dir` it imports or re-exports. */
export function importGraph(dir: string): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  const from = /(?:^|\n)\s*(?:import|export)\s[^'";]*?from\s+'\.\/([^']+)'/g;
  for (const file of fs.readdirSync(dir).filter((f) => f.endsWith('.ts'))) {
    const text = fs.readFileSync(path.join(dir, file), 'utf8');
    const deps = [...text.matchAll(from)].map((m) => m[1].replace(/\.(js|ts)$/, ''));
    graph.set(file.replace(/\.ts$/, ''), [...new Set(deps)]);
  }
  return graph;
}

/** Every cycle reachable in `graph`, each as the path of modules that closes on itself. */
export function findCycles(graph: Map<string, string[]>): string[][] {
  const cycles: string[][] = [];
  const done = new Set<string>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const visit = (node: string): void => {
    if (onStack.has(node)) {
      cycles.push([...stack.slice(stack.indexOf(node)), node]);
      return;
    }
    if (done.has(node)) return;
    stack.push(node);
    onStack.add(node);
    for (const dep of graph.get(node) ?? []) visit(dep);
    stack.pop();
    onStack.delete(node);
    done.add(node);
  };
  for (const node of [...graph.keys()].sort()) visit(node);
  return cycles;
}

describe('module imports', () => {
  test('the finder sees a cycle, through a re-export and a type import too', () => {
    const dir = fs.mkdtempSync(path.join(require('node:os').tmpdir(), 'ctxd-imports-'));
    fs.writeFileSync(path.join(dir, 'a.ts'), "import { b } from './b';\n");
    fs.writeFileSync(path.join(dir, 'b.ts'), "export { c } from './c';\n");
    fs.writeFileSync(path.join(dir, 'c.ts'), "import type {\n  A,\n} from './a';\n");
    fs.writeFileSync(path.join(dir, 'd.ts'), "import { a } from './a';\n");
    try {
      assert.deepEqual(findCycles(importGraph(dir)), [['a', 'b', 'c', 'a']]);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('src/ has no import cycle', () => {
    const graph = importGraph(SRC);
    assert.ok(graph.size > 20 && graph.get('extension')!.includes('api'), 'src/ was read');
    assert.deepEqual(findCycles(graph).map((c) => c.join(' → ')), []);
  });
});
