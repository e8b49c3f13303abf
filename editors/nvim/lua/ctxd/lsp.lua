---@mod ctxd.lsp What the LSP client config (`lsp/ctxd.lua`) calls: handlers and lifecycle hooks.

local M = {}

--- Workspace folders of each client, kept so `on_exit` can clear their gauges.
---@type table<integer, string[]>
local folders_of = {}

--- After `initialize`: check the protocol version and seed the gauge from the stored ledger.
---@param lsp_client vim.lsp.Client
function M.on_init(lsp_client)
  local client = require('ctxd.client')
  local config = require('ctxd.config')
  local info = client.server_info(lsp_client)
  if info and not client.speaks(info.protocolVersion) then
    vim.notify(
      ('ctxd: the daemon speaks protocol %s, this plugin %s; see :checkhealth ctxd'):format(
        tostring(info.protocolVersion),
        table.concat(client.PROTOCOL_VERSIONS, ' and ')
      ),
      vim.log.levels.WARN
    )
  end
  local folders = client.folders(lsp_client)
  folders_of[lsp_client.id] = folders
  local thread = config.options.thread
  for _, workspace in ipairs(folders) do
    lsp_client:request('ctxd/usage', { workspace = workspace, thread = thread }, function(err, result)
      if not err and type(result) == 'table' and type(result.usage) == 'table' then
        require('ctxd.status').seed(workspace, thread, result.usage)
      end
    end)
  end
end

---@param client_id integer
function M.on_exit(_, _, client_id)
  local folders = folders_of[client_id] or {}
  folders_of[client_id] = nil
  vim.schedule(function()
    for _, workspace in ipairs(folders) do
      require('ctxd.status').forget(workspace)
    end
  end)
end

--- Attach only to a file inside a workspace root: a file outside any repository, or a buffer
--- with no file (whose root would be searched from the current directory), gets no daemon.
---@param bufnr integer
---@param on_dir fun(root: string)
function M.root_dir(bufnr, on_dir)
  if vim.api.nvim_buf_get_name(bufnr) == '' then
    return
  end
  local markers = (vim.lsp.config.ctxd or {}).root_markers or { '.git' }
  local root = vim.fs.root(bufnr, markers)
  if root then
    on_dir(root)
  end
end

M.handlers = {
  ['ctxd/usageChanged'] = function(err, params, ctx)
    require('ctxd.status').on_usage_changed(err, params, ctx)
  end,
  ['ctxd/compacted'] = function(_, params)
    if type(params) == 'table' then
      vim.api.nvim_exec_autocmds('User', { pattern = 'CtxdCompacted', modeline = false, data = params })
    end
  end,
}

return M
