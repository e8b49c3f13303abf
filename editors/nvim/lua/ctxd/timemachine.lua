---@mod ctxd.timemachine Snapshots and history operations: restore, undo-restore, rollback, undo, redo.
---
--- Everything here can be undone, and what undoes it comes from the daemon's own record, never
--- from this Neovim's memory: a restore's safety snapshot is in `ctxd/ghost/list` (`trigger:
--- "restore"`), a thread's operations in `ctxd/history`; so an undo works after Neovim restarts.
--- A followed agent session's conversation is the agent's: what would change it is refused before
--- the daemon is asked, in one sentence that says what works instead (`ctxd.agents`).

local methods = require('ctxd.protocol').methods
local client = require('ctxd.client')
local status = require('ctxd.status')

local M = {}

---@param msg string
---@param level integer?
local function notify(msg, level)
  require('ctxd.notify').say(msg, level)
end

--- A callback that reports errors as `<what> failed: ...` and hands results to `on_result`.
---@param what string
---@param on_result fun(result: any)
---@return ctxd.Callback
function M.handle(what, on_result)
  return function(err, result)
    if type(err) == 'table' and err.stopped then
      -- The daemon stopped under it: the supervisor's one line names it.
      require('ctxd.supervisor').interrupted(what)
      return
    end
    if err then
      notify(('%s failed: %s'):format(what, client.format_error(err)), vim.log.levels.ERROR)
      return
    end
    on_result(result)
  end
end
local handle = M.handle

--- The current workspace and thread as an explicit target, or nil and why not.
---@return ctxd.Target?
---@return string? err
function M.current_target()
  local found, workspace = client.resolve()
  if not found then
    return nil, workspace
  end
  return { workspace = workspace, thread = require('ctxd.threads').current(workspace) }, nil
end

--- Refuse (true) to change a followed agent session's conversation, saying what works instead.
---@param target ctxd.Target
---@return boolean
function M.refuse_read_only(target)
  local threads = require('ctxd.threads')
  if not threads.read_only(target.workspace, target.thread) then
    return false
  end
  notify(require('ctxd.agents').read_only_sentence(threads.source(target.workspace, target.thread)), vim.log.levels.WARN)
  return true
end

---@param list any
---@return integer
local function count(list)
  return type(list) == 'table' and #list or 0
end

--- `2 files written, 1 removed`
---@param r table a restore result (or its dry run)
---@return string
local function files_text(r)
  return ('%d file%s written, %d removed'):format(
    count(r.restored),
    count(r.restored) == 1 and '' or 's',
    count(r.removed)
  )
end

--- How many characters of an id the user must give (`:Ctxd diff 2adb`).
M.MIN_ID = 4
--- How many characters of an id the plugin shows.
M.SHORT_ID = 10

