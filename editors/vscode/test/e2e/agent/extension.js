// A stand-in agent extension: records a short conversation through ctxd's exported API (the way a
// real agent extension would, instead of starting its own daemon), takes a snapshot, reports a
// model API usage in the warn tier, and writes what the daemon answered to
// <workspace>/.ctxd-e2e/result.json for the check to compare with what the window shows. Its
// command "ctxd e2e: Record a Later Turn" records one more turn, as an agent goes on after a
// snapshot, and writes what the daemon answered to <workspace>/.ctxd-e2e/later.json.
const fs = require('fs');
const path = require('path');
const vscode = require('vscode');

function text(role, t) {
  return { type: 'message', role, content: [{ type: role === 'user' ? 'input_text' : 'output_text', text: t }] };
}

/** The four items of one turn: the user's request, a tool call, its output, the answer. */
function turn(name, i) {
  const id = `call_${name.toLowerCase().replace(/\s+/g, '_')}_${i}`;
  return [
    text('user', `${name} ${i}: read src/module_${i}.py and summarise what it does. `.repeat(30)),
    { type: 'function_call', call_id: id, name: 'read_file', arguments: JSON.stringify({ path: `src/module_${i}.py` }) },
    { type: 'function_call_output', call_id: id, output: `def f_${i}(x):\n    return x * ${i}\n`.repeat(80) },
    text('assistant', `module_${i} multiplies its input by ${i}. `.repeat(20)),
  ];
}

async function ctxdApi() {
  const ext = vscode.extensions.getExtension('ctxd.ctxd');
  return ext.isActive ? ext.exports : await ext.activate();
}

async function activate(context) {
  const folder = vscode.workspace.workspaceFolders && vscode.workspace.workspaceFolders[0];
  if (!folder) return;
  const out = path.join(folder.uri.fsPath, '.ctxd-e2e');
  context.subscriptions.push(
    vscode.commands.registerCommand('ctxdE2e.recordLaterTurn', async () => {
      const file = path.join(out, 'later.json');
      try {
        const ctxd = await ctxdApi();
        const items = turn('Later step', 9);
        const recorded = await ctxd.record(items, { thread: 'e2e' });
        fs.writeFileSync(file, JSON.stringify({ ok: true, thread: 'e2e', items, recorded }, null, 2));
      } catch (err) {
        fs.writeFileSync(file, JSON.stringify({ ok: false, error: String((err && err.stack) || err) }));
      }
    }),
  );
  // Once per session: a reloaded window finds the conversation already recorded.
  if (fs.existsSync(path.join(out, 'result.json'))) return;
  fs.mkdirSync(out, { recursive: true });
  const write = (data) => fs.writeFileSync(path.join(out, 'result.json'), JSON.stringify(data, null, 2));
  try {
    const ctxd = await ctxdApi();
    ctxd.setActiveThread('e2e');
    await ctxd.setPromptContext({ baseInstructions: 'You are a careful coding agent. '.repeat(40) });
    let last;
    for (let i = 0; i < 4; i++) {
      last = await ctxd.record(turn('Step', i));
      if (i === 0) {
        // What the model API would have reported for the first request: from here on the gauge
        // shows the API's count plus estimates of what came after it.
        const used = last.usage.usedTokens;
        await ctxd.reportTokenUsage({ inputTokens: used, outputTokens: 0, totalTokens: used });
      }
    }
    // A snapshot for the Snapshots tree.
    const snapshot = await ctxd.snapshot({ message: 'e2e checkpoint' });
    // Then the model API reports 85% of the auto-compact limit: the gauge crosses into the warn tier.
    const limit = last.usage.autoCompactLimit;
    const warn = Math.ceil(0.85 * limit);
    const usage = await ctxd.reportTokenUsage({ inputTokens: warn, outputTokens: 0, totalTokens: warn });
    write({ ok: true, thread: 'e2e', workspace: folder.uri.toString(), usage, snapshot });
  } catch (err) {
    write({ ok: false, error: String((err && err.stack) || err) });
  }
}

module.exports = { activate, deactivate() {} };
