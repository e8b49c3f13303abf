-- `:Ctxd hooks install|uninstall|status` and the hooks section of `:checkhealth ctxd`, running the
-- real `ctxd hooks` command line in the spec's own HOME (run.sh points HOME into its temp folder):
-- the diff first in a scratch buffer, nothing written until the user says so. The HOME starts with
-- no agent in it; then Claude Code and Codex have run there (their folders), the others not.
local t = require('harness')
local h = require('helpers')

local client ---@type vim.lsp.Client

--- Answer the next vim.ui.select with the item `choose` names; returns what was asked.
local function answer(choose)
  local saved, asked = vim.ui.select, {}
  vim.ui.select = function(items, opts, on_choice)
    vim.ui.select = saved
    asked.prompt, asked.items = opts.prompt, items
    for i, item in ipairs(items) do
      if item == choose then
        return on_choice(item, i)
      end
    end
    on_choice(nil, nil)
  end
  return asked
end

--- The scratch buffer `:Ctxd hooks` opened, once it holds `needle`.
local function buffer_with(needle)
  return t.wait_for(function()
    for _, win in ipairs(vim.api.nvim_list_wins()) do
      local buf = vim.api.nvim_win_get_buf(win)
      local text = table.concat(h.lines(buf), '\n')
      if text:find(needle, 1, true) then
        return { buf = buf, win = win, text = text }
      end
    end
  end, ('a buffer with %q (messages %s)'):format(needle, vim.inspect(h.messages)), 30000)
end

local settings = vim.fs.joinpath(vim.env.HOME, '.claude', 'settings.json')