--- The snapshot whose id is `given` or starts with it, or nil and why not.
---@param snapshots table[] GhostCommits
---@param given string
---@return string? id
---@return string? problem
function M.resolve_snapshot(snapshots, given)
  local found = {}
  for _, commit in ipairs(snapshots) do
    local id = tostring(commit.id)
    if id == given then
      return id, nil
    end
    if #given >= M.MIN_ID and vim.startswith(id, given) then
      table.insert(found, id)
    end
  end
  if #found == 1 then
    return found[1], nil
  end
  if #found > 1 then
    return nil, ('%d snapshots start with %s: give more of the id'):format(#found, given)
  end
  if #given < M.MIN_ID then
    return nil, ('%q is too short for a snapshot id: use %d or more characters'):format(given, M.MIN_ID)
  end
  return nil, ('no snapshot %s (:Ctxd diff without an id lists them)'):format(given)
end

--- Each snapshot's id as shown: its first `SHORT_ID` characters, more where two share them.
---@param snapshots table[]
---@return table<string, string> id -> short id
function M.short_ids(snapshots)
  local out = {}
  for _, commit in ipairs(snapshots) do
    local id = tostring(commit.id)
    local n = math.min(M.SHORT_ID, #id)
    for _, other in ipairs(snapshots) do
      local o = tostring(other.id)
      while o ~= id and n < #id and o:sub(1, n) == id:sub(1, n) do
        n = n + 1
      end
    end
    out[id] = id:sub(1, n)
  end
  return out
end

--- Snapshot lists asked for completion, kept a few seconds (one request per burst of <Tab>s).
local completion_cache = {} ---@type table<string, { at: number, snapshots: table[] }>
M.COMPLETION_CACHE_S = 3

--- Short snapshot ids for completion, newest first. Command-line completion takes plain words
--- only (no label column), so the id is all it can show; the picker without an id shows the rest.
---@param arglead string
---@return string[]
function M.complete_snapshot(arglead)
  local found, workspace = client.resolve()
  if not found then
    return {}
  end
  local cached = completion_cache[workspace]
  local now = vim.uv.hrtime() / 1e9
  if not cached or now - cached.at > M.COMPLETION_CACHE_S then
    local err, r = client.request_sync(methods.ghost_list, {}, { workspace = workspace }, 1000)
    if err or type(r) ~= 'table' then
      return {}
    end
    cached = { at = now, snapshots = r.snapshots or {} }
    completion_cache[workspace] = cached
  end
  local shorts = M.short_ids(cached.snapshots)
  local ids = {}
  for _, commit in ipairs(require('ctxd.ui.view').order_snapshots(cached.snapshots)) do
    local short = shorts[tostring(commit.id)]
    if vim.startswith(short, arglead) or vim.startswith(tostring(commit.id), arglead) then
      table.insert(ids, short)
    end
  end
  return ids
end

--- Restore `snapshot` with `params` and say what changed.
---@param target ctxd.Target
---@param snapshot table GhostCommit
---@param conversation boolean
local function do_restore(target, snapshot, conversation)
  local params = { id = snapshot.id, conversation = conversation }
  client.request(methods.ghost_restore, params, handle('restore', function(r)
    vim.cmd.checktime()
    local text = ('restored %s: %s'):format(tostring(r.id or snapshot.id):sub(1, M.SHORT_ID), files_text(r))
    if conversation then
      text = text .. (', %s ledger items dropped'):format(tostring(r.removedItems or 0))
    end
    if type(r.undoId) == 'string' then
      local both = conversation and type(r.operationId) == 'number'
      text = text .. (both and '; :Ctxd undo puts the files and the conversation back'
        or '; :Ctxd undo-restore puts the files back')
    end
    notify(text)
  end), target)
end

--- Offer what can be restored of `snapshot` for the target's thread: its files when a dry run
--- says they differ, its conversation when the snapshot is in this thread and the thread is the
--- client's own (a followed agent session's history belongs to the agent).
---@param target ctxd.Target
---@param snapshot table GhostCommit
---@param in_thread boolean
---@param dry_run boolean the daemon can preview a restore (protocol 2)
local function offer_restore(target, snapshot, in_thread, dry_run)
  local threads = require('ctxd.threads')
  local read_only = threads.read_only(target.workspace, target.thread)
  local function choose(preview)
    local choices = {}
    local files_differ = not preview or count(preview.restored) + count(preview.removed) > 0
    local files_label = preview and ('Files only (%s)'):format(files_text(preview)) or 'Files only'
    if files_differ then
      table.insert(choices, { label = files_label, conversation = false })
    end
    if in_thread and not read_only then
      local label = 'Files and conversation (back to this snapshot)'
      if preview then
        label = ('Files and conversation (%s; the thread back to this snapshot)'):format(files_text(preview))
      end
      table.insert(choices, { label = label, conversation = true })
    end
    if #choices == 0 then
      notify(('nothing to restore: the files are as at snapshot %s%s'):format(
        tostring(snapshot.id):sub(1, M.SHORT_ID),
        read_only and (' (%s)'):format(require('ctxd.agents').read_only_sentence(threads.source(target.workspace, target.thread)))
          or ' (it is not in this thread\'s conversation)'
      ), vim.log.levels.WARN)
      return
    end
    vim.ui.select(choices, {
      prompt = 'Restore what?',
      format_item = function(c)
        return c.label
      end,
      kind = 'ctxd.restore',
    }, function(choice)
      if choice then
        do_restore(target, snapshot, choice.conversation)
      end
    end)
  end
  if not dry_run then
    choose(nil)
    return
  end
  client.request(methods.ghost_restore, { id = snapshot.id, dryRun = true }, handle('restore', choose), target)
end

--- `:Ctxd restore [id]`: the snapshot `id` names (any unique prefix of 4 characters or more),
--- else one picked from the list; then what to restore of it.
---@param args string[]
function M.restore(args)
  local target, why = M.current_target()
  if not target then
    notify('restore failed: ' .. tostring(why), vim.log.levels.ERROR)
    return
  end
  local lsp_client = client.resolve(target)
  -- A preview (`dryRun`) came with the rest of protocol 2's snapshot methods. A daemon that
  -- does not know it would restore for real, so ask for one only when those are there.
  local dry_run = lsp_client ~= nil
    and client.supports(lsp_client, methods.ghost_diff)
    and client.supports(lsp_client, methods.ghost_delete)
  client.request(methods.ghost_list, {}, handle('restore', function(r)
    local snapshots = r.snapshots or {}
    local chosen ---@type table?
    if args[1] then
      local id, problem = M.resolve_snapshot(snapshots, args[1])
      if not id then
        notify('restore failed: ' .. tostring(problem), vim.log.levels.ERROR)
        return
      end
      for _, commit in ipairs(snapshots) do
        if commit.id == id then
          chosen = commit
        end
      end
    elseif #snapshots == 0 then
      notify('no snapshots yet (take one with :Ctxd snapshot)', vim.log.levels.WARN)
      return
    end
    -- Which snapshots this thread's conversation holds: only those can roll it back.
    client.request(methods.history, {}, handle('restore', function(history)
      local mine = {}
      for _, item in ipairs(history.items or {}) do
        if item.type == 'ghost_snapshot' and type(item.ghost_commit) == 'table' then
          mine[item.ghost_commit.id] = true
        end
      end
      if chosen then
        offer_restore(target, chosen, mine[chosen.id] == true, dry_run)
        return
      end
      local view = require('ctxd.ui.view')
      -- Newest first, an agent turn's checkpoints together under it.
      vim.ui.select(view.order_snapshots(snapshots), {
        prompt = 'Restore snapshot',
        format_item = function(commit)
          return view.format_snapshot(commit) .. (mine[commit.id] and '  · this thread' or '')
        end,
        kind = 'ctxd.snapshot',
      }, function(choice)
        if choice then
          offer_restore(target, choice, mine[choice.id] == true, dry_run)
        end
      end)
    end), target)
  end), target)
end

--- The undo point of the workspace's last restore, from `ctxd/ghost/list`: a restore cut short by
--- a crash (`interruptedRestore`), else the newest safety snapshot (`trigger: "restore"`, taken
--- just before a restore: restoring it undoes that restore). When that newest one was itself
--- taken by an undo (it is "before restoring" the safety snapshot before it), the last restore
--- is undone already: nil and why.
---@param list { snapshots: table[]?, interruptedRestore: table? }
---@return { id: string, of: string? }?
---@return string? why
function M.last_restore(list)
  local interrupted = list.interruptedRestore
  if type(interrupted) == 'table' and type(interrupted.undoId) == 'string' then
    return { id = interrupted.undoId, of = type(interrupted.id) == 'string' and interrupted.id or nil }, nil
  end
  local safety = vim.tbl_filter(function(commit)
    return commit.trigger == 'restore'
  end, list.snapshots or {})
  local newest, before = safety[1], safety[2]
  if not newest then
    return nil, 'no restore in this workspace'
  end
  local of = type(newest.message) == 'string' and newest.message:match('(%x%x%x%x%x%x%x+)') or nil
  if of and before and vim.startswith(tostring(before.id), of) then
    return nil, 'the last restore in this workspace was undone already'
  end
  return { id = newest.id, of = of }, nil
end

--- Undo the workspace's last restore by restoring its safety snapshot, with the conversation
--- when that restore changed this thread's (the daemon's dry run says whether it can).
--- `instead()`: what to do when there is no restore to undo, or (with `conversation_only`) when
--- the last restore did not change this thread's conversation.
---@param target ctxd.Target
---@param opts { instead: fun()?, conversation_only: boolean? }?
function M.undo_restore(target, opts)
  opts = opts or {}
  client.request(methods.ghost_list, {}, handle('undo-restore', function(list)
    local undo, why = M.last_restore(list)
    if not undo then
      if opts.instead then
        opts.instead()
      else
        notify('nothing to undo: ' .. tostring(why), vim.log.levels.WARN)
      end
      return
    end
    local function run(conversation)
      if opts.conversation_only and not conversation and opts.instead then
        opts.instead()
        return
      end
      client.request(methods.ghost_restore, { id = undo.id, conversation = conversation },
        handle('undo-restore', function(r)
          vim.cmd.checktime()
          notify(('undid the restore of %s: %s%s'):format(undo.of and undo.of:sub(1, M.SHORT_ID) or 'the last snapshot',
            files_text(r), conversation and ', and the conversation is back' or ''))
        end), target)
    end
    if require('ctxd.threads').read_only(target.workspace, target.thread) then
      run(false)
      return
    end
    -- With the conversation only when the daemon can: restoring the safety snapshot of a restore
    -- that changed this thread undoes that operation; any other is refused, and changes nothing.
    client.request(methods.ghost_restore, { id = undo.id, conversation = true, dryRun = true }, function(err)
      if type(err) == 'table' and err.stopped then
        require('ctxd.supervisor').interrupted('undo-restore')
        return
      end
      run(err == nil)
    end, target)
  end), target)
