---@mod ctxd.health `:checkhealth ctxd`

local methods = require('ctxd.protocol').methods

local M = {}

local health = vim.health

--- How to install the daemon from what exists: a clone of the repository (it is not on PyPI).
M.install_advice = {
  'install it from a clone: git clone <ctxd repository> ~/src/ctxd, then pipx install ~/src/ctxd',
  'or into a venv: python3 -m venv ~/.local/share/ctxd && ~/.local/share/ctxd/bin/pip install ~/src/ctxd',
  "then setup({ cmd = { vim.fn.expand('~/.local/share/ctxd/bin/ctxd') } }) if it is not on PATH; :Ctxd restart",
}

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

local function check_executable()
  health.start('ctxd: daemon')
  local cmd, env = daemon_cmd()
  if not cmd then
    health.info('cmd is a function (an in-process or custom transport): not checked')
    return
  end
  local exe = vim.fn.exepath(cmd[1])
  if exe == '' then
    health.error(('`%s` is not executable'):format(cmd[1]), M.install_advice)
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
  local chosen, chosen_info = nil, nil
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
    local info = client.server_info(c)
    if not chosen or c.attached_buffers[bufnr] then
      chosen, chosen_info = c, info
    end
    if not info then
      health.error('the server did not announce capabilities.experimental.ctxd: is it ctxd?')
    elseif client.speaks(info.protocolVersion) then
      health.ok(('protocol version %d, %d methods'):format(info.protocolVersion, #(info.methods or {})))
    else
      health.error(
        ('protocol version %s, this plugin speaks %s'):format(
          tostring(info.protocolVersion),
          table.concat(client.PROTOCOL_VERSIONS, ' and ')
        ),
        { 'update the plugin and the daemon together' }
      )
    end
  end
  return chosen, chosen_info
end

---@param info table? the `ctxd/status` result, or `capabilities.experimental.ctxd`
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

--- Advice for a tokenizer that does not count exactly.
local tokenizer_advice = {
  unavailable = {
    'the daemon could not load the encoding: reinstall it with its dependencies (pip install --upgrade ~/src/ctxd into its venv)',
    'until then token counts are estimates',
  },
}

--- What the daemon says of itself (`ctxd/status`, protocol 2): settings problems, tokenizers,
--- session sources. Asked of the client that serves the user's buffer; a daemon without
--- `ctxd/status` is reported as such (the plugin never probes the daemon's Python itself).
---@param lsp_client vim.lsp.Client?
---@param info table?
---@return table? status the `ctxd/status` result
local function check_status(lsp_client, info)
  health.start('ctxd: daemon status')
  if not lsp_client then
    health.info('no client: settings problems and tokenizers are shown once the daemon runs')
    return nil
  end
  local client = require('ctxd.client')
  if not client.supports(lsp_client, methods.status) then
    health.warn(
      ('the daemon does not answer ctxd/status (protocol %s): its settings problems and tokenizers are not shown'):format(
        tostring(info and info.protocolVersion)
      ),
      { 'update the daemon: git pull in your clone, then pipx install --force ~/src/ctxd (or pip install --upgrade it into its venv)' }
    )
    return nil
  end
  local bufnr = vim.fn.bufnr('#')
  local err, status = client.request_sync(methods.status, {}, { client = lsp_client, bufnr = bufnr > 0 and bufnr or nil }, 10000)
  if err or type(status) ~= 'table' then
    health.error(('%s failed: %s'):format(methods.status, client.format_error(err or 'no result')))
    return nil
  end
  local _, reason = require('ctxd.trust').verdict(lsp_client.root_dir)
  if status.trusted then
    health.ok(('workspace trusted (%s): its .ctxd.toml may set llm.*, state_dir, sources.*'):format(reason))
  else
    health.info(('workspace not trusted (%s): its .ctxd.toml may not set llm.*, state_dir, sources.*'):format(reason))
    health.info('to trust it: open its .ctxd.toml, :trust, then :Ctxd restart (or setup({ trusted = true }))')
  end
  local problems = type(status.problems) == 'table' and status.problems or {}
  if #problems == 0 then
    health.ok('no settings problems')
  end
  for _, p in ipairs(problems) do
    local where = tostring(p.source or 'settings') .. (p.key and (' `' .. tostring(p.key) .. '`') or '')
    health.warn(('%s: %s'):format(where, tostring(p.message)), require('ctxd.health').problem_advice(p))
  end
  for _, tok in ipairs(type(status.tokenizers) == 'table' and status.tokenizers or {}) do
    local line = ('tokenizer %s: %s'):format(tostring(tok.name), tostring(tok.status))
    if tok.status == 'exact' then
      health.ok(line .. ' (token counts are exact)')
    elseif tok.status == 'unavailable' then
      health.warn(line, tokenizer_advice.unavailable)
    elseif tok.status == 'idle' then
      health.info(line .. ' (no thread has needed it yet)')
    else
      health.info(line)
    end
  end
  for _, src in ipairs(type(status.sources) == 'table' and status.sources or {}) do
    health.info(('%s sessions: %s, %s (%s)'):format(
      tostring(src.agent),
      src.enabled and (tostring(src.sessions or 0) .. ' followed') or 'off',
      tostring(src.root),
      src.enabled and 'on' or 'sources.' .. tostring(src.agent) .. ' = false'
    ))
    for _, unread in ipairs(type(src.unread) == 'table' and src.unread or {}) do
      health.warn(M.unread_sentence(src.agent, unread) .. ': ' .. table.concat(unread.kinds or {}, ', '),
        { 'ctxd follows what it reads; tell ctxd\'s maintainers which version wrote these' })
    end
  end
  return status
end

local agent_names = { codex = 'Codex', claude = 'Claude Code' }

--- Format drift as ctxd/sessions/drift.py says it: "Codex 0.171.0 wrote 3 kinds of record ctxd does not read".
---@param agent string
---@param unread { version: string?, kinds: string[]? }
---@return string
function M.unread_sentence(agent, unread)
  local name = agent_names[agent] or tostring(agent)
  if type(unread.version) == 'string' and unread.version ~= '' then
    name = name .. ' ' .. unread.version
  end
  local n = #(unread.kinds or {})
  return ('%s wrote %d kind%s of record ctxd does not read'):format(name, n, n == 1 and '' or 's')
end

--- The fix to type for a settings problem from `ctxd/status`.
---@param problem { source: string?, key: string?, message: string? }
---@return string[]
function M.problem_advice(problem)
  local message = tostring(problem.message or '')
  local source = tostring(problem.source or '')
  if message:find('not trusted', 1, true) or message:find('untrusted', 1, true) then
    return {
      'if you trust this repository: open its .ctxd.toml, :trust, then :Ctxd restart',
      'or trust workspaces yourself: setup({ trusted = function(root) ... end })',
    }
  end
  local file = source:match('%.toml$') and source or nil
  if file then
    return { ('fix or remove %s in %s, then :Ctxd restart'):format(problem.key and ('`' .. problem.key .. '`') or 'the value', file) }
  end
  return { ("fix it in require('ctxd').setup({ settings = { ... } }), then :Ctxd restart") }
end

--- The daemon's messages, whole (the command line shows each burst as one short line).
local function check_messages()
  health.start('ctxd: recent messages (whole)')
  local recent = require('ctxd.notify').recent
  if #recent == 0 then
    health.ok('none')
  end
  -- Past messages, not problems of now (those are checked above): listed, not judged again.
  local names = { [vim.log.levels.ERROR] = 'error', [vim.log.levels.WARN] = 'warning' }
  for _, m in ipairs(recent) do
    health.info(('%s%s'):format(names[m.level] and (names[m.level] .. ': ') or '', m.msg))
  end
end

function M.check()
  check_executable()
  check_options()
  local lsp_client, info = check_clients()
  local status = check_status(lsp_client, info)
  check_messages()
  check_state_dir(status or info)
end

return M
