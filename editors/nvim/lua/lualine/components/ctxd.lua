-- lualine component: `sections = { lualine_x = { 'ctxd' } }`.
-- Shows the ctxd gauge in its tier's colour (CtxdOk, CtxdWarn, CtxdCompact, CtxdStale: their
-- foreground only, so the section keeps its own background) unless `color` is given; a followed
-- agent's icon before it; a click opens `:Ctxd menu`. Safe to load before
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
  -- A click on the gauge opens its menu (every action, recall and the time machine included).
  if options.on_click == nil then
    options.on_click = function()
      require('ctxd.menu').open()
    end
  end
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
  if not gauge then
    return ''
  end
  local text = gauge.text
  -- A followed agent's icon, unless lualine's icons are off (`icons_enabled = false`).
  if gauge.icon and self.options.icons_enabled ~= false then
    text = gauge.icon .. ' ' .. text
  end
  return (text:gsub('%%', '%%%%'))
end

return component
