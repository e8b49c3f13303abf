-- The ways out, in a headless Neovim against the real daemon: a daemon that is not installed, one
-- that exits before it answers, one that crashes (restarted, with a line), one that keeps crashing
-- (stopped, the gauge says so, :Ctxd restart brings it back), a :Ctxd compact in flight when it
-- dies, an untrusted repository's burst of warnings, short snapshot ids, progress without fidget.
local t = require('harness')
local h = require('helpers')

--- The cells a message may take without a "Press ENTER" prompt.
local function width()
  local space = tonumber(vim.v.echospace) or 0
  return space > 0 and space or vim.o.columns - 12
end

--- Every message so far fits the command line in one line (no "Press ENTER").
local function all_short()
  for _, m in ipairs(h.messages) do
    t.truthy(not m.msg:find('\n'), 'one line: ' .. m.msg)
    t.truthy(vim.fn.strdisplaywidth(m.msg) <= width(), ('fits %d cells: %s'):format(width(), m.msg))
  end
end

local function messages_with(needle)
  return vim.tbl_filter(function(m)
    return m.msg:find(needle, 1, true) ~= nil
  end, h.messages)
end

--- `:checkhealth ctxd` as text.
local function health()
  vim.cmd('silent checkhealth ctxd')
  local text = table.concat(h.lines(0), '\n')
  vim.cmd('bwipeout!')
  return text
end

local pidfile = vim.fn.tempname()
--- The real daemon, run so that its process id is written down (the test kills it).
local function counted_daemon()
  return {
    cmd = {
      h.python,
      '-c',
      "import os, runpy, sys; open(os.environ['TEST_PIDFILE'], 'a').write(str(os.getpid()) + '\\n'); "
        .. "sys.argv = ['ctxd'] + sys.argv[1:]; runpy.run_module('ctxd', run_name='__main__')",
    },
    cmd_env = { PYTHONPATH = h.repo, TEST_PIDFILE = pidfile, OPENAI_API_KEY = 'sk-test-not-a-key' },
  }
end