end

--- `2 turns`
---@param n integer
---@return string
local function turns_text(n)
  return ('%d turn%s'):format(n, n == 1 and '' or 's')
end

--- `4 items removed, 4.5k tokens after`: what a rollback (or its dry run) does.
---@param r table
---@return string
local function rollback_effect(r)
  return ('%s item%s removed, %s tokens after'):format(tostring(r.removedItems), r.removedItems == 1 and '' or 's',
    type(r.tokensAfter) == 'number' and status.format_tokens(r.tokensAfter) or '?')
end

--- The number of turns a rollback of `turns` really drops, by dry runs: `turns` when the thread
--- has that many; else the thread's own count (the fewest turns that drop as much), found by
--- halving. `cb(n, preview_of_n)`.
---@param target ctxd.Target
---@param turns integer
---@param preview table the dry run of `turns`
---@param cb fun(n: integer, preview: table)
local function bound_turns(target, turns, preview, cb)
  local function dry(n, next_step)
    client.request(methods.rollback, { turns = n, dryRun = true }, handle('rollback', next_step), target)
  end
  if turns == 1 then
    cb(1, preview)
    return
  end
  dry(turns - 1, function(fewer)
    if fewer.removedItems < preview.removedItems then
      cb(turns, preview) -- the thread has at least `turns` turns
      return
    end
    -- removedItems grows with each turn until none is left: the smallest n dropping as much.
    local lo, hi, best = 0, turns - 1, fewer
    local function step()
      if hi - lo <= 1 then
        cb(hi, best)
        return
      end
      local mid = math.floor((lo + hi) / 2)
      dry(mid, function(p)
        if p.removedItems >= preview.removedItems then
          hi, best = mid, p
        else
          lo = mid
        end
        step()
      end)
    end
    step()
  end)
