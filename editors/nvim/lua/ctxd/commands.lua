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

--- Errors reported as `<what> failed: ...`, results handed on (`ctxd.timemachine`).
local function handle(what, on_result)
  return require('ctxd.timemachine').handle(what, on_result)
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
---@field complete (fun(arglead: string, words: string[]): string[])? `words`: those typed after the subcommand
---@field every_arg boolean? `complete` completes every argument, not only the first

---@type table<string, ctxd.Subcommand>
M.subcommands = {}

--- The current workspace and thread as an explicit target, or nil and why not.
---@return ctxd.Target?
---@return string? err
local function current_target()
  return require('ctxd.timemachine').current_target()
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
    -- A followed session: its agent compacts it; ctxd only shows it (read-only).
    if target and require('ctxd.timemachine').refuse_read_only(target) then
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

M.subcommands.restore = {
  run = function(args)
    require('ctxd.timemachine').restore(args)
  end,
  complete = function(arglead)
    return require('ctxd.timemachine').complete_snapshot(arglead)
  end,
}

M.subcommands['undo-restore'] = {
  run = function()
    local timemachine = require('ctxd.timemachine')
    local target, why = timemachine.current_target()
    if not target then
      notify('undo-restore failed: ' .. tostring(why), vim.log.levels.ERROR)
      return
    end
    timemachine.undo_restore(target)
  end,
}

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
        local id, problem = require('ctxd.timemachine').resolve_snapshot(r.snapshots or {}, args[1])
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
  complete = function(arglead)
    return require('ctxd.timemachine').complete_snapshot(arglead)
  end,
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

M.subcommands.rollback = {
  run = function(args)
    require('ctxd.timemachine').rollback(args)
  end,
}

M.subcommands.undo = {
  run = function()
    require('ctxd.timemachine').undo()
  end,
}

M.subcommands.redo = {
  run = function()
    require('ctxd.timemachine').redo()
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
          local _, why = require('ctxd.supervisor').not_runnable(cmd[1])
          notify(why .. '; see :checkhealth ctxd', vim.log.levels.ERROR)
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
        status.mark_stale(folder) -- the gauge keeps its figures, dimmed, until the new daemon's
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

M.subcommands.hooks = {
  run = function(args)
    require('ctxd.hooks').command(args)
  end,
  complete = function(arglead, words)
    return require('ctxd.hooks').complete(arglead, words)
  end,
  every_arg = true,
}

M.subcommands.menu = {
  run = function()
    require('ctxd.menu').open()
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
  if not (sub and sub.complete) then
    return {}
  end
  local after = vim.list_slice(words, 2)
  if sub.every_arg or #after == 0 or (#after == 1 and arglead ~= '') then
    return sub.complete(arglead, after)
  end
  return {}
end

return M
