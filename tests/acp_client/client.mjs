// The editor side of the ACP tests: the official ACP client library (@agentclientprotocol/sdk, pinned and
// installed by tests/agents.py: ACP_SDK) drives an agent command, directly or through
// `ctxd acp`. It writes one JSON object to stdout: every message each way as it crossed the pipes, what the
// handlers did, the results, and how the agent process ended.
//
// usage: node client.mjs SCENARIO.json -- COMMAND ARGS...   (ACP_SDK names the installed SDK's folder)
// SCENARIO: {cwd, prompts: [text], allow: bool, waitUsageMs?: number, load?: bool, timeoutMs?: number,
//            mcpServers?: [...], mode?: a session mode to set first, authenticate?: a method id}
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { pathToFileURL } from 'node:url';

const sdk = await import(pathToFileURL(join(process.env.ACP_SDK, 'dist', 'v1', 'stable', 'acp.js')).href);
const scenario = JSON.parse(readFileSync(process.argv[2], 'utf8'));
const command = process.argv.slice(process.argv.indexOf('--') + 1);

const record = { toAgent: [], toEditor: [], updates: [], permissions: [], writes: [], results: {}, errors: [] };
const child = spawn(command[0], command.slice(1), { stdio: ['pipe', 'pipe', 'inherit'], cwd: scenario.cwd });
const ended = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
const outputClosed = new Promise((resolve) => child.stdout.on('close', resolve));

function tap(list) {
  let pending = '';
  const decoder = new TextDecoder();
  return new TransformStream({
    transform(chunk, controller) {
      pending += decoder.decode(chunk, { stream: true });
      let end;
      while ((end = pending.indexOf('\n')) >= 0) {
        const line = pending.slice(0, end);
        pending = pending.slice(end + 1);
        if (line.trim()) {
          try { list.push(JSON.parse(line)); } catch { list.push({ notJson: line }); }
        }
      }
      controller.enqueue(chunk);
    },
  });
}

const toAgent = tap(record.toAgent);
toAgent.readable.pipeTo(new WritableStream({
  write(chunk) { return new Promise((resolve) => child.stdin.write(chunk, () => resolve())); },
  close() { child.stdin.end(); },
})).catch(() => {});
const fromAgentTap = tap(record.toEditor);  // every line the agent side wrote, read or not by the library
const tapWriter = fromAgentTap.writable.getWriter();
fromAgentTap.readable.pipeTo(new WritableStream({})).catch(() => {});
const fromAgent = new ReadableStream({
  start(controller) {
    child.stdout.on('data', (chunk) => {
      tapWriter.write(new Uint8Array(chunk)).catch(() => {});
      try { controller.enqueue(new Uint8Array(chunk)); } catch { /* the library closed its side */ }
    });
    child.stdout.on('end', () => { try { controller.close(); } catch {} });
  },
});

let usageSeen = 0;
const app = sdk.client({ name: 'ctxd-tests' })
  .onNotification('session/update', async ({ params }) => {
    record.updates.push(params);
    if (params.update?.sessionUpdate === 'usage_update') usageSeen += 1;
  })
  .onRequest('session/request_permission', async ({ params }) => {
    record.permissions.push(params);
    const wanted = scenario.allow === false ? ['reject_once', 'reject_always'] : ['allow_once', 'allow_always'];
    const option = params.options.find((o) => wanted.includes(o.kind));
    return option ? { outcome: { outcome: 'selected', optionId: option.optionId } } : { outcome: { outcome: 'cancelled' } };
  })
  .onRequest('fs/write_text_file', async ({ params }) => {
    record.writes.push({ path: params.path, before: scenario.snapshotBefore ? safeRead(params.path) : undefined });
    mkdirSync(dirname(params.path), { recursive: true });
    writeFileSync(params.path, params.content);
    return {};
  })
  .onRequest('fs/read_text_file', async ({ params }) => ({ content: readFileSync(params.path, 'utf8') }));

function safeRead(path) {
  try { return readFileSync(path, 'utf8'); } catch { return null; }
}

const timeout = setTimeout(() => {
  record.errors.push('timeout');
  finish();
}, scenario.timeoutMs ?? 120000);

async function waitUsage(before, ms) {
  const until = Date.now() + ms;
  while (usageSeen <= before && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
}

async function finish() {
  clearTimeout(timeout);
  try { child.stdin.end(); } catch {}
  const end = await Promise.race([ended, new Promise((r) => setTimeout(() => r({ code: null, signal: 'still running' }), 20000))]);
  if (end.signal === 'still running') child.kill('SIGKILL');
  await Promise.race([outputClosed, new Promise((r) => setTimeout(r, 5000))]);
  record.exit = end;
  process.stdout.write(JSON.stringify(record) + '\n', () => process.exit(0));  // a pipe is written asynchronously
}

try {
  await app.connectWith(sdk.ndJsonStream(toAgent.writable, fromAgent), async (ctx) => {
    record.results.initialize = await ctx.request('initialize', {
      protocolVersion: 1,
      clientCapabilities: { fs: { readTextFile: true, writeTextFile: true }, terminal: false },
      clientInfo: { name: 'ctxd-tests', version: '1' },
    });
    if (scenario.authenticate) {
      record.results.authenticate = await ctx.request('authenticate', { methodId: scenario.authenticate });
    }
    const created = await ctx.request('session/new', { cwd: scenario.cwd, mcpServers: scenario.mcpServers ?? [] });
    record.results.sessionNew = created;
    if (scenario.mode) {
      record.results.setMode = await ctx.request('session/set_mode', { sessionId: created.sessionId, modeId: scenario.mode });
    }
    record.results.prompts = [];
    for (const text of scenario.prompts) {
      const before = usageSeen;
      try {
        record.results.prompts.push(await ctx.request('session/prompt', {
          sessionId: created.sessionId, prompt: [{ type: 'text', text }],
        }));
      } catch (error) {
        record.results.prompts.push({ error: String(error?.message ?? error) });
        break;
      }
      if (scenario.waitUsageMs) await waitUsage(before, scenario.waitUsageMs);
    }
    if (scenario.load) {
      record.results.sessionLoad = await ctx.request('session/load', {
        sessionId: created.sessionId, cwd: scenario.cwd, mcpServers: [],
      });
    }
  });
} catch (error) {
  record.errors.push(String(error?.message ?? error));
}
await finish();
