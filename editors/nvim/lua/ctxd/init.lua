---@mod ctxd ctxd for Neovim: context-window gauge, :Ctxd commands, and an API for agent plugins.
---
--- Requiring this module does nothing by itself. `setup()` is optional.

local M = {}

--- Merge `opts` into the defaults (see `:help ctxd-options`). Unknown keys and values of the
--- wrong type are ignored and reported by `:checkhealth ctxd`, never raised.
---@param opts table?
function M.setup(opts)
  local config = require('ctxd.config')
  local problems = config.set(opts)
  if #problems > 0 then
    require('ctxd.notify').say(#problems .. ' setup problem(s); see :checkhealth ctxd', vim.log.levels.WARN)
  end
  local given = type(opts) == 'table' and opts or {}
  local overrides = {} ---@type vim.lsp.Config
  for _, key in ipairs({ 'cmd', 'cmd_env', 'root_markers' }) do
    if given[key] ~= nil then
      overrides[key] = config.options[key]
    end
  end
  if given.settings ~= nil then
    overrides.init_options = { ctxd = config.options.settings }
  end
  if next(overrides) then
    vim.lsp.config('ctxd', overrides)
  end
  require('ctxd.status').define_highlights()
  if config.options.enable then
    vim.lsp.enable('ctxd')
  end
end

--- Statusline item, e.g. `%#CtxdOk#ctx 38% 48.2k/128k%*`. Use it as
--- `vim.o.statusline = "%{%v:lua.require'ctxd'.statusline()%}"`.
---@param opts table? `{highlight?, bufnr?, workspace?, thread?}`
---@return string
function M.statusline(opts)
  return require('ctxd.status').statusline(opts)
end

--- The gauge's plain parts `{text, tier, group, snapshot}`, or nil before any usage is known.
---@param target ctxd.Target?
function M.gauge(target)
  return require('ctxd.status').gauge(target)
end

--- The API for agent plugins (`require('ctxd').api` is `require('ctxd.api')`).
setmetatable(M, {
  __index = function(_, key)
    if key == 'api' then
      return require('ctxd.api')
    end
  end,
})

return M