end

--- `:Ctxd rollback [n]`: drop the last `n` user turns, after saying what goes (a thread of 5
--- turns offers its 5, whatever `n`).
---@param args string[]
function M.rollback(args)
  local turns = tonumber(args[1] or '1')
  -- `inf` and `1e400` are numbers to Lua, not to JSON (sending them raises).
  if not turns or turns < 1 or turns ~= math.floor(turns) or turns == math.huge then
    notify(('rollback takes a positive number of turns, got %q'):format(args[1]), vim.log.levels.ERROR)
    return
  end
  local target, why = M.current_target()
  if not target then
    notify('rollback failed: ' .. tostring(why), vim.log.levels.ERROR)
    return
  end
  if M.refuse_read_only(target) then
    return
  end
  local function run(n)
    client.request(methods.rollback, { turns = n }, handle('rollback', function(r)
      local text = ('rolled back %s: %s'):format(turns_text(n), rollback_effect(r))
      if r.undoId then
        text = text .. '; :Ctxd undo puts it back'
      end
      notify(text)
    end), target)
  end
  local lsp_client = client.resolve(target)
  if not (lsp_client and client.supports(lsp_client, methods.undo)) then
    run(turns) -- a daemon before protocol 3 has no preview (and no undo) to offer
    return
  end
  -- Ask first, saying what it drops, and whether it goes back past a compaction.
  client.request(methods.rollback, { turns = turns, dryRun = true }, handle('rollback', function(preview)
    if preview.removedItems == 0 then
      notify('nothing to roll back: the thread has no user turn', vim.log.levels.WARN)
      return
    end
    bound_turns(target, turns, preview, function(n, p)
      local label = ('Roll back %s: %s'):format(turns_text(n), rollback_effect(p))
      if n < turns then
        label = ('Roll back all %s of the thread (you asked for %d): %s'):format(turns_text(n), turns, rollback_effect(p))
      end
      if p.crossesCompaction then
        label = label .. ', back past a compaction (what it replaced comes back)'
      end
      vim.ui.select({ { label = label, go = true }, { label = 'Cancel', go = false } }, {
        prompt = p.crossesCompaction and 'Roll back past a compaction?' or 'Roll back?',
        format_item = function(c)
          return c.label
        end,
        kind = 'ctxd.rollback',
      }, function(choice)
        if choice and choice.go then
          run(n)
        end
      end)
    end)
  end), target)
