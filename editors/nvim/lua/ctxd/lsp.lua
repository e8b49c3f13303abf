---@mod ctxd.lsp What the LSP client config (`lsp/ctxd.lua`) calls: handlers and lifecycle hooks.

local M = {}

--- Workspace folders of each client, kept so `on_exit` can clear their gauges.
---@type table<integer, string[]>
local folders_of = {}

--- Manual compactions in flight per client: their result is the one message the user gets, so
--- the daemon's own "compacted" warning is not shown a second time.
---@type table<integer, integer>
local manual_compactions = {}

--- Count a manual compaction as started (`delta` 1) or answered (-1).
---@param client_id integer
---@param delta integer
function M.manual_compaction(client_id, delta)
  manual_compactions[client_id] = math.max(0, (manual_compactions[client_id] or 0) + delta)
end

--- `window/showMessage` types (LSP MessageType) as vim.log.levels.
M.levels = {
  [1] = vim.log.levels.ERROR,
  [2] = vim.log.levels.WARN,
  [3] = vim.log.levels.INFO,
  [4] = vim.log.levels.DEBUG,
}

--- The daemon's warning after a compaction starts with this.
M.COMPACTED_WARNING = '^ctxd compacted thread '

--- After `initialize`: check the protocol version and seed the gauge from the stored ledger.
---@param lsp_client vim.lsp.Client
function M.on_init(lsp_client)
  local client = require('ctxd.client')
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
  for _, workspace in ipairs(folders) do
    M.load_threads(lsp_client, workspace)
  end
end

--- Learn the workspace's threads (source, title, usage) and follow the most recently active,
--- then seed the gauge of the current thread from `ctxd/usage`.
---@param lsp_client vim.lsp.Client
---@param workspace string
---@param cb fun()?
function M.load_threads(lsp_client, workspace, cb)
  local threads = require('ctxd.threads')
  local status = require('ctxd.status')
  local function seed_current()
    local thread = threads.current(workspace)
    lsp_client:request('ctxd/usage', { workspace = workspace, thread = thread }, function(err, result)
      if not err and type(result) == 'table' and type(result.usage) == 'table' then
        status.seed(workspace, thread, result.usage)
      end
      if cb then
        cb()
      end
    end)
  end
  if not require('ctxd.client').supports(lsp_client, 'ctxd/threads') then
    seed_current()
    return
  end
  threads.refresh(lsp_client, workspace, function(list)
    local listed = false
    for _, info in ipairs(list) do
      if type(info.usage) == 'table' then
        status.seed(workspace, info.thread, info.usage)
      end
      listed = listed or info.thread == threads.current(workspace)
    end
    -- A thread that does not exist yet has no numbers to show (and asking would create nothing).
    if listed then
      seed_current()
    elseif cb then
      cb()
    end
  end)
end

--- Before `initialize`: tell the daemon whether the workspace is trusted
--- (`initializationOptions.ctxd.trusted`, PROTOCOL.md "Trust").
---@param params lsp.InitializeParams
---@param lsp_config vim.lsp.ClientConfig
function M.before_init(params, lsp_config)
  local options = type(params.initializationOptions) == 'table' and params.initializationOptions or {}
  local ctxd = type(options.ctxd) == 'table' and vim.deepcopy(options.ctxd) or {}
  if vim.tbl_isempty(ctxd) then
    ctxd = {}
  end
  ctxd.trusted = require('ctxd.trust').is_trusted(lsp_config.root_dir)
  options.ctxd = ctxd
  params.initializationOptions = options
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
  manual_compactions[client_id] = nil
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
  ['ctxd/threadsChanged'] = function(_, params, ctx)
    local lsp_client = vim.lsp.get_client_by_id(ctx.client_id)
    if lsp_client and type(params) == 'table' and type(params.workspace) == 'string' then
      M.load_threads(lsp_client, params.workspace, function()
        vim.api.nvim_exec_autocmds('User', { pattern = 'CtxdThreadsChanged', modeline = false, data = params })
        vim.cmd.redrawstatus({ bang = true })
      end)
    end
  end,
  --- A checkpoint an agent's hook took (another process): views of the snapshots list them again.
  ['ctxd/ghostChanged'] = function(_, params)
    if type(params) == 'table' then
      vim.api.nvim_exec_autocmds('User', { pattern = 'CtxdGhostChanged', modeline = false, data = params })
    end
  end,
  --- The daemon's messages go through vim.notify at their level (so nvim-notify, fidget and
  --- friends show them), once each. One message per compaction: a manual one is reported by
  --- `:Ctxd compact` itself (INFO), an automatic one by the daemon's warning (WARN).
  ['window/showMessage'] = function(_, params, ctx)
    if type(params) ~= 'table' or type(params.message) ~= 'string' then
      return vim.NIL
    end
    local text = params.message:gsub('^ctxd:?%s*', '')
    if params.message:match(M.COMPACTED_WARNING) and (manual_compactions[ctx.client_id] or 0) > 0 then
      return vim.NIL
    end
    vim.notify('ctxd: ' .. text, M.levels[params.type] or vim.log.levels.INFO)
    return vim.NIL
  end,
}

return M