--- The names (`Claude Code`) of the agents this ctxd hooks, as `ctxd hooks status` lists them
--- (by agent name): asked of ctxd's registry, so adding or removing an agent needs no edit here.
local function hooked_names()
  local out = vim.fn.system({ h.python, '-c',
    'import ctxd.agents as a; print(" ".join(sorted(x.name for x in a.with_hooks())))' })
  assert(vim.v.shell_error == 0, out)
  local names = {}
  for agent in out:gmatch('%S+') do
    names[#names + 1] = require('ctxd.agents').get(agent).name
  end
  t.truthy(vim.tbl_contains(names, 'Claude Code') and vim.tbl_contains(names, 'Codex'), vim.inspect(names))
  return names
end
local codex = vim.fs.joinpath(vim.env.HOME, '.codex', 'config.toml')

--- The folders of the agents not on this machine: nothing may make them but an install naming one.
local function absent_made()
  return vim.tbl_filter(function(dir)
    return vim.fn.isdirectory(dir) == 1
  end, { vim.fs.joinpath(vim.env.HOME, '.gemini'), vim.fs.joinpath(vim.env.HOME, '.qwen'),
    vim.fs.joinpath(vim.env.XDG_CONFIG_HOME, 'opencode'), vim.fs.joinpath(vim.env.XDG_DATA_HOME, 'opencode') })
end

t.describe(':Ctxd hooks', function()
  t.before_each(function()
    h.capture_notify()
    if not client or client:is_stopped() then
      client = h.start()
    end
  end)
  t.after_each(function()
    vim.cmd('silent! only')
    vim.cmd.buffer(vim.fn.bufnr(vim.fs.joinpath(h.workspace, 'README.md')))
  end)

  t.it('completes the actions, then every agent the daemon names, all, and scopes', function()
    t.eq({ 'install', 'uninstall', 'status' }, vim.fn.getcompletion('Ctxd hooks ', 'cmdline'))
    t.eq({ 'install' }, vim.fn.getcompletion('Ctxd hooks in', 'cmdline'))
    t.eq({ 'claude', 'codex', 'gemini', 'opencode', 'qwen', 'all', 'user', 'project' },
      vim.fn.getcompletion('Ctxd hooks install ', 'cmdline'))
    t.eq({ 'qwen' }, vim.fn.getcompletion('Ctxd hooks install q', 'cmdline'))
    t.eq({ 'project' }, vim.fn.getcompletion('Ctxd hooks install codex p', 'cmdline'))
    vim.cmd('Ctxd hooks nonsense')
    t.contains('hooks takes install, uninstall, status', h.wait_message('hooks takes').full)
    local hooks = require('ctxd.hooks')
    t.eq({ action = 'install', scope = 'user' }, hooks.parse_args({ 'install' }), 'no agent: the ones on this machine')
    t.eq({ action = 'install', agent = 'opencode', scope = 'project' }, hooks.parse_args({ 'install', 'project', 'opencode' }))
    -- The ids are the daemon's: one a newer ctxd adds is taken; before any daemon, the five ctxd knows.
    local agents = require('ctxd.agents')
    local given = agents.names
    agents.set_names(vim.tbl_extend('force', given, { zed = 'Zed Agent' }))
    t.eq('zed', hooks.parse_args({ 'install', 'zed' }).agent)
    agents.set_names(nil)
    t.eq({ 'claude', 'codex', 'gemini', 'opencode', 'qwen' }, hooks.agents())
    local _, problem = hooks.parse_args({ 'install', 'zed' })
    agents.names = given
    t.eq('unknown hooks argument "zed" (an agent: claude, codex, gemini, opencode, qwen, all; a scope: user, project)', problem)
  end)

  t.it('status before any install says so, and how to add them', function()
    vim.cmd('Ctxd hooks status')
    local said = h.wait_message('hooks: ', 30000)
    local parts = vim.tbl_map(function(name) return name .. ' not installed' end, hooked_names())
    t.eq('ctxd: hooks: ' .. table.concat(parts, '; ') .. '; :Ctxd hooks install adds them', said.full)
    local shown = buffer_with('claude user: hooks none')
    t.contains('codex user: hooks none', shown.text)
    t.contains('; on this machine no (no folder ' .. vim.fs.joinpath(vim.env.HOME, '.claude'), shown.text)
  end)

  t.it('install with no agent on this machine asks nothing, writes nothing, and says how to name one', function()
    local select = vim.ui.select
    local asked = answer('Install')
    vim.cmd('Ctxd hooks install')
    local said = h.wait_message('hooks install: no agent found on this machine', 30000)
    vim.ui.select = select
    t.contains(':Ctxd hooks install {agent} (claude, codex, gemini, opencode, qwen)', said.full)
    t.eq(nil, asked.prompt, 'nothing asked')
    t.eq(0, vim.fn.filereadable(settings))
    t.eq({}, absent_made())
    -- From here on, Claude Code and Codex have run on this machine.
    vim.fn.mkdir(vim.fs.dirname(settings), 'p')
    vim.fn.mkdir(vim.fs.dirname(codex), 'p')
  end)

  t.it('install shows the diff of the agents on this machine first; Cancel writes nothing', function()
    local asked = answer('Cancel')
    vim.cmd('Ctxd hooks install')
    h.wait_message('hooks install cancelled: nothing was written', 30000)
    t.eq({ 'Install', 'Cancel' }, asked.items)
    t.eq("Install ctxd's hooks as this diff shows (Claude Code and Codex, user scope)?", asked.prompt)
    local diff = buffer_with('+++ ' .. settings)
    t.eq('diff', vim.bo[diff.buf].filetype)
    t.contains('+++ ' .. codex, diff.text)
    t.contains(' hook claude UserPromptSubmit', diff.text)
    t.eq(nil, diff.text:find('skipped', 1, true), 'the diff alone in the buffer')
    t.eq(nil, diff.text:find('.gemini', 1, true), diff.text)
    t.eq(0, vim.fn.filereadable(settings))
    t.eq(0, vim.fn.filereadable(codex))
  end)

  t.it('an agent not on this machine, named, is offered all the same', function()
    local asked = answer('Cancel')
    vim.cmd('Ctxd hooks install gemini')
    h.wait_message('hooks install cancelled: nothing was written', 30000)
    t.eq("Install ctxd's hooks as this diff shows (Gemini CLI, user scope)?", asked.prompt)
    buffer_with('+++ ' .. vim.fs.joinpath(vim.env.HOME, '.gemini', 'settings.json'))
    t.eq({}, absent_made())
  end)

  t.it('install, then status says installed (and that Codex has not trusted them yet), health too', function()
    answer('Install')
    vim.cmd('Ctxd hooks install')
    local done = h.wait_message('hooks installed: ', 30000)
    t.matches('^ctxd: hooks installed: [2-9] files written, 0 removed;', done.full)
    t.eq(1, vim.fn.filereadable(settings))
    t.contains('hook claude PreToolUse', table.concat(vim.fn.readfile(settings), '\n'))
    h.messages = {}
    vim.cmd('Ctxd hooks status')
    local said = h.wait_message('hooks: ', 30000)
    t.matches("^ctxd: hooks: Claude Code installed %(user%); Codex installed %(user%), not trusted yet: review them in the agent's /hooks; ",
      said.full)
    -- every other agent: installed in the user scope, with its own trust words if any
    -- every other agent: not on this machine, so not installed
    local parts = vim.split(said.full:gsub('^ctxd: hooks: ', ''), '; ', { plain = true })
    local names = vim.tbl_filter(function(name)
      return name ~= 'Claude Code' and name ~= 'Codex'
    end, hooked_names())
    t.eq(#names + 2, #parts, said.full)
    t.eq(vim.tbl_map(function(name) return name .. ' not installed' end, names), vim.list_slice(parts, 3), said.full)
    t.eq({}, absent_made())
    buffer_with('claude user: hooks UserPromptSubmit')
    -- Installing again: nothing to change, nothing asked.
    h.messages = {}
    vim.cmd('Ctxd hooks install')
    h.wait_message('hooks install: nothing to change (Claude Code and Codex, user scope)', 30000)
    vim.cmd.buffer(vim.fn.bufnr(vim.fs.joinpath(h.workspace, 'README.md')))
    vim.cmd('silent checkhealth ctxd')
    local text = table.concat(h.lines(0), '\n')
    vim.cmd('bwipeout!')
    t.contains('ctxd: hooks in the agents', text)
    t.matches('OK claude user: hooks UserPromptSubmit', text)
    t.matches('WARNING codex user: hooks [^\n]*not trusted yet', text)
    t.contains("review them in the agent's own /hooks", text)
  end)

  t.it('uninstall shows its diff, then takes only ctxd\'s entries out', function()
    answer('Uninstall')
    vim.cmd('Ctxd hooks uninstall claude')
    h.wait_message('hooks uninstalled: ', 30000)
    local left = vim.fn.filereadable(settings) == 1 and table.concat(vim.fn.readfile(settings), '\n') or ''
    t.eq(nil, left:find('hook claude', 1, true), left)
    t.contains('hook codex', table.concat(vim.fn.readfile(codex), '\n'), 'codex was not named: it stays')
  end)
end)
