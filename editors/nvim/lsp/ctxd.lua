-- The ctxd client config for Neovim 0.11+: `vim.lsp.enable('ctxd')`.
-- `require('ctxd').setup()` layers its `cmd`, `cmd_env`, `root_markers` and `settings` over this
-- with `vim.lsp.config('ctxd', ...)`. Every function defers to `lua/ctxd/lsp.lua`, loaded only
-- when the client starts.

local methods = require('ctxd.protocol').methods

--- The notifications and requests from the daemon that `lua/ctxd/lsp.lua` handles.
local handlers = {}
for _, name in ipairs({ 'usage_changed', 'compacted', 'threads_changed', 'ghost_changed', 'show_message' }) do
  local method = methods[name]
  handlers[method] = function(...)
    return require('ctxd.lsp').handlers[method](...)
  end
end

---@type vim.lsp.Config
return {
  cmd = { 'ctxd' },
  -- Neovim starts the daemon in its own current folder, often a project: with `cmd = { python, '-m',
  -- 'ctxd' }` a `ctxd` folder there would run instead of ctxd. PYTHONSAFEPATH keeps that folder off
  -- `sys.path`; a `cmd_env` given to setup() is merged with it, key by key.
  cmd_env = { PYTHONSAFEPATH = '1' },
  root_markers = { '.git' },
  root_dir = function(bufnr, on_dir)
    require('ctxd.lsp').root_dir(bufnr, on_dir)
  end,
  init_options = { ctxd = vim.empty_dict() },
  before_init = function(params, config)
    require('ctxd.lsp').before_init(params, config)
  end,
  on_init = function(client)
    require('ctxd.lsp').on_init(client)
  end,
  on_exit = function(code, signal, client_id)
    require('ctxd.lsp').on_exit(code, signal, client_id)
  end,
  handlers = handlers,
}
