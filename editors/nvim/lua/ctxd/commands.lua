---@mod ctxd.commands The `:Ctxd` subcommands and their completion.

local methods = require('ctxd.protocol').methods
local client = require('ctxd.client')
local config = require('ctxd.config')
local status = require('ctxd.status')

local M = {}

M.strategies = { 'auto', 'llm', 'remote', 'offline' }

--- One line that fits the command line (`ctxd.notify`).
---@param msg string
---@param level integer?
local function notify(msg, level)
  require('ctxd.notify').say(msg, level)
end

--- A callback that reports errors as `ctxd <what> failed: ...` and hands results to `on_result`.
---@param what string
---@param on_result fun(result: any)
---@return ctxd.Callback
local function handle(what, on_result)
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

---@param params table
---@param kind string
local function with_progress(params, kind)
  if config.options.progress then
    params.workDoneToken = client.progress_token(kind)
  end
  return params
end

---@class ctxd.Subcommand
---@field run fun(args: string[])
---@field complete (fun(arglead: string): string[])?

---@type table<string, ctxd.Subcommand>
M.subcommands = {}

--- The current workspace and thread as an explicit target, or nil and why not.
---@return ctxd.Target?
---@return string? err
local function current_target()
  local found, workspace = client.resolve()
  if not found then
    return nil, workspace
  end
  return { workspace = workspace, thread = require('ctxd.threads').current(workspace) }, nil
end

M.subcommands.usage = {
  run = function()
    local target = current_target()
    client.request(methods.usage, {}, handle('usage', function(result)
      require('ctxd.ui').open_breakdown(result, target)
    end), target)
  end,
}

M.subcommands.compact = {
  run = function(args)
    local strategy = args[1] or 'auto'
    if not vim.tbl_contains(M.strategies, strategy) then
      notify(('unknown strategy %q (one of %s)'):format(strategy, table.concat(M.strategies, ', ')), vim.log.levels.ERROR)
      return
    end
    local target = current_target()
    local agent = target and target.thread and target.thread:match('^(%a+):')
    if agent == 'codex' or agent == 'claude' then
      -- A followed session: its agent compacts it; ctxd only shows it (read-only).
      notify(('thread %s follows a %s session: %s compacts it by itself'):format(
        target.thread, agent == 'codex' and 'Codex' or 'Claude Code', agent == 'codex' and 'Codex' or 'Claude Code'))
      return
    end
    local lsp = require('ctxd.lsp')
    local found = target and client.resolve(target)
    if found then
      lsp.manual_compaction(found.id, target.thread, 1)
    end
    local report = handle('compact', function(r)
      local text = ('compacted %s -> %s tokens (%s)'):format(
        status.format_tokens(r.tokensBefore or 0),
        status.format_tokens(r.tokensAfter or 0),
        tostring(r.strategy)
      )
      if type(r.fallbackReason) == 'string' then
        notify(text .. '; the model endpoint failed: ' .. r.fallbackReason, vim.log.levels.WARN)
      else
        notify(text)
      end
    end)
    client.request(methods.compact, with_progress({ strategy = strategy }, 'compact'), function(err, result)
      if found and err then
        lsp.manual_compaction(found.id, target.thread, -1)
      end
      report(err, result)
    end, target)
  end,
  complete = function(arglead)
    return vim.tbl_filter(function(s)
      return vim.startswith(s, arglead)
    end, M.strategies)
  end,
}

M.subcommands.snapshot = {
  run = function(args)
    local params = with_progress({}, 'snapshot')
    if #args > 0 then
      params.message = table.concat(args, ' ')
    end
    client.request(methods.ghost_snapshot, params, handle('snapshot', function(r)
      local skipped = type(r.skipped) == 'table' and #r.skipped or 0
      notify(('snapshot %s: %s files%s'):format(
        tostring(r.id):sub(1, 10),
        tostring(r.fileCount),
        skipped > 0 and (', %d skipped'):format(skipped) or ''
      ))
    end))
  end,
}

