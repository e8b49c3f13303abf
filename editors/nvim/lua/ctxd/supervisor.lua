---@mod ctxd.supervisor What happens when the daemon stops without being asked to.
---
--- Like the VS Code client: a daemon that exits on its own is restarted on the buffers it served,
--- with one line saying so, up to `LIMIT` times within `WINDOW_S` seconds; the next exit stops
--- it, the gauge says "stopped", and `:Ctxd restart` starts it again. A daemon that could not start
--- at all (missing, or exiting before it answered) is said once, as a warning pointing at
--- `:checkhealth ctxd`, and the gauge says so (`ctx not installed`).

local say = require('ctxd.notify').say

local M = {}

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

--- Whether this exit is one the supervisor speaks about.
---@param code integer
---@param signal integer
---@param client_id integer
---@return boolean
function M.is_crash(code, signal, client_id)
  return not stopping[client_id] and vim.v.exiting == vim.NIL and (code ~= 0 or signal ~= 0)
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
function M.start_failed(cmd, why)
  local key = type(cmd) == 'table' and table.concat(cmd, ' ') or tostring(cmd)
  if said[key] then
    return
  end
  said[key] = true
  say(('%s; see :checkhealth ctxd'):format(why), vim.log.levels.WARN)
end

--- The `on_exit` of a ctxd client. `initialized`: it had answered `initialize`.
---@param code integer
---@param signal integer
---@param client_id integer
---@param info { config: table?, buffers: integer[], folders: string[], initialized: boolean }
function M.exited(code, signal, client_id, info)
  local crash = M.is_crash(code, signal, client_id)
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
    M.start_failed(info.config and info.config.cmd or 'ctxd', ('the daemon did not start (%s)'):format(how(code, signal)))
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
