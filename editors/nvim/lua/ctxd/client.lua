---@mod ctxd.client Finding the ctxd LSP client and sending it `ctxd/*` requests.
---
--- Every `ctxd/*` request names a workspace folder and a thread. This module picks them: the
--- caller's `opts.workspace` / `opts.thread` when given, otherwise the workspace folder that holds
--- the buffer and that workspace's current thread (`ctxd.threads`).

local methods = require('ctxd.protocol').methods

local M = {}

local pending

--- The protocol versions this plugin speaks (PROTOCOL.md); the newest is preferred.
M.PROTOCOL_VERSIONS = { 1, 2, 3, 4 }

--- Methods that address a workspace but no thread.
local workspace_only = { [methods.threads] = true, [methods.status] = true }

--- Whether this plugin speaks protocol `version`.
---@param version any
---@return boolean
function M.speaks(version)
  return vim.tbl_contains(M.PROTOCOL_VERSIONS, version)
end

---@class ctxd.Target
---@field bufnr integer? Buffer whose workspace is meant (default: the current one).
---@field workspace string? Workspace folder URI; overrides the buffer's.
---@field thread string? Thread name; default the workspace's current one (`ctxd.threads`).
---@field client vim.lsp.Client? Send to this client (its folder holding `bufnr`, or its first).

---@alias ctxd.Callback fun(err: lsp.ResponseError?, result: any)

