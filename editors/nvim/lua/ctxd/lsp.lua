---@mod ctxd.lsp What the LSP client config (`lsp/ctxd.lua`) calls: handlers and lifecycle hooks.

local methods = require('ctxd.protocol').methods

local M = {}

--- Workspace folders of each client, kept so `on_exit` can clear their gauges.
---@type table<integer, string[]>
local folders_of = {}

--- Manual compactions whose daemon warning is still to come, per client and thread: their
--- command's result is the one message the user gets, so the daemon's own "compacted" warning
--- is not shown a second time. The daemon warns once per compaction that succeeds, and the
--- warning may arrive before or after the answer, so it is counted, not timed.
---@type table<integer, table<string, integer>>
local expected_warnings = {}

--- Count a manual compaction of `thread` as started (`delta` 1), or as failed (-1: no warning
--- will come for it).
---@param client_id integer
---@param thread string
---@param delta integer
function M.manual_compaction(client_id, thread, delta)
  local per_thread = expected_warnings[client_id] or {}
  expected_warnings[client_id] = per_thread
  per_thread[thread] = math.max(0, (per_thread[thread] or 0) + delta)
end

--- Whether a daemon message is the warning of a manual compaction (counted off when it is).
---@param client_id integer
---@param message string
---@return boolean
local function manual_warning(client_id, message)
  local thread = message:match(M.COMPACTED_WARNING .. "'(.-)' %(")
  local per_thread = expected_warnings[client_id] or {}
  if thread and (per_thread[thread] or 0) > 0 then
    per_thread[thread] = per_thread[thread] - 1
    return true
  end
  return false
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
  require('ctxd.agents').set_names(info and info.agents)
  if info and not client.speaks(info.protocolVersion) then
    require('ctxd.notify').say(
      ('the daemon speaks protocol %s, this plugin %s; see :checkhealth ctxd'):format(
        tostring(info.protocolVersion),
        table.concat(client.PROTOCOL_VERSIONS, ' and ')
      ),
      vim.log.levels.WARN
    )
  end
  local folders = client.folders(lsp_client)
  folders_of[lsp_client.id] = folders
  for _, workspace in ipairs(folders) do
    require('ctxd.status').set_down(workspace, nil)
    M.load_threads(lsp_client, workspace)
  end
  M.progress_fallback()
end

