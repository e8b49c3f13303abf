-- lualine component: `sections = { lualine_x = { 'ctxd' } }`.
-- Shows the ctxd gauge in its tier's colour (CtxdOk, CtxdWarn, CtxdCompact: their foreground
-- only, so the section keeps its own background) unless `color` is given. Safe to load before
-- `require('ctxd').setup()`, and before any daemon runs: it needs nothing but the gauge's module.
local component = require('lualine.component'):extend()

--- `{ fg = ... }` from a highlight group, links followed; nil when it has no foreground.
---@param group string
---@return table?
local function foreground(group)
  local ok, hl = pcall(vim.api.nvim_get_hl, 0, { name = group, link = false })
  if ok and hl and hl.fg then
    return { fg = ('#%06x'):format(hl.fg) }
  end
end

function component:init(options)
  options = options or {}
  require('ctxd.status').define_highlights()
  if options.color == nil then
    options.color = function()
      local gauge = require('ctxd.status').gauge()
      return foreground(gauge and gauge.group or 'CtxdOk')
    end
  end
  component.super.init(self, options)
end

function component:update_status()
  local gauge = require('ctxd.status').gauge()
  return gauge and gauge.text:gsub('%%', '%%%%') or ''
end

return component
