---@mod ctxd.supervisor What happens when the daemon stops without being asked to.
---
--- Like the VS Code client: a daemon that exits on its own is restarted on the buffers it served,
--- with one line saying so, up to `LIMIT` times within `WINDOW_S` seconds; the next exit stops
--- it, the gauge says "stopped", and `:Ctxd restart` starts it again. A daemon that could not start
--- at all (missing, or exiting before it answered) is said once, as a warning pointing at
--- `:checkhealth ctxd`, and the gauge says so (`ctx not installed`).

local say = require('ctxd.notify').say

local M = {}

--- The last start failure said (or not said again), for `:checkhealth ctxd`.
---@type string?
M.last_failure = nil

M.LIMIT = 4
M.WINDOW_S = 180

---@type number[] times of the recent crashes (seconds, monotonic)
local crashes = {}
--- Clients stopped on purpose (`:Ctxd restart`, Neovim exiting): their exit is no crash.
---@type table<integer, boolean>
local stopping = {}
--- Start failures already said, by command, so a missing daemon is said once per session.
---@type table<string, boolean>
local said = {}

--- Commands whose request the daemon's stop cut short, said in the supervisor's line.
---@type string[]
local cut = {}

--- A command's request was answered "the daemon stopped".
---@param what string
function M.interrupted(what)
  table.insert(cut, what)
end

--- Whether this exit is one the supervisor speaks about. A daemon that exits before it answered
--- `initialize` (`initialized` false) failed to start whatever its exit code: a wrapper that
--- prints something else on stdout and exits 0 is as broken as one that exits 1.
---@param code integer
---@param signal integer
---@param client_id integer
---@param initialized boolean? false: the client had not answered `initialize`
---@return boolean
function M.is_crash(code, signal, client_id, initialized)
  return not stopping[client_id] and vim.v.exiting == vim.NIL and (code ~= 0 or signal ~= 0 or initialized == false)
end

--- The daemon command as one line, for a message.
---@param cmd string[]|string|function|nil
---@return string
function M.command_text(cmd)
  if type(cmd) == 'table' then
    return table.concat(vim.tbl_map(tostring, cmd), ' ')
  end
  return type(cmd) == 'string' and cmd or 'ctxd'
end

--- Neovim follows a crash with its own "Client ctxd quit with exit code … Check log for errors:
--- <path>" line, wider than the command line: it is replaced by the supervisor's, for this one
--- exit only (every other message passes through to whatever `vim.notify` is).
---@param name string
function M.quiet_neovim_exit_message(name)
  local inner = vim.notify
  local prefix = ('Client %s quit with exit code'):format(name)
  local function filter(msg, ...)
    if type(msg) == 'string' and vim.startswith(msg, prefix) then
      return
    end
    return inner(msg, ...)
  end
  vim.notify = filter
  -- Neovim says it two scheduled callbacks after the exit; put vim.notify back after that.
  vim.schedule(function()
    vim.schedule(function()
      vim.schedule(function()
        if vim.notify == filter then
          vim.notify = inner
        end
      end)
    end)
  end)
end

--- Mark a client as stopped on purpose, to be started again (`:Ctxd restart`).
---@param client_id integer
function M.stopping(client_id)
  stopping[client_id] = true
end

--- Whether a client was stopped by `:Ctxd restart` (a new one follows).
---@param client_id integer
---@return boolean
function M.is_restarting(client_id)
  return stopping[client_id] == true
end

--- Forget the crash count and what was said (a start by the user begins again).
function M.reset()
  crashes = {}
  said = {}
end

--- Where the daemon command's own words are: Neovim's LSP log keeps what it wrote on stderr.
---@return string
function M.stderr_hint()
  local ok, path = pcall(function()
    return vim.lsp.log.get_filename()
  end)
  if ok and type(path) == 'string' and path ~= '' then
    return ('its stderr is in %s'):format(vim.fn.fnamemodify(path, ':~'))
  end
  return 'its stderr is in the LSP log (:checkhealth vim.lsp)'
end

---@param code integer
---@param signal integer
---@return string
local function how(code, signal)
  if signal ~= 0 then
    return ('signal %d'):format(signal)
  end
  return ('exit code %d'):format(code)
