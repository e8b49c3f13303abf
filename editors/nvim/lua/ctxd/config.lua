---@mod ctxd.config Options: defaults, merging, and the problems `:checkhealth ctxd` reports.
---
--- `setup()` never errors on a bad option: an unknown key or a value of the wrong type is kept
--- out of the options and listed by `:checkhealth ctxd`, the way fidget.nvim does it.

local M = {}

---@class ctxd.StatuslineOptions
---@field prefix string Text before the figures (`ctx`).
---@field highlight boolean Wrap the gauge in `%#CtxdOk#`-style highlight items.
---@field empty string What the gauge shows before any usage is known.
---@field icons boolean Put a followed agent's icon before its name (`✻ Claude 12% · …`).
---@field click boolean A click on the gauge opens its menu (`:Ctxd menu`).

---@class ctxd.FloatOptions
---@field border string|string[] Border of the `:Ctxd usage` window.
---@field bar_width integer Cells of the coloured bar.
---@field max_details integer Detail rows shown under each category (0 hides them).

---@class ctxd.RecallOptions
---@field picker string Where `:Ctxd recall` lists its hits: `quickfix` or `select` (vim.ui.select).
---@field scope string What it searches: the current `thread`, or every thread of the `workspace`.
---@field limit integer How many hits it asks for (at most 100).

---@class ctxd.Options
---@field cmd string[]? Command that starts the daemon; nil keeps `lsp/ctxd.lua`'s `{ 'ctxd' }`.
---@field cmd_env table<string, string>? Extra environment for the daemon.
---@field root_markers string[] Files that mark a workspace root.
---@field settings table Sent as `initializationOptions.ctxd` (camelCase keys, see PROTOCOL.md).
---@field thread string? Thread the gauge and the `:Ctxd` commands address; nil follows the
---   workspace's most recently active thread (see `ctxd.threads`).
---@field trusted (boolean|fun(root: string): boolean)? Whether workspaces are trusted (sent as
---   `initializationOptions.ctxd.trusted`); nil asks Neovim's trust database (`:trust`).
---@field enable boolean `setup()` also calls `vim.lsp.enable('ctxd')`.
---@field progress boolean Ask for `$/progress` on compaction and snapshots.
---@field statusline ctxd.StatuslineOptions
---@field float ctxd.FloatOptions
---@field recall ctxd.RecallOptions
---@field agents table<string, table> Per `source`: `{ label?, name?, icon?, rewind?, compact? }` over `ctxd.agents`.

---@type ctxd.Options
M.defaults = {
  cmd = nil,
  cmd_env = nil,
  root_markers = { '.git' },
  settings = {},
  thread = nil,
  trusted = nil,
  enable = false,
  progress = true,
  statusline = { prefix = 'ctx', highlight = true, empty = '', icons = true, click = true },
  float = { border = 'rounded', bar_width = 50, max_details = 5 },
  recall = { picker = 'quickfix', scope = 'thread', limit = 30 },
  agents = {},
}

--- Options whose contents belong to the user or the daemon: not checked key by key.
local opaque = {
  cmd = { 'table' },
  cmd_env = { 'table' },
  root_markers = { 'table' },
  settings = { 'table' },
  thread = { 'string' },
  trusted = { 'boolean', 'function' },
  agents = { 'table' },
}

---@type ctxd.Options
M.options = vim.deepcopy(M.defaults)

--- Problems found by the last `setup()`: unknown keys and values of the wrong type.
---@type string[]
M.problems = {}

--- Merge `opts` into `defaults`, keeping out (and recording) what does not fit.
---@param defaults table
---@param opts table
---@param prefix string
---@param problems string[]
---@return table
local function merge(defaults, opts, prefix, problems)
  local out = vim.deepcopy(defaults)
  for key, value in pairs(opts) do
    local name = prefix .. tostring(key)
    local expected = prefix == '' and opaque[key] or nil
    local default = defaults[key]
    if expected then
      if not vim.tbl_contains(expected, type(value)) then
        table.insert(
          problems,
          ('option `%s` must be a %s, got %s'):format(name, table.concat(expected, ' or '), type(value))
        )
      else
        out[key] = vim.deepcopy(value)
      end
    elseif default == nil then
      table.insert(problems, ('unknown option `%s`'):format(name))
    elseif type(default) == 'table' and type(value) == 'table' then
      out[key] = merge(default, value, name .. '.', problems)
    elseif type(default) ~= type(value) and not (key == 'border' and type(value) == 'table') then
      table.insert(problems, ('option `%s` must be a %s, got %s'):format(name, type(default), type(value)))
    else
      out[key] = value
    end
  end
  return out
end

--- Replace the options with `defaults` merged with `opts`; returns the problems found.
---@param opts table?
---@return string[]
function M.set(opts)
  local problems = {}
  if opts ~= nil and type(opts) ~= 'table' then
    problems = { ('setup() takes a table, got %s'):format(type(opts)) }
    opts = {}
  end
  M.options = merge(M.defaults, opts or {}, '', problems)
  M.problems = problems
  return problems
end

return M
