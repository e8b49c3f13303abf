---@mod ctxd.threads Which thread of a workspace the gauge and the commands address.
---
--- A thread the user picked (`:Ctxd threads`, `api.set_thread`) or set with the `thread` option
--- stays until another is picked. Otherwise the gauge follows the workspace's most recently active
--- thread: the first of `ctxd/threads` (newest activity first), then whichever thread the daemon
--- reports a usage change for. Followed agent sessions (Codex, Claude Code) are threads too.

local methods = require('ctxd.protocol').methods
local config = require('ctxd.config')

local M = {}

---@class ctxd.ThreadInfo
---@field thread string
---@field source string? `client`, or an agent (`codex`, `claude`, ...: `ctxd.agents`)
---@field title string?
---@field model string?
---@field readOnly boolean?
---@field lastActivity any
---@field updatedAt any
---@field usage ctxd.UsageSnapshot?

---@type table<string, string> workspace -> thread the user picked
local picked = {}
---@type table<string, string> workspace -> most recently active thread
local followed = {}
---@type table<string, table<string, ctxd.ThreadInfo>> workspace -> thread -> what ctxd/threads said
local known = {}

--- The thread that `workspace`'s gauge and commands address.
---@param workspace string?
---@return string
function M.current(workspace)
  if workspace and picked[workspace] then
    return picked[workspace]
  end
  if config.options.thread then
    return config.options.thread
  end
  return workspace and followed[workspace] or 'default'
end

--- Whether the user chose `workspace`'s thread (so activity elsewhere does not move the gauge).
---@param workspace string
---@return boolean
function M.is_pinned(workspace)
  return picked[workspace] ~= nil or config.options.thread ~= nil
end

--- Address `thread` in `workspace` until another is picked; `nil` goes back to following.
---@param workspace string
---@param thread string?
function M.pick(workspace, thread)
  picked[workspace] = thread
end

--- A thread of `workspace` was active (its usage changed): follow it unless one was picked.
--- Returns true when the current thread changed.
---@param workspace string
---@param thread string
---@return boolean
function M.activity(workspace, thread)
  local before = M.current(workspace)
  followed[workspace] = thread
  return M.current(workspace) ~= before
end

---@param info ctxd.ThreadInfo
local function activity_key(info)
  local value = info.lastActivity or info.updatedAt
  return type(value) == 'string' and value or tostring(value or '')
end

--- Take in a `ctxd/threads` result: remember each thread's source and title, follow the newest.
---@param workspace string
---@param result { threads: ctxd.ThreadInfo[] }?
---@return ctxd.ThreadInfo[] threads newest activity first
function M.set_list(workspace, result)
  local list = type(result) == 'table' and type(result.threads) == 'table' and vim.deepcopy(result.threads) or {}
  list = vim.tbl_filter(function(info)
    return type(info) == 'table' and type(info.thread) == 'string'
  end, list)
  -- A protocol-2 daemon sorts them by lastActivity, newest first; a protocol-1 daemon lists
  -- updatedAt only, in no order (ISO times of one format sort as text).
  local sorted_by_daemon = #list > 0 and vim.iter(list):all(function(info)
    return info.lastActivity ~= nil
  end)
  if not sorted_by_daemon then
    table.sort(list, function(a, b)
      return activity_key(a) > activity_key(b)
    end)
  end
  local by_name = {}
  for _, info in ipairs(list) do
    by_name[info.thread] = info
  end
  known[workspace] = by_name
  -- Follow the newest thread that holds something: an empty one (just read, say) is no activity.
  for _, info in ipairs(list) do
    if info.itemCount == nil or info.itemCount > 0 then
      followed[workspace] = info.thread
      break
    end
  end
  return list
end

--- The time a thread was last active, comparable as text: ISO times in UTC, `Z` or `+00:00`.
---@param info ctxd.ThreadInfo
local function newest_first(info)
  local key = activity_key(info)
  return key:sub(1, 19), key:sub(20):gsub('Z$', '+00:00')
end

--- Take in a `ctxd/threads` answer for some threads only (asked with `threads`, after a
--- `ctxd/threadsChanged` that named them): they replace what was known of them, and the newest of
--- all the known threads that holds something is followed. Returns the threads it brought.
---@param workspace string
---@param result { threads: ctxd.ThreadInfo[] }?
---@return ctxd.ThreadInfo[]
function M.merge(workspace, result)
  local by_name = known[workspace]
  if not by_name then
    return M.set_list(workspace, result)
  end
  local list = type(result) == 'table' and type(result.threads) == 'table' and vim.deepcopy(result.threads) or {}
  list = vim.tbl_filter(function(info)
    return type(info) == 'table' and type(info.thread) == 'string'
  end, list)
  for _, info in ipairs(list) do
    by_name[info.thread] = info
  end
  local best, best_day, best_rest
  for _, info in pairs(by_name) do
    if info.itemCount == nil or info.itemCount > 0 then
      local day, rest = newest_first(info)
      if best == nil or day > best_day or (day == best_day and rest > best_rest) then
        best, best_day, best_rest = info, day, rest
      end
    end
  end
  if best then
    followed[workspace] = best.thread
  end
  return list
