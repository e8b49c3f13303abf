---@mod ctxd.api Lua API for agent plugins.
---
--- Thin wrappers over the daemon's `ctxd/*` requests. Each takes the request's own params, an
--- optional `ctxd.Target` (`bufnr`, `workspace`, `thread`) and a callback `cb(err, result)` run on
--- the main loop; `err` is a JSON-RPC error `{code, message, data?}` (see PROTOCOL.md). Params and
--- results are exactly the wire's: camelCase protocol fields, items in the Responses API spelling.
--- The results' shapes are `ctxd.<Shape>` classes (`ctxd.Breakdown`, `ctxd.UsageSnapshot`, ...) in
--- `lua/ctxd/protocol.lua`, generated from the daemon's own definitions for lua_ls.
---
--- ```lua
--- local ctxd = require('ctxd.api')
--- ctxd.record({ { type = 'message', role = 'user', content = { { type = 'input_text', text = 'hi' } } } },
---   { thread = 'chat-1' }, function(err, result) ... end)
--- ```

local methods = require('ctxd.protocol').methods
local client = require('ctxd.client')
local status = require('ctxd.status')

local M = {}

--- Accept `(params, cb)` as well as `(params, target, cb)`.
---@return ctxd.Target?, ctxd.Callback?
local function args(target, cb)
  if type(target) == 'function' then
    return nil, target
  end
  return target, cb
end

---@param method string
---@param params table
---@param target ctxd.Target?
---@param cb ctxd.Callback?
---@return integer? request_id
local function send(method, params, target, cb)
  return client.request(method, params, cb, target)
end

--- Record items (oldest first) in the thread's ledger. Result: `{historyVersion, itemCount, usage}`.
---@param items table[]
---@param target ctxd.Target|ctxd.Callback?
---@param cb ctxd.Callback?
function M.record(items, target, cb)
  target, cb = args(target, cb)
  return send(methods.record, { items = items }, target, cb)
end

--- Report the model API's usage for the latest request:
--- `{inputTokens, cachedInputTokens?, outputTokens, reasoningOutputTokens?, totalTokens}`.
---@param usage table
---@param target ctxd.Target|ctxd.Callback?
---@param cb ctxd.Callback?
function M.report_token_usage(usage, target, cb)
  target, cb = args(target, cb)
  return send(methods.report_token_usage, { usage = usage }, target, cb)
end

--- Set the fixed overhead of every request: `{model?, contextWindow?, baseInstructions?, tools?,
--- memoryFiles?, skills?}`.
---@param context table
---@param target ctxd.Target|ctxd.Callback?
---@param cb ctxd.Callback?
function M.set_prompt_context(context, target, cb)
  target, cb = args(target, cb)
  return send(methods.set_prompt_context, context, target, cb)
end

--- The model-ready projection: `{items, historyVersion, estimatedTokens, reinjectContext}`.
---@param params table? `{inputModalities?}`
---@param target ctxd.Target|ctxd.Callback?
---@param cb ctxd.Callback?
function M.prompt(params, target, cb)
  target, cb = args(target, cb)
  return send(methods.prompt, params or {}, target, cb)
end

--- The usage breakdown by category (`Breakdown`).
---@param target ctxd.Target|ctxd.Callback?
---@param cb ctxd.Callback?
function M.usage(target, cb)
  target, cb = args(target, cb)
  return send(methods.usage, {}, target, cb)
end

--- Compact the thread. `params`: `{strategy?, workDoneToken?}`.
---@param params table?
---@param target ctxd.Target|ctxd.Callback?
---@param cb ctxd.Callback?
function M.compact(params, target, cb)
  target, cb = args(target, cb)
  return send(methods.compact, params or {}, target, cb)
end

--- Drop the last `turns` user turns.
---@param turns integer
---@param target ctxd.Target|ctxd.Callback?
---@param cb ctxd.Callback?
function M.rollback(turns, target, cb)
  target, cb = args(target, cb)
  return send(methods.rollback, { turns = turns }, target, cb)
end

--- The stored ledger: `params` `{offset?, limit?, includeArchived?}`.
---@param params table?
---@param target ctxd.Target|ctxd.Callback?
---@param cb ctxd.Callback?
function M.history(params, target, cb)
  target, cb = args(target, cb)
  return send(methods.history, params or {}, target, cb)
end

--- The workspace's threads.
---@param target ctxd.Target|ctxd.Callback?
---@param cb ctxd.Callback?
function M.threads(target, cb)
  target, cb = args(target, cb)
  return send(methods.threads, {}, target, cb)