--- The `undoId` of the last restore per workspace (`:Ctxd undo-restore`); for a restore with the
--- conversation (v3) also its thread and history operation (`:Ctxd undo` restores both).
---@type table<string, { id: string, of: string, conversation: boolean?, thread: string?, operation: integer? }>
M.undo = {}

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

--- Restore `snapshot` with `params`, remember its `undoId` and say what changed.
---@param target ctxd.Target
---@param snapshot table GhostCommit
---@param conversation boolean
local function do_restore(target, snapshot, conversation)
  local params = { id = snapshot.id, conversation = conversation }
  client.request(methods.ghost_restore, params, handle('restore', function(r)
    vim.cmd.checktime()
    local text = ('restored %s: %s'):format(tostring(r.id or snapshot.id):sub(1, 10), files_text(r))
    if conversation then
      text = text .. (', %s ledger items dropped'):format(tostring(r.removedItems or 0))
    end
    if type(r.undoId) == 'string' then
      -- v3: a restore with the conversation is undone with the conversation (files and history).
      local both = conversation and type(r.operationId) == 'number'
      M.undo[target.workspace] = { id = r.undoId, of = snapshot.id, conversation = both or nil,
        thread = target.thread, operation = both and r.operationId or nil }
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
  local read_only = threads.source(target.workspace, target.thread) ~= 'client'
    or (threads.info(target.workspace, target.thread) or {}).readOnly == true
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
        tostring(snapshot.id):sub(1, 10),
        read_only and ' (this thread is an agent session: its conversation is the agent\'s)'
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

M.subcommands.restore = {
  run = function()
    local target, why = current_target()
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
      if #snapshots == 0 then
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
        -- Newest first, an agent turn's checkpoints together under it.
        vim.ui.select(require('ctxd.ui.view').order_snapshots(snapshots), {
          prompt = 'Restore snapshot',
          format_item = function(commit)
            return require('ctxd.ui.view').format_snapshot(commit) .. (mine[commit.id] and '  · this thread' or '')
          end,
          kind = 'ctxd.snapshot',
        }, function(choice)
          if choice then
            offer_restore(target, choice, mine[choice.id] == true, dry_run)
          end
        end)
      end), target)
    end), target)
  end,
}

M.subcommands['undo-restore'] = {
  run = function()
    local target, why = current_target()
    if not target then
      notify('undo-restore failed: ' .. tostring(why), vim.log.levels.ERROR)
      return
    end
    local undo = M.undo[target.workspace]
    if not undo then
      notify('nothing to undo: no restore in this workspace since Neovim started', vim.log.levels.WARN)
      return
    end
    local where = undo.conversation and { workspace = target.workspace, thread = undo.thread } or target
    client.request(methods.ghost_restore, { id = undo.id, conversation = undo.conversation == true },
      handle('undo-restore', function(r)
        M.undo[target.workspace] = nil
        vim.cmd.checktime()
        notify(('undid the restore of %s: %s%s'):format(tostring(undo.of):sub(1, 10), files_text(r),
          undo.conversation and ', and the conversation is back' or ''))
      end), where)
  end,
}

--- Snapshot ids for completion (newest first), asked of the daemon with a short wait.
---@param arglead string
---@return string[]
local function complete_snapshot(arglead)
  local err, r = client.request_sync(methods.ghost_list, {}, nil, 1000)
  if err or type(r) ~= 'table' then
    return {}
  end
  local ids = {}
  for _, commit in ipairs(r.snapshots or {}) do
    local id = tostring(commit.id)
    if vim.startswith(id, arglead) then
      table.insert(ids, id)
    end
  end
  return ids
