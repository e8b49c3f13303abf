---@mod ctxd.commands The `:Ctxd` subcommands and their completion.

local client = require('ctxd.client')
local config = require('ctxd.config')
local status = require('ctxd.status')

local M = {}

M.strategies = { 'auto', 'llm', 'remote', 'offline' }

---@param msg string
---@param level integer?
local function notify(msg, level)
  vim.notify('ctxd: ' .. msg, level or vim.log.levels.INFO)
end

--- A callback that reports errors as `ctxd <what> failed: ...` and hands results to `on_result`.
---@param what string
---@param on_result fun(result: any)
---@return ctxd.Callback
local function handle(what, on_result)
  return function(err, result)
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

M.subcommands.usage = {
  run = function()
    local found, workspace = client.resolve()
    local target = found and { workspace = workspace, thread = config.options.thread } or nil
    client.request('ctxd/usage', {}, handle('usage', function(result)
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
    client.request('ctxd/compact', with_progress({ strategy = strategy }, 'compact'), handle('compact', function(r)
      notify(('compacted %s -> %s tokens (%s)'):format(
        status.format_tokens(r.tokensBefore or 0),
        status.format_tokens(r.tokensAfter or 0),
        tostring(r.strategy)
      ))
    end))
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
    client.request('ctxd/ghost/snapshot', params, handle('snapshot', function(r)
      local skipped = type(r.skipped) == 'table' and #r.skipped or 0
      notify(('snapshot %s: %s files%s'):format(
        tostring(r.id):sub(1, 10),
        tostring(r.fileCount),
        skipped > 0 and (', %d skipped'):format(skipped) or ''
      ))
    end))
  end,
}

--- Ask what to restore, then restore it.
---@param snapshot table GhostCommit
local function restore(snapshot)
  local choices = { 'Files only', 'Files and conversation' }
  vim.ui.select(choices, { prompt = 'Restore what?' }, function(_, idx)
    if not idx then
      return
    end
    local params = { id = snapshot.id, conversation = idx == 2 }
    client.request('ctxd/ghost/restore', params, handle('restore', function(r)
      vim.cmd.checktime()
      local text = ('restored %s: %d files restored, %d removed'):format(
        tostring(r.id):sub(1, 10),
        type(r.restored) == 'table' and #r.restored or 0,
        type(r.removed) == 'table' and #r.removed or 0
      )
      if params.conversation then
        text = text .. (', %s ledger items dropped'):format(tostring(r.removedItems or 0))
      end
      notify(text)
    end))
  end)
end

M.subcommands.restore = {
  run = function()
    client.request('ctxd/ghost/list', {}, handle('restore', function(r)
      local snapshots = r.snapshots or {}
      if #snapshots == 0 then
        notify('no snapshots yet (take one with :Ctxd snapshot)', vim.log.levels.WARN)
        return
      end
      -- Offered in the daemon's order: newest first.
      vim.ui.select(snapshots, {
        prompt = 'Restore snapshot',
        format_item = require('ctxd.ui').format_snapshot,
        kind = 'ctxd.snapshot',
      }, function(choice)
        if choice then
          restore(choice)
        end
      end)
    end))
  end,
}

M.subcommands.rollback = {
  run = function(args)
    local turns = tonumber(args[1] or '1')
    if not turns or turns < 1 or turns ~= math.floor(turns) then
      notify(('rollback takes a positive number of turns, got %q'):format(args[1]), vim.log.levels.ERROR)
      return
    end
    client.request('ctxd/rollback', { turns = turns }, handle('rollback', function(r)
      notify(('rolled back %d turn%s (%s items removed)'):format(turns, turns == 1 and '' or 's', tostring(r.removedItems)))
    end))
  end,
}

M.subcommands.log = {
  run = function()
    local thread = config.options.thread
    client.request('ctxd/history', {}, handle('log', function(r)
      require('ctxd.ui').open_history(r, thread)
    end))
  end,
}

--- Stop every ctxd client and start it again on the buffers it had.
M.subcommands.restart = {
  run = function()
    local clients = client.clients()
    if #clients == 0 then
      if vim.lsp.is_enabled('ctxd') then
        vim.lsp.enable('ctxd', false)
        vim.lsp.enable('ctxd')
        notify('starting')
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