end

--- The operation `:Ctxd undo` undoes: the newest one still in effect that is not itself an undo.
---@param ops table[] `ctxd/history`'s operations, oldest first
---@return table?
function M.last_undoable(ops)
  for i = #ops, 1, -1 do
    if ops[i].kind ~= 'undo' and ops[i].undoneBy == nil then
      return ops[i]
    end
  end
  return nil
end

--- The undo `:Ctxd redo` undoes: the newest undo still in effect that undid a compaction, a
--- rollback or a restore (not another undo).
---@param ops table[]
---@return table?
---@return table? undid
function M.last_redoable(ops)
  local undid = {}
  for _, op in ipairs(ops) do
    if op.kind ~= 'undo' and op.undoneBy ~= nil then
      undid[op.undoneBy] = op
    end
  end
  for i = #ops, 1, -1 do
    if ops[i].kind == 'undo' and ops[i].undoneBy == nil and undid[ops[i].id] then
      return ops[i], undid[ops[i].id]
    end
  end
  return nil
end

local kind_words = { compaction = 'compaction', rollback = 'rollback', restore = 'restore of the conversation' }

--- `12.3k -> 4.5k tokens` from an operation's record, going `from` -> `to` (`Before`/`After`);
--- items when the tokens were not recorded.
---@param op table
---@param from string
---@param to string
---@return string
local function op_change(op, from, to)
  local a, b = op['tokens' .. from], op['tokens' .. to]
  if type(a) == 'number' and type(b) == 'number' then
    return ('%s -> %s tokens'):format(status.format_tokens(a), status.format_tokens(b))
  end
  return ('%d -> %d items'):format(op['items' .. from] or 0, op['items' .. to] or 0)
end

--- Run `ctxd/undo` on operation `op` of the target's thread and say `said`.
local function undo_operation(target, op, said)
  client.request(methods.undo, { id = op.id }, handle(said.what, function(r)
    notify(said.text)
    if type(r.usage) == 'table' then
      status.seed(target.workspace, target.thread, r.usage)
      vim.cmd.redrawstatus({ bang = true })
    end
  end), target)
end

--- `:Ctxd undo`: the thread's latest history operation still in effect (a compaction, a
--- rollback, a restore with the conversation); a restore gets its files back too.
function M.undo()
  local target, why = M.current_target()
  if not target then
    notify('undo failed: ' .. tostring(why), vim.log.levels.ERROR)
    return
  end
  if M.refuse_read_only(target) then
    return
  end
  client.request(methods.history, { includeArchived = true, limit = 0 }, handle('undo', function(history)
    local last = M.last_undoable(history.operations or {})
    if not last then
      notify('nothing to undo: no compaction, rollback or restore of this thread is in effect', vim.log.levels.WARN)
      return
    end
    local said = { what = 'undo', text = ('undid the %s (%s); :Ctxd redo redoes it'):format(
      kind_words[last.kind] or last.kind, op_change(last, 'After', 'Before')) }
    if last.kind == 'restore' then
      -- Its files come back with it when its safety snapshot is the workspace's last restore.
      M.undo_restore(target, {
        conversation_only = true,
        instead = function()
          undo_operation(target, last, said)
        end,
      })
      return
    end
    undo_operation(target, last, said)
  end), target)
end

--- `:Ctxd redo`: what the last `:Ctxd undo` undid.
function M.redo()
  local target, why = M.current_target()
  if not target then
    notify('redo failed: ' .. tostring(why), vim.log.levels.ERROR)
    return
  end
  if M.refuse_read_only(target) then
    return
  end
  client.request(methods.history, { includeArchived = true, limit = 0 }, handle('redo', function(history)
    local undo, undid = M.last_redoable(history.operations or {})
    if not undo or not undid then
      notify('nothing to redo: no undo of this thread is in effect', vim.log.levels.WARN)
      return
    end
    undo_operation(target, undo, { what = 'redo', text = ('redid the %s (%s)'):format(
      kind_words[undid.kind] or undid.kind, op_change(undid, 'Before', 'After')) })
  end), target)
end

return M
