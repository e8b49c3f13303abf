---@mod ctxd.health `:checkhealth ctxd`

local M = {}

local health = vim.health

--- The daemon command and environment the client would use.
---@return string[]? cmd
---@return table<string, string>? env
local function daemon_cmd()
  local config = require('ctxd.config')
  local ok, lsp_config = pcall(function()
    return vim.lsp.config.ctxd
  end)
  local cmd = config.options.cmd or (ok and lsp_config and lsp_config.cmd) or { 'ctxd' }
  local env = config.options.cmd_env or (ok and lsp_config and lsp_config.cmd_env) or nil
  if type(cmd) ~= 'table' then
    return nil, env
  end
  return cmd, env
end

--- Run a command with a timeout; returns trimmed stdout or nil and a reason.
---@param argv string[]
---@param env table?
---@return string? out
---@return string? reason
local function run(argv, env)
  local ok, proc = pcall(vim.system, argv, { text = true, env = env })
  if not ok then
    return nil, tostring(proc)
  end
  local result = proc:wait(15000)
  if result.code ~= 0 then
    local reason = vim.trim((result.stderr or '') ~= '' and result.stderr or (result.stdout or ''))
    return nil, ('exit %s: %s'):format(tostring(result.code), reason:sub(-300))
  end
  return vim.trim(result.stdout or ''), nil
end

--- The Python interpreter behind the daemon command, for the tiktoken check.
---@param cmd string[]
---@return string?
local function daemon_python(cmd)
  local exe = vim.fn.exepath(cmd[1])
  if exe == '' then
    return nil
  end
  if vim.fs.basename(exe):match('^python') then
    return exe
  end
  local file = io.open(exe, 'r')
  if not file then
    return nil
  end
  local first = file:read('*l') or ''
  file:close()
  local shebang = first:match('^#!%s*(%S+python[%w%.]*)%s*$')
  return shebang
end

local function check_executable()
  health.start('ctxd: daemon')
  local cmd, env = daemon_cmd()
  if not cmd then
    health.info('cmd is a function (an in-process or custom transport): not checked')
    return
  end
  local exe = vim.fn.exepath(cmd[1])
  if exe == '' then
    health.error(('`%s` is not executable'):format(cmd[1]), {
      'pip install ctxd (it installs the `ctxd` command)',
      "or set `cmd` in require('ctxd').setup({ cmd = { 'python3', '-m', 'ctxd' } })",
    })
    return
  end
  health.ok(('executable: %s'):format(exe))
  local argv = vim.list_extend(vim.deepcopy(cmd), { '--version' })
  local version, reason = run(argv, env)
  if version then
    health.ok(('version: %s'):format(version))
  else
    health.error(('`%s` failed: %s'):format(table.concat(argv, ' '), reason))
  end
end

local function check_options()
  health.start('ctxd: setup options')
  local config = require('ctxd.config')
  if #config.problems == 0 then
    health.ok('setup options are valid')
  end
  for _, problem in ipairs(config.problems) do
    health.warn(problem .. ' (ignored)', { 'see :help ctxd-options' })
  end
end

--- Where the daemon keeps its state, when it does not say so itself: the same rule as the
--- daemon's `settings.default_state_dir`.
---@return string
local function state_dir_guess()
  local config = require('ctxd.config')
  local settings = config.options.settings or {}
  local configured = settings.stateDir or settings.state_dir
  if type(configured) == 'string' then
    return vim.fs.normalize(configured)
  end
  local _, env = daemon_cmd()
  local base = (env and env.XDG_STATE_HOME) or vim.env.XDG_STATE_HOME
  if not base or base == '' then
    base = vim.fs.joinpath(vim.env.HOME or '~', '.local', 'state')
  end
  return vim.fs.joinpath(base, 'ctxd')
end

local function check_clients()
  health.start('ctxd: client')
  local client = require('ctxd.client')
  local clients = client.clients()
  local info = nil
  if #clients == 0 then
    health.warn('no ctxd client is running', {
      "vim.lsp.enable('ctxd') (or setup({ enable = true })), then open a file in a git repository",
    })
  end
  -- :checkhealth runs in a buffer of its own: the user's buffer is the alternate one.
  local bufnr = vim.fn.bufnr('#')
  local bufname = bufnr > 0 and vim.fn.fnamemodify(vim.api.nvim_buf_get_name(bufnr), ':~:.') or ''
  for _, c in ipairs(clients) do
    local count = vim.tbl_count(c.attached_buffers)
    local attached = ('attached to %d buffer%s'):format(count, count == 1 and '' or 's')
    if bufname ~= '' then
      attached = attached .. (c.attached_buffers[bufnr] and ', including ' or ', not to ') .. bufname
    end
    health.ok(('client %d running (%s), workspaces: %s'):format(c.id, attached, table.concat(client.folders(c), ', ')))
    local server = c.server_info or {}
    if server.name then
      health.info(('server: %s %s'):format(server.name, server.version or ''))
    end
    info = client.server_info(c)
    if not info then
      health.error('the server did not announce capabilities.experimental.ctxd: is it ctxd?')
    elseif info.protocolVersion == client.PROTOCOL_VERSION then
      health.ok(('protocol version %d, %d methods'):format(info.protocolVersion, #(info.methods or {})))
    else
      health.error(
        ('protocol version %s, this plugin speaks %d'):format(tostring(info.protocolVersion), client.PROTOCOL_VERSION),
        { 'update the plugin and the daemon together' }
      )
    end
  end
  return info
end

---@param info table? `capabilities.experimental.ctxd` of a running client
local function check_state_dir(info)
  health.start('ctxd: state directory')
  local dir = info and type(info.stateDir) == 'string' and info.stateDir or nil
  local source = 'as reported by the daemon'
  if not dir then
    dir = state_dir_guess()
    source = 'from the settings and XDG_STATE_HOME'
  end
  if vim.fn.isdirectory(dir) == 1 then
    if vim.fn.filewritable(dir) == 2 then
      health.ok(('%s (%s)'):format(dir, source))
    else
      health.error(('%s is not writable (%s)'):format(dir, source))
    end
  else
    health.info(('%s does not exist yet; the daemon creates it (%s)'):format(dir, source))
  end
end

---@param info table?
local function check_tiktoken(info)
  health.start('ctxd: tiktoken')
  local reported = info and info.tiktoken
  if type(reported) == 'table' then
    if reported.available then
      health.ok(('available (%s)'):format(tostring(reported.encoding or reported.version or 'ok')))
    else
      health.warn(('not available: %s; token counts are estimated from bytes'):format(tostring(reported.error or '?')))
    end
    return
  end
  local cmd, env = daemon_cmd()
  local python = cmd and daemon_python(cmd)
  if not python then
    health.info("could not find the daemon's Python interpreter; tiktoken not checked")
    return
  end
  local code = "import tiktoken; tiktoken.get_encoding('o200k_base'); print(tiktoken.__version__)"
  local version, reason = run({ python, '-c', code }, env)
  if version then
    health.ok(('tiktoken %s with the o200k_base encoding (%s)'):format(version, python))
  else
    health.warn(('tiktoken cannot load o200k_base: %s'):format(reason or '?'), {
      'without network, point TIKTOKEN_CACHE_DIR at a folder holding the encoding files',
      'token counts fall back to estimates from bytes',
    })
  end
end

function M.check()
  check_executable()
  check_options()
  local info = check_clients()
  check_state_dir(info)
  check_tiktoken(info)
end

return M