end

--- Say once that the daemon could not start with `cmd`: a warning, as every problem found while
--- Neovim starts or a file opens (the editor works on without ctxd).
---@param cmd string[]|string
---@param why string
---@param detail string? said after the pointer to `:checkhealth ctxd`
function M.start_failed(cmd, why, detail)
  local key = type(cmd) == 'table' and table.concat(cmd, ' ') or tostring(cmd)
  M.last_failure = detail and ('%s: %s'):format(why, detail) or why
  if said[key] then
    return
  end
  said[key] = true
  say(('%s; see :checkhealth ctxd%s'):format(why, detail and (' · ' .. detail) or ''), vim.log.levels.WARN)
end

--- The `on_exit` of a ctxd client. `initialized`: it had answered `initialize`.
---@param code integer
---@param signal integer
---@param client_id integer
---@param info { config: table?, buffers: integer[], folders: string[], initialized: boolean }
function M.exited(code, signal, client_id, info)
  local crash = M.is_crash(code, signal, client_id, info.initialized)
  stopping[client_id] = nil
  local during = #cut > 0 and (' during %s'):format(table.concat(cut, ', ')) or ''
  cut = {}
  if not crash then
    return
  end
  local status = require('ctxd.status')
  if not info.initialized then
    for _, folder in ipairs(info.folders) do
      status.set_down(folder, 'not running')
    end
    -- The line may be cut to fit the command line: what it says first is what to do; the
    -- command and where its output went follow (whole in :checkhealth ctxd).
    local cmd = info.config and info.config.cmd or 'ctxd'
    M.start_failed(cmd, ('the daemon did not start (%s)'):format(how(code, signal)),
      ('`%s` exited before it answered in LSP on stdout; %s'):format(M.command_text(cmd), M.stderr_hint()))
    return
  end
  local now = vim.uv.hrtime() / 1e9
  crashes = vim.tbl_filter(function(t)
    return now - t < M.WINDOW_S
  end, crashes)
  table.insert(crashes, now)
  if #crashes > M.LIMIT or not info.config then
    for _, folder in ipairs(info.folders) do
      status.set_down(folder, 'stopped')
    end
    say(('the daemon stopped after %d crashes in %d minutes%s; :Ctxd restart starts it again'):format(#crashes, M.WINDOW_S / 60, during),
      vim.log.levels.ERROR)
    return
  end
  say(('the daemon stopped (%s)%s; restarting it (%d of %d)'):format(how(code, signal), during, #crashes, M.LIMIT), vim.log.levels.WARN)
  for _, buf in ipairs(info.buffers) do
    if vim.api.nvim_buf_is_valid(buf) then
      vim.lsp.start(info.config, { bufnr = buf })
    end
  end
end

--- Before any client starts: a daemon command that is not executable is said once, instead of
--- Neovim's silent refusal (it only logs it).
---@param bufnr integer
function M.check_command(bufnr)
  local ok, lsp_config = pcall(function()
    return vim.lsp.config.ctxd
  end)
  local cmd = ok and lsp_config and lsp_config.cmd
  if type(cmd) ~= 'table' or not cmd[1] or vim.fn.executable(cmd[1]) == 1 then
    return
  end
  local markers = lsp_config.root_markers or { '.git' }
  local root = vim.api.nvim_buf_get_name(bufnr) ~= '' and vim.fs.root(bufnr, markers) or nil
  if not root then
    return
  end
  local down, why = M.not_runnable(cmd[1])
  require('ctxd.status').set_down(vim.uri_from_fname(root), down)
  M.start_failed(cmd, why)
end

--- Why the daemon command `name` cannot run: the gauge's word and the sentence. A file that is
--- there without its execute bit is not "not installed" (installing again is not the fix).
---@param name string
---@return string down
---@return string why
function M.not_runnable(name)
  local stat = name:find('/', 1, true) and vim.uv.fs_stat(name) or nil
  if stat and stat.type == 'file' then
    return 'not executable', ('the daemon is not executable (%s: chmod +x it)'):format(name)
  end
  return 'not installed', ('the daemon is not installed (%s not found)'):format(name)
end

return M