local function last_pid()
  local lines = vim.fn.filereadable(pidfile) == 1 and vim.fn.readfile(pidfile) or {}
  return tonumber(lines[#lines])
end

local function attached_client(not_id)
  return t.wait_for(function()
    local c = vim.lsp.get_clients({ name = 'ctxd', bufnr = vim.fn.bufnr(vim.fs.joinpath(h.workspace, 'README.md')) })[1]
    return c and c.initialized and c.id ~= not_id and c or nil
  end, 'an initialized client', 20000)
end

t.describe('ways out', function()
  t.before_each(function()
    h.capture_notify()
  end)

  t.it('a daemon that is not installed is said once at start, and by :Ctxd restart; :checkhealth says how to install', function()
    require('ctxd').setup({ enable = true, cmd = { 'ctxd-not-installed-here' } })
    vim.cmd.edit(vim.fs.joinpath(h.workspace, 'README.md'))
    local said = h.wait_message('the daemon is not installed (ctxd-not-installed-here not found); see :checkhealth ctxd')
    t.eq(vim.log.levels.WARN, said.level, 'a warning: Neovim works on without ctxd')
    vim.cmd.edit(vim.fs.joinpath(h.workspace, 'other.md'))
    vim.cmd.buffer(vim.fn.bufnr(vim.fs.joinpath(h.workspace, 'README.md')))
    vim.wait(50)
    t.eq(1, #h.messages, vim.inspect(h.messages))
    h.messages = {}
    vim.cmd('Ctxd restart')
    h.wait_message('not installed')
    vim.wait(50)
    t.eq(1, #h.messages, vim.inspect(h.messages))
    t.contains('not installed (ctxd-not-installed-here not found)', h.messages[1].full)
    t.eq(nil, h.messages[1].msg:find('starting', 1, true))
    local text = health()
    t.contains('pipx install ~/src/ctxd', text)
    t.contains('python3 -m venv ~/.local/share/ctxd', text)
    t.eq(nil, text:find('ctxd-daemon', 1, true), text)
    -- The client is enabled already: health says why it does not run, not to enable it.
    t.eq(nil, text:find('vim.lsp.enable', 1, true), text)
    t.contains('the daemon is not installed', text)
    all_short()
  end)

  t.it(":checkhealth points at a ctxd that is installed but not on the command's path, not at installing it", function()
    local venv = vim.fs.joinpath(vim.env.HOME, '.local', 'share', 'ctxd', 'bin')
    vim.fn.mkdir(venv, 'p')
    vim.fn.writefile({ '#!/bin/sh', 'exit 0' }, venv .. '/ctxd')
    vim.fn.setfperm(venv .. '/ctxd', 'rwxr-xr-x')
    require('ctxd').setup({ enable = true, cmd = { 'ctxd-not-installed-here' } })
    local text = health()
    t.contains(('ctxd is installed at %s/ctxd'):format(venv), text)
    t.contains(("setup({ cmd = { '%s/ctxd' } })"):format(venv), text)
    t.eq(nil, text:find('pipx install', 1, true), text)
    -- A `~` Neovim does not expand in cmd.
    require('ctxd').setup({ enable = true, cmd = { '~/.local/share/ctxd/bin/ctxd' } })
    text = health()
    t.contains('Neovim does not expand `~` in cmd', text)
    t.contains("setup({ cmd = { vim.fn.expand('~/.local/share/ctxd/bin/ctxd') } })", text)
    vim.fn.delete(vim.fs.joinpath(vim.env.HOME, '.local', 'share', 'ctxd'), 'rf')
  end)

  t.it('a daemon that exits before it answers is said, once', function()
    -- -I -S: this Python cannot import ctxd.
    require('ctxd').setup({ enable = true, cmd = { h.python, '-I', '-S', '-m', 'ctxd' } })
    vim.cmd('Ctxd restart')
    h.wait_message('the daemon did not start (exit code 1); see :checkhealth ctxd', 20000)
    t.eq(vim.log.levels.WARN, h.messages[#h.messages].level)
    t.eq('ctx not running', require('ctxd').gauge().text)
    all_short()
  end)

  --- A daemon command that is a wrapper printing something else than LSP on stdout.
  local function garbage_wrapper(name, after)
    local file = vim.fs.joinpath(vim.env.HOME, 'bin', name)
    vim.fn.mkdir(vim.fs.dirname(file), 'p')
    vim.fn.writefile({ '#!/bin/sh', 'echo "welcome to the wrapper"', after }, file)
    vim.fn.setfperm(file, 'rwxr-xr-x')
    return file
  end

  t.it('a wrapper that prints garbage and exits 0 is said to have exited, with its command, not "open a file in a git repository"', function()
    h.stop_all()
    local file = garbage_wrapper('ctxd-garbage-exit', 'exit 0')
    require('ctxd').setup({ enable = true, cmd = { file } })
    h.messages = {}
    vim.cmd.edit(vim.fs.joinpath(h.workspace, 'README.md'))
    local said = h.wait_message('the daemon did not start (exit code 0); see :checkhealth ctxd', 20000)
    t.eq(vim.log.levels.WARN, said.level)
    t.contains(('`%s` exited before it answered in LSP on stdout'):format(file), said.full)
    t.contains('its stderr is in ', said.full)
    all_short()
    h.messages = {}
    vim.cmd('Ctxd usage')
    local failed = h.wait_message('usage failed')
    t.contains('the daemon did not start', failed.full)
    t.eq(nil, failed.full:find('git repository', 1, true), failed.full)
    local text = health()
    t.contains(('`%s` exited before it answered in LSP on stdout'):format(file), text)
  end)

  t.it('a wrapper that prints garbage and keeps running is said not to answer, with its command, not "open a file in a git repository"', function()
    local file = garbage_wrapper('ctxd-garbage-hang', 'exec sleep 600')
    require('ctxd').setup({ enable = true, cmd = { file } })
    vim.cmd('bwipeout!')
    vim.cmd.edit(vim.fs.joinpath(h.workspace, 'README.md'))
    local hung = t.wait_for(function()
      return require('ctxd.client').starting()[1]
    end, 'a ctxd client that has not answered initialize', 20000)
    h.messages = {}
    vim.cmd('Ctxd usage')
    local failed = h.wait_message('usage failed')
    t.contains('the daemon has not answered yet; see :checkhealth ctxd', failed.full)
    t.contains(('`%s` started but has not spoken LSP on stdout'):format(file), failed.full)
    t.eq(nil, failed.full:find('git repository', 1, true), failed.full)
    local text = health()
    t.contains('the daemon started but has not answered `initialize`', text)
    t.contains(('`%s` must speak LSP on stdout'):format(file), text)
    require('ctxd.supervisor').stopping(hung.id)
    hung:stop(true)
    t.wait_for(function()
      return hung:is_stopped() and #require('ctxd.client').starting() == 0
    end, 'the wrapper to stop')
  end)

  t.it('a crashed daemon is restarted with one line; a compaction in flight says it failed', function()
    -- A model endpoint that accepts and never answers: the compaction stays in flight.
    local server = assert(vim.uv.new_tcp())
    server:bind('127.0.0.1', 0)
    local held = {}
    server:listen(16, function()
      local conn = vim.uv.new_tcp()
      server:accept(conn)
      table.insert(held, conn)
    end)
    local port = server:getsockname().port
    require('ctxd').setup(vim.tbl_extend('force', counted_daemon(), {
      enable = true,
      settings = { llm = { baseUrl = ('http://127.0.0.1:%d/v1'):format(port), model = 'gpt-5' } },
    }))
    vim.cmd('Ctxd restart')
    local first = attached_client()
    h.fresh_thread()
    h.request('ctxd/record', { items = { h.user(h.text(300)), h.assistant(h.text(200, 3)) } })
    h.messages = {}
    vim.cmd('Ctxd compact llm')
    t.wait_for(function()
      return #held > 0
    end, 'the compaction to reach the endpoint', 20000)
    vim.uv.kill(last_pid(), 9)
    -- One line for the whole event: the stop, the compaction it cut short, the restart.
    h.wait_message('the daemon stopped (signal 9) during compact; restarting it (1 of 4)', 10000)
    local second = attached_client(first.id)
    t.truthy(second.id ~= first.id)
    vim.wait(300)
    t.eq(1, #h.messages, vim.inspect(h.messages))
    for _, conn in ipairs(held) do
      conn:close()
    end
    server:close()
    all_short()
  end)

  t.it('a daemon that keeps crashing is left stopped, the gauge says so, :Ctxd restart brings it back', function()
    local supervisor = require('ctxd.supervisor')
    local limit = supervisor.LIMIT
    supervisor.LIMIT = 1
    supervisor.reset()
    local c = attached_client()
    vim.uv.kill(last_pid(), 9)
    h.wait_message('restarting it (1 of 1)', 10000)
    c = attached_client(c.id)
    vim.uv.kill(last_pid(), 9)
    h.wait_message('the daemon stopped after 2 crashes in 3 minutes; :Ctxd restart starts it again', 10000)
    supervisor.LIMIT = limit
    t.wait_for(function()
      return #vim.lsp.get_clients({ name = 'ctxd' }) == 0
    end, 'the client to go')
    t.eq('ctx stopped', require('ctxd').gauge().text)
    t.matches('^%%#CtxdCompact#ctx stopped%%%*$', require('ctxd').statusline({ click = false }))
    -- Every command names the way out.
    h.messages = {}
    vim.cmd('Ctxd usage')
    t.contains('usage failed: the daemon stopped; :Ctxd restart starts it again', h.wait_message('usage failed').full)
    local text = health()
    t.contains(':Ctxd restart starts it again', text)
    t.eq(nil, text:find('vim.lsp.enable', 1, true), text)
    vim.cmd('Ctxd restart')
    attached_client(c.id)
    t.wait_for(function()
      local g = require('ctxd').gauge()
      return not (g and g.down)
    end, 'the gauge to stop saying stopped')
    all_short()
  end)

  t.it('an untrusted repository\'s five ignored settings are one short line; :checkhealth has each', function()
    h.write('.ctxd.toml', table.concat({
      'state_dir = "/tmp/elsewhere"',
      'compact_prompt_file = "/etc/passwd"',
      '[llm]',
      'base_url = "http://127.0.0.1:9/v1"',
      'model = "gpt-5"',
      'api_key_env = "HOME"',
      '[sources]',
      'codex = false',
    }, '\n') .. '\n')
    local old = attached_client()
    h.messages = {}
    vim.cmd('Ctxd restart')
    attached_client(old.id)
    local line = h.wait_message('messages from the daemon; :checkhealth ctxd shows them', 20000)
    t.eq(vim.log.levels.WARN, line.level)
    -- Give any stragglers time to arrive: still one line about them.
    vim.wait(500)
    t.eq(1, #messages_with('from the daemon'), vim.inspect(h.messages))
    t.eq(0, #messages_with('llm.base_url'), vim.inspect(h.messages))
    all_short()
    vim.cmd.buffer(vim.fn.bufnr(vim.fs.joinpath(h.workspace, 'README.md')))
    local text = health()
    t.contains('recent messages (whole)', text)
    t.contains('llm.base_url', text)
    t.contains('state_dir', text)
    -- One fix for the five: said once, not once per setting.
    local _, times = text:gsub(':trust, then :Ctxd restart', '')
    t.eq(1, times, text)
    os.remove(vim.fs.joinpath(h.workspace, '.ctxd.toml'))
  end)

  t.it(':Ctxd diff takes the short id the other commands print', function()
    attached_client()
    local snap = h.request('ctxd/ghost/snapshot', { message = 'prefix test' })
    h.write('README.md', '# changed since the snapshot\n')
    h.messages = {}
    vim.cmd('Ctxd diff ' .. snap.id:sub(1, 10))
    t.wait_for(function()
      local qf = vim.fn.getqflist({ title = 0, items = 0 })
      return qf.title == ('ctxd diff %s'):format(snap.id:sub(1, 10)) and #qf.items == 1 and qf
    end, 'the quickfix list of the diff (messages ' .. vim.inspect(h.messages) .. ')')
    vim.cmd('cclose')
    h.messages = {}
    vim.cmd('Ctxd diff ffffffffff')
    local refused = h.wait_message('diff failed: no snapshot ffffffffff')
    t.eq(vim.log.levels.ERROR, refused.level)
    h.write('README.md', '# test workspace\n')
  end)

  t.it('progress shows in the command line without a progress plugin', function()
    attached_client()
    h.fresh_thread()
    local items = {}
    for i = 1, 6 do
      table.insert(items, h.user(('question %d '):format(i) .. h.text(400, i)))
      table.insert(items, h.assistant(('answer %d '):format(i) .. h.text(400, 100 + i)))
    end
    h.request('ctxd/record', { items = items })
    local echoed = {}
    local echo = vim.api.nvim_echo
    vim.api.nvim_echo = function(chunks, history, opts)
      table.insert(echoed, { text = chunks[1] and chunks[1][1] or '', history = history })
      return echo(chunks, history, opts)
    end
    vim.cmd('Ctxd compact offline')
    h.wait_message('compacted', 30000)
    vim.api.nvim_echo = echo
    local shown = vim.tbl_filter(function(e)
      return e.text:match('^ctxd: ') ~= nil
    end, echoed)
    t.truthy(#shown > 0, 'progress echoed: ' .. vim.inspect(echoed))
    t.eq(false, shown[1].history)
    t.truthy(vim.fn.strdisplaywidth(shown[1].text) <= width(), shown[1].text)
  end)
end)