end

--- Whether `ctxd/threads` was read for `workspace` (so some of its threads can be read alone).
---@param workspace string
---@return boolean
function M.knows(workspace)
  return known[workspace] ~= nil
end

--- What `ctxd/threads` last said of a thread, if anything.
---@param workspace string?
---@param thread string
---@return ctxd.ThreadInfo?
function M.info(workspace, thread)
  return workspace and known[workspace] and known[workspace][thread] or nil
end

--- Where a thread comes from: `client`, or the agent whose session it follows (`codex`,
--- `claude`, ...: `ctxd.agents`). Before `ctxd/threads` has listed it, a followed session is known
--- by its name's prefix (`codex:<session id>`).
---@param workspace string?
---@param thread string
---@return string
function M.source(workspace, thread)
  local info = M.info(workspace, thread)
  if info and type(info.source) == 'string' and info.source ~= '' then
    return info.source
  end
  local prefix = type(thread) == 'string' and thread:match('^(%a+):') or nil
  if prefix and prefix ~= 'client' and require('ctxd.agents').known[prefix] then
    return prefix
  end
  return 'client'
end

--- The agent behind a thread (`ctxd.agents`).
---@param workspace string?
---@param thread string
---@return ctxd.Agent
function M.agent(workspace, thread)
  return require('ctxd.agents').get(M.source(workspace, thread))
end

--- Whether ctxd may not change the thread's conversation (a followed agent session): rollback,
--- undo, compaction and a restore with the conversation are the agent's to do.
---@param workspace string?
---@param thread string
---@return boolean
function M.read_only(workspace, thread)
  local info = M.info(workspace, thread)
  if info and info.readOnly == true then
    return true
  end
  return M.source(workspace, thread) ~= 'client'
end

--- The label the gauge starts with: the agent's (`Codex`, `Claude`, ...), or the
--- `statusline.prefix` (`ctx`) for the editor's own threads.
---@param workspace string?
---@param thread string
---@return string
function M.label(workspace, thread)
  return M.agent(workspace, thread).label or config.options.statusline.prefix
end

--- The icon of the thread's agent; nil for the editor's own threads.
---@param workspace string?
---@param thread string
---@return string?
function M.icon(workspace, thread)
  if M.source(workspace, thread) == 'client' then
    return nil
  end
  return M.agent(workspace, thread).icon
end

--- `ctxd/threads` with `params`, the answer taken in by `take` (the whole list, or some of it),
--- then `cb(threads, err)`.
---@param take fun(workspace: string, result: any): ctxd.ThreadInfo[]
local function fetch(lsp_client, workspace, params, take, cb)
  lsp_client:request(methods.threads, params, function(err, result)
    local list = {}
    if not err then
      list = take(workspace, result)
    end
    if cb then
      cb(list, err)
    end
  end)
end

--- Fetch `ctxd/threads` for `workspace` with `lsp_client`, then call `cb(threads)` (newest first;
--- empty on error).
---@param lsp_client vim.lsp.Client
---@param workspace string
---@param cb fun(threads: ctxd.ThreadInfo[], err: any)?
function M.refresh(lsp_client, workspace, cb)
  fetch(lsp_client, workspace, { workspace = workspace }, M.set_list, cb)
end

--- Fetch `ctxd/threads` of only `names` (a daemon before protocol 4 answers with every thread),
--- take them in (`merge`), then call `cb(threads)`.
---@param lsp_client vim.lsp.Client
---@param workspace string
---@param names string[]
---@param cb fun(threads: ctxd.ThreadInfo[], err: any)?
function M.refresh_some(lsp_client, workspace, names, cb)
  fetch(lsp_client, workspace, { workspace = workspace, threads = names }, M.merge, cb)
end

--- Forget everything about a workspace (its client stopped).
---@param workspace string
function M.forget(workspace)
  followed[workspace] = nil
  known[workspace] = nil
end

--- Forget every pick (tests; a new session).
function M.reset()
  picked, followed, known = {}, {}, {}
end

return M
