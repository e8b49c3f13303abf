---@mod ctxd.ui.model What the views show, asked of the daemon and kept between requests.
---
--- The only part of the UI that sends requests: a float's usage as it changes, a file's text in a
--- snapshot, `ctxd/recall` hits and the stored items they point at. Callbacks run on the main loop.

local client = require('ctxd.client')
local methods = require('ctxd.protocol').methods

local M = {}

--- Call `on_result(breakdown)` with a fresh `ctxd/usage` whenever the usage of the target's
--- thread changes, one request at a time (changes during a request ask once more after it).
--- Returns the function that stops it.
---@param target ctxd.Target must name `workspace` and `thread`
---@param on_result fun(breakdown: ctxd.Breakdown)
---@return fun() stop
function M.follow_usage(target, on_result)
  local in_flight, again, stopped = false, false, false
  local function refresh()
    if in_flight then
      again = true
      return
    end
    in_flight = true
    client.request(methods.usage, {}, function(err, result)
      in_flight = false
      if stopped then
        return
      end
      if not err then
        on_result(result)
      end
      if again then
        again = false
        refresh()
      end
    end, target)
  end
  local unsubscribe = require('ctxd.status').subscribe(function(snapshot)
    if snapshot.workspace == target.workspace and snapshot.thread == target.thread then
      refresh()
    end
  end)
  return function()
    stopped = true
    unsubscribe()
  end
end

--- The last `:Ctxd diff` put in the quickfix list.
---@type { workspace: string, id: string, files: table[] }?
M.last_diff = nil

--- The workspace of each snapshot a diff was asked of (its `ctxd://diff/...` buffers are read
--- from it).
---@type table<string, string>
local diff_workspaces = {}

M.DIFF_PREFIX = 'ctxd://diff/'

---@param workspace string
---@param id string
function M.remember_diff(workspace, id)
  diff_workspaces[id] = workspace
end

--- The workspace snapshot `id` belongs to: where a diff of it was asked, else the workspace of
--- the current buffer (a `ctxd://diff/...` buffer of a session restored from disk).
---@param id string
---@return string?
function M.diff_workspace(id)
  if diff_workspaces[id] then
    return diff_workspaces[id]
  end
  local found, workspace = client.resolve()
  return found and workspace or nil
end

--- The buffer name of `path`'s diff against snapshot `id`.
---@param id string
---@param path string workspace-relative
---@return string
function M.diff_name(id, path)
  return M.DIFF_PREFIX .. id .. '/' .. path
end

--- The snapshot and path a `ctxd://diff/<id>/<path>` name points at, or nil.
---@param name string
---@return { id: string, path: string }?
function M.diff_ref(name)
  local id, path = name:match('^ctxd://diff/(%x+)/(.+)$')
  if not id then
    return nil
  end
  return { id = id, path = path }
end

--- Callbacks waiting for a `ctxd://diff/...` buffer to be read, and the buffers read (with their problem).
local diff_waiting = {} ---@type table<integer, fun(problem: any)[]>
local diff_done = {} ---@type table<integer, { problem: any }>

--- `buf` is being read (again).
---@param buf integer
function M.diff_reading(buf)
  diff_done[buf] = nil
end

--- Call `cb(problem)` once `buf` (a `ctxd://diff/...` buffer) has been read.
---@param buf integer
---@param cb fun(problem: any)
function M.when_diff_read(buf, cb)
  if diff_done[buf] then
    cb(diff_done[buf].problem)
    return
  end
  diff_waiting[buf] = diff_waiting[buf] or {}
  table.insert(diff_waiting[buf], cb)
end

--- `buf` has been read (`problem` nil when it shows the diff).
---@param buf integer
---@param problem any
function M.diff_read(buf, problem)
  diff_done[buf] = { problem = problem }
  local waiting = diff_waiting[buf] or {}
  diff_waiting[buf] = nil
  for _, cb in ipairs(waiting) do
    cb(problem)
  end
end