--- Seed the gauge of every listed thread that carries its usage.
---@param status table the `ctxd.status` module
---@param workspace string
---@param list ctxd.ThreadInfo[]
local function seed_listed(status, workspace, list)
  for _, info in ipairs(list) do
    if type(info.usage) == 'table' then
      status.seed(workspace, info.thread, info.usage)
    end
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
    lsp_client:request(methods.usage, { workspace = workspace, thread = thread }, function(err, result)
      if not err and type(result) == 'table' and type(result.usage) == 'table' then
        status.seed(workspace, thread, result.usage)
      end
      if cb then
        cb()
      end
    end)
  end
  if not require('ctxd.client').supports(lsp_client, methods.threads) then
    seed_current()
    return
  end
  threads.refresh(lsp_client, workspace, function(list)
    seed_listed(status, workspace, list)
    local listed = false
    for _, info in ipairs(list) do
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

--- Read some of `workspace`'s threads again (those a notification named) and seed their gauges.
---@param lsp_client vim.lsp.Client
---@param workspace string
---@param names string[]
---@param cb fun()?
function M.load_some(lsp_client, workspace, names, cb)
  local status = require('ctxd.status')
  require('ctxd.threads').refresh_some(lsp_client, workspace, names, function(list)
    seed_listed(status, workspace, list)
    if cb then
      cb()
    end
  end)
end

local following = {} ---@type table<string, table<string, boolean>>
--- Read the threads whose usage changed again (once per burst of notifications: only those, when
--- the workspace's threads were read before) and follow the most recently active one.
---@param workspace string
---@param thread string the thread that changed (followed at once by a daemon without `ctxd/threads`)
function M.follow_latest(workspace, thread)
  local found = require('ctxd.client').resolve({ workspace = workspace })
  if not (found and require('ctxd.client').supports(found, methods.threads)) then
    require('ctxd.threads').activity(workspace, thread)
    return
  end
  M.reload_threads(workspace, thread)
end

local everything = {} ---@type table<string, boolean>
--- Read `workspace`'s threads again, once per burst of calls: only the threads named, when the
--- workspace's threads were read before and every call named one (a daemon without
--- `ctxd/threads`: nothing to read).
---@param workspace string
---@param thread string? the thread to read again (nil: all of them)
function M.reload_threads(workspace, thread)
  local found = require('ctxd.client').resolve({ workspace = workspace })
  if not (found and require('ctxd.client').supports(found, methods.threads)) then
    return
  end
  if thread == nil then
    everything[workspace] = true
  end
  if following[workspace] then
    if thread ~= nil then
      following[workspace][thread] = true
    end
    return
  end
  following[workspace] = thread ~= nil and { [thread] = true } or {}
  vim.defer_fn(function()
    local names = vim.tbl_keys(following[workspace] or {})
    local all = everything[workspace]
    following[workspace], everything[workspace] = nil, nil
    local now = require('ctxd.client').resolve({ workspace = workspace })
    local redraw = function()
      vim.cmd.redrawstatus({ bang = true })
    end
    if now and not all and require('ctxd.threads').knows(workspace) then
      M.load_some(now, workspace, names, redraw)
    elseif now then
      M.load_threads(now, workspace, redraw)
    end
  end, 50)
end

--- Before `initialize`: tell the daemon whether the workspace is trusted
--- (`initializationOptions.ctxd.trusted`, PROTOCOL.md "Trust").
---@param params lsp.InitializeParams
---@param lsp_config vim.lsp.ClientConfig
function M.before_init(params, lsp_config)
  -- :checkhealth shows what the daemon said since it (re)started.
  require('ctxd.notify').recent = {}
  local options = type(params.initializationOptions) == 'table' and params.initializationOptions or {}
  local ctxd = type(options.ctxd) == 'table' and vim.deepcopy(options.ctxd) or {}
  if vim.tbl_isempty(ctxd) then
    ctxd = {}
  end
  ctxd.trusted = require('ctxd.trust').is_trusted(lsp_config.root_dir)
  options.ctxd = ctxd
  params.initializationOptions = options
end

--- The client stopped: requests still waiting are answered with an error (so `:Ctxd compact`
--- says it failed), and a stop nobody asked for goes to the supervisor (restart, or say why not).
--- The gauge keeps its numbers, dimmed, while the daemon starts again (a crash, `:Ctxd restart`);
--- a daemon stopped for good takes them with it.
---@param code integer
---@param signal integer
---@param client_id integer
function M.on_exit(code, signal, client_id)
  local initialized = folders_of[client_id] ~= nil
  local lsp_client = vim.lsp.get_client_by_id(client_id)
  local info = {
    config = lsp_client and lsp_client.config or nil,
    buffers = lsp_client and vim.tbl_keys(lsp_client.attached_buffers) or {},
    folders = folders_of[client_id]
      or (lsp_client and lsp_client.root_dir and { vim.uri_from_fname(lsp_client.root_dir) })
      or {},
    initialized = initialized,
  }
  folders_of[client_id] = nil
  local supervisor = require('ctxd.supervisor')
  local crash = supervisor.is_crash(code, signal, client_id, initialized)
  if crash then
    supervisor.quiet_neovim_exit_message(lsp_client and lsp_client.name or 'ctxd')
  end
  local comes_back = crash or supervisor.is_restarting(client_id)
  require('ctxd.client').fail_pending(client_id, 'the ctxd daemon stopped')
  vim.schedule(function()
    for _, workspace in ipairs(info.folders) do
      if comes_back then
        require('ctxd.status').mark_stale(workspace)
      else
        require('ctxd.status').forget(workspace)
      end
    end
    require('ctxd.supervisor').exited(code, signal, client_id, info)
  end)
  expected_warnings[client_id] = nil
end

local progress_group ---@type integer?
--- Without a progress UI (fidget.nvim and the like listen to `LspProgress`), ctxd's own
--- `$/progress` is echoed in the command line, without history and within one line.
function M.progress_fallback()
  if progress_group then
    return
  end
  progress_group = vim.api.nvim_create_augroup('ctxd_progress', { clear = true })
  vim.api.nvim_create_autocmd('LspProgress', {
    group = progress_group,
    callback = function(ev)
      local params = ev.data and ev.data.params or {}
      local value = type(params.value) == 'table' and params.value or {}
      if type(params.token) ~= 'string' or not params.token:match('^ctxd%-') then
        return
      end
      for _, au in ipairs(vim.api.nvim_get_autocmds({ event = 'LspProgress' })) do
        if au.group ~= progress_group then
          return -- another plugin shows progress
        end
      end
      local notify = require('ctxd.notify')
      if value.kind == 'end' then
        notify.echo('')
        return
      end
      M.progress_title = value.title or M.progress_title
      notify.echo(('ctxd: %s%s%s'):format(
        M.progress_title or 'working',
        value.message and (' · ' .. value.message) or '',
        value.percentage and (' %d%%'):format(value.percentage) or ''
      ))
    end,
  })
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
  [methods.usage_changed] = function(err, params, ctx)
    require('ctxd.status').on_usage_changed(err, params, ctx)
  end,
  [methods.compacted] = function(_, params)
    if type(params) == 'table' then
      vim.api.nvim_exec_autocmds('User', { pattern = 'CtxdCompacted', modeline = false, data = params })
    end
  end,
  --- Only the threads it names are read again; all of them when it names none (an older daemon).
  [methods.threads_changed] = function(_, params, ctx)
    local lsp_client = vim.lsp.get_client_by_id(ctx.client_id)
    if lsp_client and type(params) == 'table' and type(params.workspace) == 'string' then
      local done = function()
        vim.api.nvim_exec_autocmds('User', { pattern = 'CtxdThreadsChanged', modeline = false, data = params })
        vim.cmd.redrawstatus({ bang = true })
      end
      if type(params.threads) == 'table' and require('ctxd.threads').knows(params.workspace) then
        M.load_some(lsp_client, params.workspace, params.threads, done)
      else
        M.load_threads(lsp_client, params.workspace, done)
      end
    end
  end,
  --- A checkpoint an agent's hook took (another process): views of the snapshots list them again.
  [methods.ghost_changed] = function(_, params)
    if type(params) == 'table' then
      vim.api.nvim_exec_autocmds('User', { pattern = 'CtxdGhostChanged', modeline = false, data = params })
    end
  end,
  --- The daemon's messages go through vim.notify at their level (so nvim-notify, fidget and
  --- friends show them), once each. One message per compaction: a manual one is reported by
  --- `:Ctxd compact` itself (INFO), an automatic one by the daemon's warning (WARN).
  [methods.show_message] = function(_, params, ctx)
    if type(params) ~= 'table' or type(params.message) ~= 'string' then
      return vim.NIL
    end
    local text = params.message:gsub('^ctxd:?%s*', '')
    if manual_warning(ctx.client_id, params.message) then
      return vim.NIL
    end
    require('ctxd.notify').daemon(text, M.levels[params.type] or vim.log.levels.INFO)
    return vim.NIL
  end,
}

return M
