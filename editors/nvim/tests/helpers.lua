-- Shared set-up for the specs: the plugin on 'runtimepath', the real daemon, captured messages.
-- `run.sh` provides CTXD_REPO (the repository), CTXD_PYTHON and CTXD_WORKSPACE (a fresh git
-- repository in the temp folder); the XDG_* directories already point into that folder.

local t = require('harness')

local M = {}

M.repo = assert(vim.env.CTXD_REPO, 'run the specs through editors/nvim/tests/run.sh')
M.workspace = vim.env.CTXD_WORKSPACE
M.python = vim.env.CTXD_PYTHON or 'python3'
M.uri = M.workspace and vim.uri_from_fname(M.workspace) or nil

--- Messages given to vim.notify since `capture_notify()`: `{msg, level, full}`: `msg` as shown,
--- `full` the whole text when the plugin had to cut the line to fit (`ctxd.notify`).
M.messages = {}

function M.capture_notify()
  M.messages = {}
  vim.notify = function(msg, level)
    local said = package.loaded['ctxd.notify']
    local full = said and said.last_full or msg
    table.insert(M.messages, { msg = msg, level = level or vim.log.levels.INFO, full = full })
  end
end

--- Wait for a vim.notify message whose whole text contains `needle`; returns it.
function M.wait_message(needle, timeout_ms)
  return t.wait_for(function()
    for _, m in ipairs(M.messages) do
      if m.full:find(needle, 1, true) then
        return m
      end
    end
  end, ('a message with %q (got %s)'):format(needle, vim.inspect(M.messages)), timeout_ms)
end

--- The daemon command used by every spec: the repository's package, run by the test Python.
function M.daemon_opts(extra)
  return vim.tbl_deep_extend('force', {
    cmd = { M.python, '-m', 'ctxd' },
    cmd_env = { PYTHONPATH = M.repo },
    settings = {},
  }, extra or {})
end

--- setup() + vim.lsp.enable, open a file of the workspace and wait until the client is attached
--- and initialized. Returns the client.
function M.start(extra)
  require('ctxd').setup(M.daemon_opts(extra))
  vim.lsp.enable('ctxd')
  vim.cmd.edit(vim.fs.joinpath(M.workspace, 'README.md'))
  local bufnr = vim.api.nvim_get_current_buf()
  return t.wait_for(function()
    local c = vim.lsp.get_clients({ name = 'ctxd', bufnr = bufnr })[1]
    return c and c.initialized and c or nil
  end, 'the ctxd client to attach and initialize', 20000)
end

local thread_count = 0
--- Point the gauge and the commands at a new, empty thread; returns its name.
function M.fresh_thread()
  thread_count = thread_count + 1
  local name = ('test-%d'):format(thread_count)
  require('ctxd.threads').reset()
  require('ctxd.config').options.thread = name
  return name
end

--- A synchronous `ctxd/*` request on the current thread; raises on error.
function M.request(method, params)
  local err, result = require('ctxd.client').request_sync(method, params, nil, 20000)
  if err then
    error(('%s failed: %s'):format(method, vim.inspect(err)), 2)
  end
  return result
end

--- Same, but returns `err, result` instead of raising.
function M.try_request(method, params)
  return require('ctxd.client').request_sync(method, params, nil, 20000)
end

--- `n` words of prose-like text, the same every run (repeating one word would let a tokenizer
--- or an estimate count it as a handful of tokens).
function M.text(n, seed)
  local state = seed or 7
  local letters = 'etaoinshrdlucmfwypvbgkjqxz'
  local words = {}
  for i = 1, n do
    state = (state * 1103515245 + 12345) % 2147483648
    local len = 2 + state % 7
    local word = {}
    for k = 1, len do
      local index = math.floor(state / (k * 7 + i % 5 + 1)) % #letters + 1
      word[k] = letters:sub(index, index)
    end
    words[i] = table.concat(word)
  end
  return table.concat(words, ' ')
end

function M.user(text)
  return { type = 'message', role = 'user', content = { { type = 'input_text', text = text } } }
end

function M.assistant(text)
  return { type = 'message', role = 'assistant', content = { { type = 'output_text', text = text } } }
end

--- Wait until the gauge of the current thread satisfies `pred(snapshot)`.
function M.wait_usage(pred, what)
  return t.wait_for(function()
    local s = require('ctxd.status').get()
    return s and pred(s) and s or nil
  end, what or 'a usage snapshot')
end

--- Lines of a buffer.
function M.lines(buf)
  return vim.api.nvim_buf_get_lines(buf, 0, -1, false)
end

--- Run `git` in the workspace; returns stdout.
function M.git(args)
  local result = vim.system(vim.list_extend({ 'git', '-C', M.workspace }, args), { text = true }):wait()
  assert(result.code == 0, result.stderr)
  return vim.trim(result.stdout)
end

function M.write(path, text)
  local file = assert(io.open(vim.fs.joinpath(M.workspace, path), 'w'))
  file:write(text)
  file:close()
end

function M.read(path)
  local file = io.open(vim.fs.joinpath(M.workspace, path), 'r')
  if not file then
    return nil
  end
  local text = file:read('*a')
  file:close()
  return text
end

--- The error code of a failed compaction in the protocol the daemon speaks (v2 moved ctxd's
--- own codes out of LSP's range).
---@param lsp_client vim.lsp.Client
function M.compact_failed_code(lsp_client)
  local info = require('ctxd.client').server_info(lsp_client)
  return info.protocolVersion >= 2 and 1001 or -32001
end

--- Stop every client and wait for them to exit, so the daemon is not left running.
function M.stop_all()
  for _, c in ipairs(vim.lsp.get_clients()) do
    c:stop()
  end
  vim.wait(5000, function()
    return #vim.lsp.get_clients() == 0
  end, 20)
end

return M