--- `path` as it was in snapshot `id` (`ctxd/ghost/diff` with a path): `cb(nil, file)`, or
--- `cb(problem)` in words when there is no diff to show.
---@param target ctxd.Target
---@param id string
---@param path string workspace-relative
---@param cb fun(problem: string?, file: ctxd.FileChange?)
function M.file_diff(target, id, path, cb)
  client.request(methods.ghost_diff, { id = id, path = path }, function(err, r)
    local file = not err and type(r) == 'table' and (r.files or {})[1] or nil
    local problem = err and client.format_error(err)
      or not file and ('%s has not changed since snapshot %s'):format(path, id:sub(1, 10))
      or file.binary and ('%s is a binary file: no diff'):format(path)
      or nil
    cb(problem, not problem and file or nil)
  end, target)
end

--- `ctxd/recall` on the target's thread (or its workspace, `opts.scope = 'workspace'`).
---@param target ctxd.Target
---@param query string
---@param opts { scope: string?, limit: integer? }
---@param cb ctxd.Callback
function M.recall(target, query, opts, cb)
  client.request(methods.recall, { query = query, scope = opts.scope, limit = opts.limit }, cb, target)
end

---@param text string
---@return string
local function encode(text)
  return (text:gsub('[^%w%-_.~]', function(c)
    return ('%%%02X'):format(c:byte())
  end))
end

---@param text string
---@return string
local function decode(text)
  return (text:gsub('%%(%x%x)', function(hex)
    return string.char(tonumber(hex, 16))
  end))
end

M.ITEM_PREFIX = 'ctxd://item/'

---@class ctxd.ItemRef
---@field workspace string
---@field thread string
---@field seq integer

--- The buffer name of a stored item: `ctxd://item/<workspace>/<thread>/<seq>`, percent-encoded.
---@param ref ctxd.ItemRef
---@return string
function M.item_name(ref)
  return ('%s%s/%s/%d'):format(M.ITEM_PREFIX, encode(ref.workspace), encode(ref.thread), ref.seq)
end

--- The item a `ctxd://item/...` buffer name points at, or nil.
---@param name string
---@return ctxd.ItemRef?
function M.item_ref(name)
  local workspace, thread, seq = name:match('^ctxd://item/([^/]+)/([^/]+)/(%d+)$')
  if not workspace then
    return nil
  end
  return { workspace = decode(workspace), thread = decode(thread), seq = tonumber(seq) --[[@as integer]] }
end

--- Which history operation took an archived item out of the active history (`compaction`,
--- `rollback`, `restore`), read from `ctxd/history` with `includeArchived`; nil when unknown.
---@param ref ctxd.ItemRef
---@param item table the item as `ctxd/item` gave it
---@param cb fun(kind: string?)
local function archived_by(ref, item, cb)
  local target = { workspace = ref.workspace, thread = ref.thread }
  -- Items come in the order first recorded, which is their `seq` order: the item is at seq - 1
  -- unless items were renumbered, which the comparison below catches.
  local params = { includeArchived = true, offset = ref.seq - 1, limit = 1 }
  client.request(methods.history, params, function(err, r)
    local found = not err and type(r) == 'table' and (r.items or {})[1] or nil
    if type(found) ~= 'table' or type(found.archivedBy) ~= 'number' then
      cb(nil)
      return
    end
    local bare = vim.deepcopy(found)
    bare.archived, bare.archivedBy = nil, nil
    if not vim.deep_equal(bare, item) then
      cb(nil)
      return
    end
    for _, op in ipairs(r.operations or {}) do
      if op.id == found.archivedBy then
        cb(op.kind)
        return
      end
    end
    for _, c in ipairs(r.compactions or {}) do
      if c.id == found.archivedBy then
        cb('compaction')
        return
      end
    end
    cb(nil)
  end, target)
end

--- One stored item (`ctxd/item`) and, when it is archived, the kind of the operation that took
--- it out of the active history: `cb(err, result, kind)`.
---@param ref ctxd.ItemRef
---@param cb fun(err: any, result: ctxd.ItemResult?, kind: string?)
function M.item(ref, cb)
  client.request(methods.item, { seq = ref.seq }, function(err, result)
    if err or type(result) ~= 'table' then
      cb(err or { message = 'no item' }, nil, nil)
      return
    end
    if not result.archived then
      cb(nil, result, nil)
      return
    end
    archived_by(ref, result.item, function(kind)
      cb(nil, result, kind)
    end)
  end, { workspace = ref.workspace, thread = ref.thread })
end

return M
