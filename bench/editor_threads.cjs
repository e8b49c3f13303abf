// `ctxd/threads` timed as the VS Code extension reads it: through vscode-jsonrpc (the library its
// LanguageClient speaks with), in Node, over a `python -m ctxd` it starts on stdio as the extension
// does; the daemon's owner is the one already running over the same state dir.
//
// node editor_threads.cjs <vscode-jsonrpc folder> <python> <repo> <workspace uri> <samples>
// Prints {"samples": [seconds, ...], "threads": n} on its last line.
'use strict';

const { spawn } = require('node:child_process');
const { performance } = require('node:perf_hooks');

async function main() {
  const [library, python, repo, workspace, count] = process.argv.slice(2);
  const rpc = require(`${library}/node`);
  const daemon = spawn(python, ['-m', 'ctxd'], { cwd: repo, stdio: ['pipe', 'pipe', 'ignore'] });
  const connection = rpc.createMessageConnection(
    new rpc.StreamMessageReader(daemon.stdout), new rpc.StreamMessageWriter(daemon.stdin));
  connection.listen();
  await connection.sendRequest('initialize', {
    processId: process.pid,
    rootUri: workspace,
    capabilities: {},
    workspaceFolders: [{ uri: workspace, name: 'bench' }],
    initializationOptions: { ctxd: { ghost: { auto: 'off' } } },
  });
  await connection.sendNotification('initialized', {});
  const first = await connection.sendRequest('ctxd/threads', { workspace });
  const samples = [];
  for (let n = 0; n < Number(count); n++) {
    const start = performance.now();
    await connection.sendRequest('ctxd/threads', { workspace });
    samples.push((performance.now() - start) / 1000);
  }
  await connection.sendRequest('shutdown');
  await connection.sendNotification('exit');
  connection.dispose();
  daemon.stdin.end();
  console.log(JSON.stringify({ samples, threads: first.threads.length }));
}

main().catch((error) => {
  console.error(error);
  process.exit(1);
});
