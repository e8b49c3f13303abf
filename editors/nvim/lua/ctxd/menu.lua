---@mod ctxd.menu The gauge's menu (`:Ctxd menu`, a click on the gauge): every action on the thread
--- the gauge shows (recall and the time machine included), or the way out when the daemon is
--- not running. `items` is pure; `open` asks with `vim.ui.select` and runs the choice.

local methods = require('ctxd.protocol').methods

local M = {}

---@class ctxd.MenuItem
---@field label string
---@field args string[]? `:Ctxd` arguments to run
---@field ex string? an Ex command to run instead
---@field ask string? ask for words first (`vim.ui.input` prompt), added to `args`

---@class ctxd.MenuState
---@field down string? why the daemon is not running (`stopped`, `not installed`, ...)
---@field read_only boolean the thread is a followed agent session
---@field supports fun(method: string): boolean

--- What the menu offers in `state`.
---@param state ctxd.MenuState
---@return ctxd.MenuItem[]
function M.items(state)
  if state.down then
    return {
      { label = ('Restart the daemon (it is %s)'):format(state.down), args = { 'restart' } },
      { label = 'Check health: why it is not running, how to fix it', ex = 'checkhealth ctxd' },
    }
  end
  local items = { { label = 'Usage breakdown', args = { 'usage' } } }
  local function add(item, method)
    if not method or state.supports(method) then
      table.insert(items, item)
    end
  end
  add({ label = 'Switch thread…', args = { 'threads' } }, methods.threads)
  add({ label = 'Recall: search the whole history, compacted parts too…', args = { 'recall' }, ask = 'Search the history for: ' },
    methods.recall)
  add({ label = 'Time machine: restore files from a checkpoint…', args = { 'restore' } }, methods.ghost_restore)
  add({ label = 'Time machine: what changed since a checkpoint…', args = { 'diff' } }, methods.ghost_diff)
  add({ label = 'Time machine: take a checkpoint now', args = { 'snapshot' } }, methods.ghost_snapshot)
  add({ label = 'Time machine: undo the last restore', args = { 'undo-restore' } }, methods.ghost_restore)
  if not state.read_only then
    add({ label = 'Time machine: undo the last compaction, rollback or restore', args = { 'undo' } }, methods.undo)
    add({ label = 'Time machine: redo what undo undid', args = { 'redo' } }, methods.undo)
    add({ label = 'Time machine: roll back the last turn…', args = { 'rollback' } }, methods.rollback)
    add({ label = 'Compact now', args = { 'compact' } }, methods.compact)
  end
  add({ label = 'History log', args = { 'log' } }, methods.history)
  table.insert(items, { label = "Hooks: are ctxd's hooks installed and trusted?", args = { 'hooks', 'status' } })
  table.insert(items, { label = "Hooks: install ctxd's hooks into the agents…", args = { 'hooks', 'install' } })
  table.insert(items, { label = 'Check health', ex = 'checkhealth ctxd' })
  table.insert(items, { label = 'Restart the daemon', args = { 'restart' } })
  return items
end

--- Run a menu item.
---@param item ctxd.MenuItem
function M.run(item)
  if item.ex then
    vim.cmd(item.ex)
    return
  end
  local args = vim.deepcopy(item.args or {})
  if not item.ask then
    require('ctxd.commands').run(args)
    return
  end
  vim.ui.input({ prompt = item.ask }, function(words)
    if words and vim.trim(words) ~= '' then
      require('ctxd.commands').run(vim.list_extend(args, vim.split(vim.trim(words), '%s+')))
    end
  end)
end

--- The menu for the current buffer's workspace and thread.
function M.open()
  local client = require('ctxd.client')
  local threads = require('ctxd.threads')
  local lsp_client, workspace = client.resolve()
  if not lsp_client and #client.clients() > 0 then
    require('ctxd.notify').say(workspace, vim.log.levels.WARN) -- a file outside every workspace
    return
  end
  local bufnr = vim.api.nvim_get_current_buf()
  local down = not lsp_client and (require('ctxd.status').down({ bufnr = bufnr }) or 'not running') or nil
  local thread = lsp_client and threads.current(workspace) or nil
  local state = {
    down = down,
    read_only = thread ~= nil and threads.read_only(workspace, thread),
    supports = function(method)
      return lsp_client ~= nil and client.supports(lsp_client, method)
    end,
  }
  local prompt = 'ctxd'
  if thread then
    local icon = threads.icon(workspace, thread)
    prompt = ('ctxd · %s%s'):format(icon and (icon .. ' ') or '', require('ctxd.ui.view').thread_name(workspace, thread))
  end
  vim.ui.select(M.items(state), {
    prompt = prompt,
    format_item = function(item)
      return item.label
    end,
    kind = 'ctxd.menu',
  }, function(item)
    if item then
      M.run(item)
    end
  end)
end

--- A statusline click on the gauge (`%@`): opens the menu.
function M.click()
  vim.schedule(M.open)
end

return M