end

--- Take a ghost snapshot of the working tree. `params`: `{message?, workDoneToken?}`.
---@param params table?
---@param target ctxd.Target|ctxd.Callback?
---@param cb ctxd.Callback?
function M.snapshot(params, target, cb)
  target, cb = args(target, cb)
  return send(methods.ghost_snapshot, params or {}, target, cb)
end

--- The workspace's snapshots, newest first: `{snapshots}`.
---@param target ctxd.Target|ctxd.Callback?
---@param cb ctxd.Callback?
function M.snapshots(target, cb)
  target, cb = args(target, cb)
  return send(methods.ghost_list, {}, target, cb)
end

--- Restore the working tree to snapshot `id`; with `conversation` also roll the thread back.
---@param id string
---@param conversation boolean?
---@param target ctxd.Target|ctxd.Callback?
---@param cb ctxd.Callback?
function M.restore(id, conversation, target, cb)
  target, cb = args(target, cb)
  return send(methods.ghost_restore, { id = id, conversation = conversation == true }, target, cb)
end

--- How the working tree differs from snapshot `id` (protocol 2): `{id, files}`; with `path`,
--- that file's `before`/`after` text.
---@param id string
---@param path string?
---@param target ctxd.Target|ctxd.Callback?
---@param cb ctxd.Callback?
function M.diff(id, path, target, cb)
  target, cb = args(target, cb)
  return send(methods.ghost_diff, { id = id, path = path }, target, cb)
end

--- What the daemon says of itself (protocol 2): settings problems, tokenizers, sources.
---@param target ctxd.Target|ctxd.Callback?
---@param cb ctxd.Callback?
function M.status(target, cb)
  target, cb = args(target, cb)
  return send(methods.status, {}, target, cb)
end

--- Search the thread's whole history, compacted parts included (protocol 3): `params`
--- `{limit?, scope?}` (`scope`: `thread` or `workspace`). Result: `{results, total}`, each hit
--- `{thread, seq, type, role?, snippet, createdAt?, archived, turn?}`.
---@param query string
---@param params table?
---@param target ctxd.Target|ctxd.Callback?
---@param cb ctxd.Callback?
function M.recall(query, params, target, cb)
  target, cb = args(target, cb)
  return send(methods.recall, vim.tbl_extend('force', params or {}, { query = query }), target, cb)
end

--- One stored item whole, archived or not (protocol 3): `{item, archived, seq}`.
---@param seq integer
---@param target ctxd.Target|ctxd.Callback?
---@param cb ctxd.Callback?
function M.item(seq, target, cb)
  target, cb = args(target, cb)
  return send(methods.item, { seq = seq }, target, cb)
end

--- Any other `ctxd/*` method, for what the wrappers above do not cover yet.
---@param method string
---@param params table?
---@param target ctxd.Target|ctxd.Callback?
---@param cb ctxd.Callback?
function M.request(method, params, target, cb)
  target, cb = args(target, cb)
  return send(method, params or {}, target, cb)
end

--- Make `thread` the one the gauge and the `:Ctxd` commands address (an agent plugin switching
--- conversations). The gauge is filled from `ctxd/usage` if no notification came for it yet.
---@param thread string
---@param target ctxd.Target|ctxd.Callback?
---@param cb ctxd.Callback?
function M.set_thread(thread, target, cb)
  target, cb = args(target, cb)
  require('ctxd.config').options.thread = thread
  local resolved = vim.tbl_extend('force', target or {}, { thread = thread })
  local found, workspace = client.resolve(resolved)
  if found then
    require('ctxd.threads').pick(workspace, thread)
  end
  return send(methods.usage, {}, resolved, function(err, result)
    if not err and type(result) == 'table' and type(result.usage) == 'table' then
      status.seed(workspace, thread, result.usage)
    end
    vim.cmd.redrawstatus({ bang = true })
    if cb then
      cb(err, result)
    end
  end)
end

--- Call `fn(snapshot)` after each `ctxd/usageChanged` (every workspace and thread; the snapshot
--- carries `workspace` and `thread`). Returns a function that unsubscribes.
---@param fn fun(snapshot: ctxd.UsageSnapshot)
---@return fun()
function M.subscribe(fn)
  return status.subscribe(fn)
end

--- The latest known UsageSnapshot for a target, without asking the daemon.
---@param target ctxd.Target?
---@return ctxd.UsageSnapshot?
function M.current_usage(target)
  return status.get(target)
end

return M