end

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
    if #given >= 4 and vim.startswith(id, given) then
      table.insert(found, id)
    end
  end
  if #found == 1 then
    return found[1], nil
  end
  if #found > 1 then
    return nil, ('%d snapshots start with %s: give more of the id'):format(#found, given)
  end
  return nil, ('no snapshot %s (:Ctxd diff without an id lists them)'):format(given)
end

M.subcommands.diff = {
  run = function(args)
    local target, why = current_target()
    if not target then
      notify('diff failed: ' .. tostring(why), vim.log.levels.ERROR)
      return
    end
    local lsp_client = client.resolve(target)
    if lsp_client and not client.supports(lsp_client, methods.ghost_diff) then
      notify('this daemon cannot diff snapshots: update it (see :checkhealth ctxd)',
        vim.log.levels.ERROR)
      return
    end
    local function show(id)
      client.request(methods.ghost_diff, { id = id }, handle('diff', function(r)
        local ui = require('ctxd.ui')
        ui.set_diff_quickfix(target.workspace, id, r.files or {})
        if #(r.files or {}) == 0 then
          notify(('no changes since snapshot %s'):format(id:sub(1, 10)))
          return
        end
        vim.cmd('botright copen')
        if args[2] then
          ui.open_file_diff(target, id, args[2])
        end
      end), target)
    end
    if args[1] then
      -- The ids printed everywhere are short: take any unique prefix.
      client.request(methods.ghost_list, {}, handle('diff', function(r)
        local id, problem = M.resolve_snapshot(r.snapshots or {}, args[1])
        if not id then
          notify('diff failed: ' .. problem, vim.log.levels.ERROR)
          return
        end
        show(id)
      end), target)
      return
    end
    client.request(methods.ghost_list, {}, handle('diff', function(r)
      if #(r.snapshots or {}) == 0 then
        notify('no snapshots yet (take one with :Ctxd snapshot)', vim.log.levels.WARN)
        return
      end
      vim.ui.select(require('ctxd.ui.view').order_snapshots(r.snapshots), {
        prompt = 'Changes since snapshot',
        format_item = require('ctxd.ui.view').format_snapshot,
        kind = 'ctxd.snapshot',
      }, function(choice)
        if choice then
          show(choice.id)
        end
      end)
    end), target)
  end,
  complete = complete_snapshot,
}

M.subcommands.threads = {
  run = function()
    local target, why = current_target()
    if not target then
      notify('threads failed: ' .. tostring(why), vim.log.levels.ERROR)
      return
    end
    local lsp_client = assert(client.resolve(target))
    local threads = require('ctxd.threads')
    threads.refresh(lsp_client, target.workspace, function(list, err)
      if err then
        notify('threads failed: ' .. client.format_error(err), vim.log.levels.ERROR)
        return
      end
      local view = require('ctxd.ui.view')
      local format = view.thread_formatter(target.workspace, list, threads.current(target.workspace))
      local items = vim.list_extend({ { follow = true } }, list)
      vim.ui.select(items, {
        prompt = 'ctxd thread',
        format_item = format,
        kind = 'ctxd.thread',
      }, function(choice)
        if not choice then
          return
        end
        if choice.follow then
          config.options.thread = nil
          threads.pick(target.workspace, nil) -- the listing just read set the most recent
        else
          threads.pick(target.workspace, choice.thread)
        end
        local thread = threads.current(target.workspace)
        local where = { workspace = target.workspace, thread = thread }
        client.request(methods.usage, {}, function(e, result)
          if e then
            notify('threads failed: ' .. client.format_error(e), vim.log.levels.ERROR)
            return
          end
          if type(result) == 'table' and type(result.usage) == 'table' then
            status.seed(target.workspace, thread, result.usage)
          end
          vim.cmd.redrawstatus({ bang = true })
          notify(('%s %s'):format(
            choice.follow and 'following the most recently active thread:' or 'following',
            view.thread_name(target.workspace, thread)
          ))
        end, where)
      end)
    end)
  end,
}

--- `2 turns (5 items) · 1.2k tokens after`
---@param turns integer
---@param r table a rollback result or its dry run
---@return string
local function rollback_text(turns, r)
  return ('%d turn%s (%s items removed, %s tokens after)'):format(
    turns, turns == 1 and '' or 's', tostring(r.removedItems), tostring(r.tokensAfter or '?'))
end

M.subcommands.rollback = {
  run = function(args)
    local turns = tonumber(args[1] or '1')
    if not turns or turns < 1 or turns ~= math.floor(turns) then
      notify(('rollback takes a positive number of turns, got %q'):format(args[1]), vim.log.levels.ERROR)
      return
    end
    local target, why = current_target()
    if not target then
      notify('rollback failed: ' .. tostring(why), vim.log.levels.ERROR)
      return
    end
    local function run()
      client.request(methods.rollback, { turns = turns }, handle('rollback', function(r)
        local text = 'rolled back ' .. rollback_text(turns, r)
        if r.undoId then
          text = text .. '; :Ctxd undo puts it back'
        end
        notify(text)
      end), target)
    end
    local lsp_client = client.resolve(target)
    if not (lsp_client and client.supports(lsp_client, methods.undo)) then
      run() -- a daemon before protocol 3 has no preview (and no undo) to offer
      return
    end
    -- Ask first, saying what it drops, and whether it goes back past a compaction.
    client.request(methods.rollback, { turns = turns, dryRun = true }, handle('rollback', function(preview)
      if preview.removedItems == 0 then
        notify('nothing to roll back: the thread has no user turn', vim.log.levels.WARN)
        return
      end
      local label = 'Roll back ' .. rollback_text(turns, preview)
      if preview.crossesCompaction then
        label = label .. ', back past a compaction (what it replaced comes back)'
      end
      vim.ui.select({ { label = label, go = true }, { label = 'Cancel', go = false } }, {
        prompt = preview.crossesCompaction and 'Roll back past a compaction?' or 'Roll back?',
        format_item = function(c)
          return c.label
        end,
        kind = 'ctxd.rollback',
      }, function(choice)
        if choice and choice.go then
          run()
        end
      end)
    end), target)
  end,
}

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

--- Undo the thread's latest history operation still in effect (a compaction, a rollback, a
--- restore with the conversation); a restore run from this Neovim gets its files back too.
M.subcommands.undo = {
  run = function()
    local target, why = current_target()
    if not target then
      notify('undo failed: ' .. tostring(why), vim.log.levels.ERROR)
      return
    end
    client.request(methods.history, { includeArchived = true, limit = 0 }, handle('undo', function(history)
      local last = M.last_undoable(history.operations or {})
      if not last then
        notify('nothing to undo: no compaction, rollback or restore of this thread is in effect', vim.log.levels.WARN)
        return
      end
      local remembered = M.undo[target.workspace]
      if last.kind == 'restore' and remembered and remembered.operation == last.id and remembered.thread == target.thread then
        M.subcommands['undo-restore'].run()
        return
      end
      undo_operation(target, last, { what = 'undo', text = ('undid the %s (%d -> %d items); :Ctxd redo redoes it'):format(
        kind_words[last.kind] or last.kind, last.itemsAfter or 0, last.itemsBefore or 0) })
    end), target)
  end,
}