---@param path string
---@param dir string
---@return boolean
local function is_inside(path, dir)
  dir = dir:gsub('/+$', '')
  return path == dir or path:sub(1, #dir + 1) == dir .. '/'
end

--- Workspace folder URIs of a client.
---@param client vim.lsp.Client
---@return string[]
function M.folders(client)
  local uris = {}
  for _, folder in ipairs(client.workspace_folders or {}) do
    table.insert(uris, folder.uri)
  end
  if #uris == 0 and client.root_dir then
    table.insert(uris, vim.uri_from_fname(client.root_dir))
  end
  return uris
end

--- The file path of a buffer that is a file (not a help, terminal or scratch buffer), or nil.
---@param bufnr integer
---@return string?
local function buffer_path(bufnr)
  if not vim.api.nvim_buf_is_valid(bufnr) or vim.bo[bufnr].buftype ~= '' then
    return nil
  end
  local name = vim.api.nvim_buf_get_name(bufnr)
  if name == '' or name:match('^%a[%w+.-]*://') then
    return nil
  end
  return vim.fs.normalize(vim.fn.fnamemodify(name, ':p'))
end

--- The innermost workspace folder of `client` that holds `path`, or nil.
---@param client vim.lsp.Client
---@param path string
---@return string?
local function folder_holding(client, path)
  local best ---@type string?
  for _, uri in ipairs(M.folders(client)) do
    local dir = vim.fs.normalize(vim.uri_to_fname(uri))
    if is_inside(path, dir) and (not best or #uri > #best) then
      best = uri
    end
  end
  return best
end

--- All running ctxd clients.
---@return vim.lsp.Client[]
function M.clients()
  return vim.lsp.get_clients({ name = 'ctxd' })
end

M.OUTSIDE = 'this buffer is outside every ctxd workspace folder'

--- ctxd clients whose daemon started but has not answered `initialize` (yet): `clients()` leaves
--- them out. A command that prints something else than LSP on stdout and goes on running stays
--- so. Neovim has no public filter for them: this uses its private `_uninitialized` (ignored by a
--- later Neovim, which then lists none, and the messages fall back to the plain ones).
---@return vim.lsp.Client[]
function M.starting()
  local ok, all = pcall(vim.lsp.get_clients, { name = 'ctxd', _uninitialized = true })
  if not ok then
    return {}
  end
  return vim.tbl_filter(function(c)
    return not c.initialized and not (c.is_stopped and c:is_stopped())
  end, all)
end

--- Why a started daemon is not running: it has not answered `initialize`.
---@param lsp_client vim.lsp.Client
---@return string
function M.not_answering(lsp_client)
  local supervisor = require('ctxd.supervisor')
  return ('the daemon has not answered yet; see :checkhealth ctxd · `%s` started but has not spoken LSP on stdout (a wrapper that prints something else there?); %s'):format(
    supervisor.command_text(lsp_client.config and lsp_client.config.cmd), supervisor.stderr_hint())
end

--- Why no ctxd client runs for `bufnr`, and the command that fixes it.
---@param bufnr integer
---@return string
function M.not_running(bufnr)
  -- A daemon started now and not answering says more than how the last one ended.
  local starting = M.starting()[1]
  if starting then
    return M.not_answering(starting)
  end
  local status = require('ctxd.status')
  local why = status.down({ bufnr = bufnr }) or status.any_down()
  if why == 'stopped' then
    return 'the daemon stopped; :Ctxd restart starts it again'
  elseif why == 'not installed' then
    return 'the daemon is not installed; :checkhealth ctxd says how to install it'
  elseif why == 'not executable' then
    return 'the daemon is not executable; :checkhealth ctxd says how to fix it'
  elseif why == 'not running' then
    return 'the daemon did not start; :checkhealth ctxd says why, :Ctxd restart tries again'
  elseif vim.lsp.is_enabled and vim.lsp.is_enabled('ctxd') then
    return 'ctxd is not running: it starts on a file inside a git repository (or :Ctxd restart)'
  end
  return "ctxd is not running: setup({ enable = true }) or vim.lsp.enable('ctxd') starts it"
end

--- The client and workspace that `target` designates. A file outside every workspace folder
--- designates none (its statusline must not show another workspace's numbers); a buffer that is
--- no file (quickfix, help, a scratch buffer) designates the first workspace, unless
--- `target.strict`.
---@param target (ctxd.Target|{strict: boolean?})?
---@return vim.lsp.Client? client
---@return string workspace_or_error
function M.resolve(target)
  target = target or {}
  local bufnr = target.bufnr or vim.api.nvim_get_current_buf()
  if target.client then
    local path = buffer_path(bufnr)
    local folder = target.workspace or (path and folder_holding(target.client, path)) or M.folders(target.client)[1]
    if folder then
      return target.client, folder
    end
    return nil, 'the ctxd client has no workspace folder'
  end
  if target.workspace then
    for _, client in ipairs(M.clients()) do
      if vim.tbl_contains(M.folders(client), target.workspace) then
        return client, target.workspace
      end
    end
    return nil, ('no ctxd client has the workspace %s'):format(target.workspace)
  end
  local clients = M.clients()
  if #clients == 0 then
    return nil, M.not_running(bufnr)
  end
  local path = buffer_path(bufnr)
  if path then
    local best_client, best ---@type vim.lsp.Client?, string?
    for _, client in ipairs(clients) do
      local folder = folder_holding(client, path)
      if folder and (not best or #folder > #best) then
        best_client, best = client, folder
      end
    end
    if best_client and best then
      return best_client, best
    end
    return nil, M.OUTSIDE
  end
  if target.strict then
    return nil, M.OUTSIDE
  end
  for _, client in ipairs(clients) do
    local folder = M.folders(client)[1]
    if folder then
      return client, folder
    end
  end
  return nil, 'the ctxd client has no workspace folder (is the file inside a git repository?)'
end

--- Requests of each client still waiting for their answer.
---@type table<integer, table<fun(err: any, result: any), boolean>>
pending = {}

--- The client stopped: answer its waiting requests with an error (Neovim drops them).
---@param client_id integer
---@param message string
function M.fail_pending(client_id, message)
  local waiting = pending[client_id] or {}
  pending[client_id] = nil
  for answer in pairs(waiting) do
    vim.schedule(function()
      answer({ code = -32603, message = message, stopped = true }, nil)
    end)
  end
end

--- Send `method` with `params` plus `workspace` and `thread`; `cb(err, result)` runs on the main loop.
--- Errors that happen before sending are given to `cb` in the JSON-RPC shape too.
---@param method string
---@param params table?
---@param cb ctxd.Callback?
---@param target ctxd.Target?
---@return integer? request_id
function M.request(method, params, cb, target)
  target = target or {}
  cb = cb or function() end
  local client, workspace = M.resolve(target)
  if not client then
    vim.schedule(function()
      cb({ code = -32603, message = workspace })
    end)
    return nil
  end
  local full = vim.tbl_extend('force', { workspace = workspace }, params or {})
  if not workspace_only[method] then
    full.thread = full.thread or target.thread or require('ctxd.threads').current(workspace)
  end
  -- Answered once: by the daemon, or by fail_pending when the daemon stops first.
  local answered = false
  local waiting = pending[client.id] or {}
  pending[client.id] = waiting
  local function answer(err, result)
    if answered then
      return
    end
    answered = true
    waiting[answer] = nil
    cb(err, result)
  end
  waiting[answer] = true
  local ok, id = client:request(method, full, answer, target.bufnr)
  if not ok then
    waiting[answer] = nil
    vim.schedule(function()
      cb({ code = -32603, message = 'the ctxd client is not running' })
    end)
    return nil
  end
  return id
end

--- Like `request`, but waits (running the event loop) up to `timeout_ms`.
--- Meant for scripts and tests; an editor command should use the callback form.
---@param method string
---@param params table?
---@param target ctxd.Target?
---@param timeout_ms integer?
---@return lsp.ResponseError? err
---@return any result
function M.request_sync(method, params, target, timeout_ms)
  local done, err, result = false, nil, nil
  M.request(method, params, function(e, r)
    done, err, result = true, e, r
  end, target)
  if not vim.wait(timeout_ms or 10000, function()
    return done
  end, 10) then
    return { code = -32603, message = ('%s timed out'):format(method) }, nil
  end
  return err, result
end

--- A one-line message for an error given to a callback.
---@param err lsp.ResponseError|string
---@return string
function M.format_error(err)
  if type(err) ~= 'table' then
    return tostring(err)
  end
  if err.code and err.code ~= -32603 then
    return ('%s (%d)'):format(err.message or 'error', err.code)
  end
  return err.message or vim.inspect(err)
end

--- `capabilities.experimental.ctxd` of a client, or nil when the server did not send it.
---@param client vim.lsp.Client
---@return table?
function M.server_info(client)
  local caps = client.server_capabilities or {}
  local experimental = caps.experimental
  return type(experimental) == 'table' and experimental.ctxd or nil
end

--- Whether `client` announced `method` in `capabilities.experimental.ctxd.methods`.
---@param lsp_client vim.lsp.Client
---@param method string
---@return boolean
function M.supports(lsp_client, method)
  local info = M.server_info(lsp_client)
  return type(info) == 'table' and type(info.methods) == 'table' and vim.tbl_contains(info.methods, method)
end

--- The command and environment that start the daemon (`setup({ cmd, cmd_env })`, else
--- `lsp/ctxd.lua`'s; the environment is the two merged, PYTHONSAFEPATH included): nil for a command
--- given as a function (an in-process transport).
---@return string[]? cmd
---@return table<string, string>? env
function M.daemon_command()
  local options = require('ctxd.config').options
  local ok, lsp_config = pcall(function()
    return vim.lsp.config.ctxd
  end)
  local cmd = options.cmd or (ok and lsp_config and lsp_config.cmd) or { 'ctxd' }
  local env = (ok and lsp_config and lsp_config.cmd_env) or options.cmd_env or nil
  if type(cmd) ~= 'table' or type(cmd[1]) ~= 'string' then
    return nil, env
  end
  return cmd, env
end

--- A token for `$/progress`, unique within this Neovim.
local token_count = 0
---@param kind string
---@return string
function M.progress_token(kind)
  token_count = token_count + 1
  return ('ctxd-%s-%d-%d'):format(kind, vim.fn.getpid(), token_count)
end

return M
