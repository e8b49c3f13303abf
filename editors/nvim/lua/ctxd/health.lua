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
  return require('ctxd.client').daemon_command()
end

--- Where the install instructions put `ctxd`: the venv of the README, then pipx's folder.
---@return string[]
function M.install_places()
  local places = { vim.fn.expand('~/.local/share/ctxd/bin/ctxd') }
  local pipx = vim.env.PIPX_BIN_DIR
  table.insert(places, (pipx and pipx ~= '') and vim.fs.joinpath(pipx, 'ctxd') or vim.fn.expand('~/.local/bin/ctxd'))
  return places
end

--- What to do about a daemon command that is not executable: point `cmd` at a `ctxd` that is
--- installed already (a venv, pipx's folder off PATH, a `~` that was not expanded), else install.
---@param name string the command's first word
---@return string problem
---@return string[] advice
function M.missing_daemon(name)
  if require('ctxd.supervisor').not_runnable(name) == 'not executable' then
    return ('`%s` is there but not executable'):format(name), {
      ('chmod +x %s, then :Ctxd restart'):format(name),
    }
  end
  local expanded = vim.fn.expand(name)
  if expanded ~= name and vim.fn.executable(expanded) == 1 then
    return ('`%s` is not executable: Neovim does not expand `~` in cmd'):format(name), {
      ("setup({ cmd = { vim.fn.expand('%s') } }), then :Ctxd restart"):format(name),
    }
  end
  for _, place in ipairs(M.install_places()) do
    if vim.fn.executable(place) == 1 and place ~= name then
      return ('`%s` is not on PATH, but ctxd is installed at %s'):format(name, place), {
        ("setup({ cmd = { '%s' } }) (or put %s on PATH), then :Ctxd restart"):format(place, vim.fs.dirname(place)),
      }
    end
  end
  return ('`%s` is not executable'):format(name), M.install_advice
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
    local problem, advice = M.missing_daemon(cmd[1])
    health.error(problem, advice)
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
  -- :checkhealth runs in a buffer of its own: the user's buffer is the alternate one.
  local bufnr = vim.fn.bufnr('#')
  if #clients == 0 then
    local enabled = vim.lsp.is_enabled and vim.lsp.is_enabled('ctxd')
    local why = require('ctxd.status').down({ bufnr = bufnr > 0 and bufnr or nil }) or require('ctxd.status').any_down()
    if client.starting()[1] then
      local starting = client.starting()[1]
      local supervisor = require('ctxd.supervisor')
      health.warn('no ctxd client is running: the daemon started but has not answered `initialize`', {
        ('`%s` must speak LSP on stdout and print nothing else there (a wrapper that echoes, a shell profile)'):format(
          supervisor.command_text(starting.config and starting.config.cmd)),
        supervisor.stderr_hint(),
      })
    elseif why == 'stopped' then
      health.warn('no ctxd client is running: the daemon stopped after crashing repeatedly', { ':Ctxd restart starts it again' })
    elseif why == 'not installed' or why == 'not executable' then
      health.warn(('no ctxd client is running: the daemon is %s (see "ctxd: daemon" above)'):format(why))
    elseif why then
      local failure = why == 'not running' and require('ctxd.supervisor').last_failure
      health.warn(('no ctxd client is running: the daemon %s'):format(why == 'not running' and 'did not start' or why),
        { failure or 'the error above says why',
          ':Ctxd restart tries again' })
    elseif enabled then
      health.info('no ctxd client is running yet: the client is enabled, and starts on a file inside a git repository')
    else
      health.warn('no ctxd client is running', {
        "vim.lsp.enable('ctxd') (or setup({ enable = true })), then open a file in a git repository",
      })
    end
  end
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
  local problems = type(status.problems) == 'table' and status.problems or {}
  if status.trusted then
    health.ok(('workspace trusted (%s): its .ctxd.toml may set llm.*, state_dir, sources.*'):format(reason))
  else
    health.info(('workspace not trusted (%s): its .ctxd.toml may not set llm.*, state_dir, sources.*'):format(reason))
    local told = vim.iter(problems):any(function(p)
      return M.is_trust_problem(p)
    end)
    if not told then -- else the problems' own advice says it
      health.info('to trust it: open its .ctxd.toml, :trust, then :Ctxd restart (or setup({ trusted = true }))')
    end
  end
  if #problems == 0 then
    health.ok('no settings problems')
  end
  M.report_problems(problems)
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
      require('ctxd.agents').get(src.agent).name,
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

--- Format drift as ctxd/sessions/drift.py says it: "Codex 0.171.0 wrote 3 kinds of record ctxd does not read".
---@param agent string
---@param unread { version: string?, kinds: string[]? }
---@return string
function M.unread_sentence(agent, unread)
  local name = require('ctxd.agents').get(agent).name
  if type(unread.version) == 'string' and unread.version ~= '' then
    name = name .. ' ' .. unread.version
  end
  local n = #(unread.kinds or {})
  return ('%s wrote %d kind%s of record ctxd does not read'):format(name, n, n == 1 and '' or 's')
end

--- Whether a settings problem is a key ignored because the workspace is not trusted.
---@param problem { message: string? }
---@return boolean
function M.is_trust_problem(problem)
  local message = tostring(problem.message or '')
  return message:find('not trusted', 1, true) ~= nil or message:find('untrusted', 1, true) ~= nil
end

--- One warning per settings problem, the advice said once for the problems that share it (an
--- untrusted repository's five ignored keys have one fix), under the last of them.
---@param problems { source: string?, key: string?, message: string? }[]
function M.report_problems(problems)
  local groups, order = {}, {}
  for _, p in ipairs(problems) do
    local advice = M.problem_advice(p)
    local key = table.concat(advice, '\n')
    if not groups[key] then
      groups[key] = { advice = advice, problems = {} }
      table.insert(order, key)
    end
    table.insert(groups[key].problems, p)
  end
  for _, key in ipairs(order) do
    local group = groups[key]
    for i, p in ipairs(group.problems) do
      local where = tostring(p.source or 'settings') .. (p.key and (' `' .. tostring(p.key) .. '`') or '')
      health.warn(('%s: %s'):format(where, tostring(p.message)), i == #group.problems and group.advice or nil)
    end
  end
end

--- The fix to type for a settings problem from `ctxd/status`.
---@param problem { source: string?, key: string?, message: string? }
---@return string[]
function M.problem_advice(problem)
  local source = tostring(problem.source or '')
  if M.is_trust_problem(problem) then
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

--- `ctxd hooks status`: whether ctxd's hooks are in the agents' configuration, and trusted.
local function check_hooks()
  health.start('ctxd: hooks in the agents')
  local cmd, env = daemon_cmd()
  if not cmd or vim.fn.executable(cmd[1]) ~= 1 then
    health.info('not checked: the daemon command is not executable (see "ctxd: daemon")')
    return
  end
  local bufnr = vim.fn.bufnr('#')
  local markers = require('ctxd.config').options.root_markers or { '.git' }
  local cwd = bufnr > 0 and vim.api.nvim_buf_get_name(bufnr) ~= '' and vim.fs.root(bufnr, markers) or vim.fn.getcwd()
  local ok, proc = pcall(vim.system, vim.list_extend(vim.deepcopy(cmd), { 'hooks', 'status' }), { text = true, env = env, cwd = cwd })
  local result = ok and proc:wait(15000) or nil
  if not result or result.code ~= 0 then
    health.warn(('`ctxd hooks status` failed: %s'):format(result and vim.trim(result.stderr or '') or tostring(proc)))
    return
  end
  local hooks = require('ctxd.hooks')
  local any = false
  for _, line in ipairs(vim.split(vim.trim(result.stdout or ''), '\n', { plain = true, trimempty = true })) do
    local st = hooks.parse_status(line)[1] or { text = line, unreadable = true }
    if st.unreadable then
      health.warn(line) -- a configuration ctxd could not read: the line says which and why
    elseif st.installed and st.trusted == false then
      any = true
      health.warn(st.text, { "review them in the agent's own /hooks (Codex asks once per change)" })
    elseif st.installed then
      any = true
      health.ok(st.text)
    else
      health.info(st.text)
    end
  end
  if not any then
    health.info("ctxd's hooks are not installed: :Ctxd hooks install shows what it would write, then asks")
  end
end

--- Whether `:help ctxd` works: the plugin makes its help tags when it loads, unless its folder is read-only.
local function check_help()
  local doc = vim.api.nvim_get_runtime_file('doc/ctxd.txt', false)[1]
  if doc and vim.fn.filereadable(vim.fs.joinpath(vim.fs.dirname(doc), 'tags')) == 0 then
    health.start('ctxd: help')
    health.warn(('no help tags beside %s: :help ctxd fails'):format(doc), {
      (':helptags %s (the folder was not writable when the plugin loaded)'):format(vim.fs.dirname(doc)),
    })
  end
end

function M.check()
  check_executable()
  check_options()
  local lsp_client, info = check_clients()
  local status = check_status(lsp_client, info)
  check_hooks()
  check_help()
  check_messages()
  check_state_dir(status or info)
end

return M