--- Redo what the last `:Ctxd undo` undid.
M.subcommands.redo = {
  run = function()
    local target, why = current_target()
    if not target then
      notify('redo failed: ' .. tostring(why), vim.log.levels.ERROR)
      return
    end
    client.request(methods.history, { includeArchived = true, limit = 0 }, handle('redo', function(history)
      local undo, undid = M.last_redoable(history.operations or {})
      if not undo then
        notify('nothing to redo: no undo of this thread is in effect', vim.log.levels.WARN)
        return
      end
      undo_operation(target, undo, { what = 'redo', text = ('redid the %s (%d -> %d items)'):format(
        kind_words[undid.kind] or undid.kind, undid.itemsBefore or 0, undid.itemsAfter or 0) })
    end), target)
  end,
}

M.subcommands.recall = {
  run = function(args)
    local query = vim.trim(table.concat(args, ' '))
    if query == '' then
      notify('recall takes words to search for: :Ctxd recall {query}', vim.log.levels.ERROR)
      return
    end
    local target, why = current_target()
    if not target then
      notify('recall failed: ' .. tostring(why), vim.log.levels.ERROR)
      return
    end
    local lsp_client = client.resolve(target)
    if lsp_client and not client.supports(lsp_client, methods.recall) then
      notify('this daemon cannot search the history: update it (see :checkhealth ctxd)', vim.log.levels.ERROR)
      return
    end
    require('ctxd.ui').recall(target, query, handle('recall', function() end))
  end,
}

