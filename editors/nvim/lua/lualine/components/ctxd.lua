-- lualine component: `sections = { lualine_x = { 'ctxd' } }`.
-- Shows the ctxd gauge coloured by tier (CtxdOk, CtxdWarn, CtxdCompact) unless `color` is given.
local component = require('lualine.component'):extend()

function component:init(options)
  options = options or {}
  if options.color == nil then
    options.color = function()
      local gauge = require('ctxd.status').gauge()
      return gauge and gauge.group or 'CtxdOk'
    end
  end
  component.super.init(self, options)
end

function component:update_status()
  local gauge = require('ctxd.status').gauge()
  return gauge and gauge.text:gsub('%%', '%%%%') or ''
end

return component