M.subcommands.log = {
  run = function()
    local target, why = current_target()
    if not target then
      notify('log failed: ' .. tostring(why), vim.log.levels.ERROR)
      return
    end
    client.request(methods.history, {}, handle('log', function(r)
      require('ctxd.ui').open_history(r, target.thread)
    end), target)
  end,
}

--- Stop every ctxd client and start it again on the buffers it had.
M.subcommands.restart = {
  run = function()
    local clients = client.clients()
    local supervisor = require('ctxd.supervisor')
    supervisor.reset()
    if #clients == 0 then
      if vim.lsp.is_enabled('ctxd') then
        local cmd = (vim.lsp.config.ctxd or {}).cmd
        if type(cmd) == 'table' and cmd[1] and vim.fn.executable(cmd[1]) == 0 then
          notify(('the daemon is not installed (%s not found); see :checkhealth ctxd'):format(cmd[1]), vim.log.levels.ERROR)
          return
        end
        vim.lsp.enable('ctxd', false)
        vim.lsp.enable('ctxd')
        -- Said when it answers; a daemon that exits first is said by the supervisor instead.
        local timer = assert(vim.uv.new_timer())
        local waited = 0
        timer:start(50, 50, vim.schedule_wrap(function()
          waited = waited + 50
          local started = vim.iter(client.clients()):any(function(c)
            return c.initialized
          end)
          if started or waited >= 30000 then
            timer:stop()
            timer:close()
            if started then
              notify('started')
            end
          end
        end))
      else
        notify('not running, and not enabled (vim.lsp.enable("ctxd"))', vim.log.levels.WARN)
      end
      return
    end
    for _, c in ipairs(clients) do
      local buffers = vim.tbl_keys(c.attached_buffers)
      local cfg = c.config
      for _, folder in ipairs(client.folders(c)) do
        status.forget(folder)
      end
      supervisor.stopping(c.id)
      c:stop()
      local timer = assert(vim.uv.new_timer())
      local waited = 0
      timer:start(20, 20, vim.schedule_wrap(function()
        waited = waited + 20
        if not c:is_stopped() and waited < 5000 then
          return
        end
        timer:stop()
        timer:close()
        if not c:is_stopped() then
          c:stop(true)
        end
        for _, buf in ipairs(buffers) do
          if vim.api.nvim_buf_is_valid(buf) then
            vim.lsp.start(cfg, { bufnr = buf })
          end
        end
        notify('restarted')
      end))
    end
  end,
}

--- Run `:Ctxd {fargs}`.
---@param fargs string[]
function M.run(fargs)
  local name = fargs[1]
  if not name then
    M.subcommands.usage.run({})
    return
  end
  local sub = M.subcommands[name]
  if not sub then
    notify(('unknown subcommand %q (one of %s)'):format(name, table.concat(M.names(), ', ')), vim.log.levels.ERROR)
    return
  end
  sub.run(vim.list_slice(fargs, 2))
end

---@return string[]
function M.names()
  local names = vim.tbl_keys(M.subcommands)
  table.sort(names)
  return names
end

--- Completion for `:Ctxd`.
---@param arglead string
---@param cmdline string
---@return string[]
function M.complete(arglead, cmdline)
  local words = vim.split(cmdline:gsub('^%s*%S+%s*', ''), '%s+', { trimempty = true })
  local completing_first = #words == 0 or (#words == 1 and arglead ~= '')
  if completing_first then
    return vim.tbl_filter(function(n)
      return vim.startswith(n, arglead)
    end, M.names())
  end
  local sub = M.subcommands[words[1]]
  if sub and sub.complete and (#words == 1 or (#words == 2 and arglead ~= '')) then
    return sub.complete(arglead)
  end
  return {}
end

return M
