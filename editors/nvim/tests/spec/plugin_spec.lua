-- The plugin without a daemon: loading, options, the gauge's text, the float's rendering,
-- completion, help tags, the lualine component.
local t = require('harness')

--- A module loaded on first use, so that loading this file loads none of the plugin.
local function lazy(name)
  return setmetatable({}, {
    __index = function(_, key)
      return require(name)[key]
    end,
  })
end

local function fake_snapshot(over)
  return vim.tbl_extend('force', {
    workspace = 'file:///fake',
    thread = 'default',
    usedTokens = 48213,
    contextWindow = 128000,
    percent = 37.7,
    autoCompactLimit = 115200,
    tier = 'ok',
    source = 'estimate',
    historyVersion = 3,
  }, over or {})
end

t.describe('loading', function()
  t.it('plugin/ctxd.lua registers :Ctxd and loads no module', function()
    t.eq(2, vim.fn.exists(':Ctxd'))
    for name in pairs(package.loaded) do
      t.eq(false, vim.startswith(name, 'ctxd'), 'module loaded at startup: ' .. name)
    end
  end)

  t.it('requiring the modules defines nothing and starts nothing', function()
    local before_autocmds = #vim.api.nvim_get_autocmds({})
    for _, m in ipairs({ 'ctxd', 'ctxd.api', 'ctxd.status', 'ctxd.ui', 'ctxd.ui.model', 'ctxd.ui.view', 'ctxd.ui.window',
      'ctxd.protocol', 'ctxd.commands', 'ctxd.health', 'ctxd.lsp' }) do
      require(m)
    end
    t.eq(before_autocmds, #vim.api.nvim_get_autocmds({}))
    t.eq(0, #vim.lsp.get_clients())
    t.eq(false, vim.lsp.is_enabled('ctxd'))
    t.eq(true, vim.tbl_isempty(vim.api.nvim_get_hl(0, { name = 'CtxdOk' })))
  end)

  t.it('the view and the window send nothing; only the generated table spells a method name', function()
    local file = vim.api.nvim_get_runtime_file('lua/ctxd/ui/view.lua', false)[1]
    local root = vim.fs.dirname(vim.fs.dirname(vim.fs.dirname(file))) -- the plugin's lua/
    local function source(rel)
      return table.concat(vim.fn.readfile(vim.fs.joinpath(root, rel)), '\n')
    end
    for _, rel in ipairs({ 'ctxd/ui/view.lua', 'ctxd/ui/window.lua' }) do
      local text = source(rel)
      for _, needle in ipairs({ "require('ctxd.client')", "require('ctxd.ui.model')", ':request(', '.request(' }) do
        t.eq(nil, text:find(needle, 1, true), rel .. ' holds ' .. needle)
      end
    end
    local plugin = vim.fs.dirname(root)
    local spelled = {}
    for name, kind in vim.fs.dir(plugin, { depth = 5 }) do
      if kind == 'file' and name:match('%.lua$') and not name:match('^tests/') and name ~= 'lua/ctxd/protocol.lua' then
        for n, line in ipairs(vim.fn.readfile(vim.fs.joinpath(plugin, name))) do
          if line:match("['\"]ctxd/%a[%a/]*['\"]") or line:match("['\"]window/showMessage['\"]") then
            table.insert(spelled, ('%s:%d: %s'):format(name, n, line))
          end
        end
      end
    end
    t.eq({}, spelled)
    local methods = require('ctxd.protocol').methods
    t.eq('ctxd/recall', methods.recall)
    t.eq('ctxd/ghost/diff', methods.ghost_diff)
    t.eq('ctxd/usageChanged', methods.usage_changed)
  end)

  t.it('a stored item has a buffer name that gives its workspace, thread and seq back', function()
    local model = require('ctxd.ui.model')
    local ref = { workspace = 'file:///tmp/a b/ws%20', thread = 'codex:019a/x y', seq = 42 }
    local name = model.item_name(ref)
    t.matches('^ctxd://item/[^/]+/[^/]+/42$', name)
    t.eq(ref, model.item_ref(name))
    t.eq(nil, model.item_ref('ctxd://item/nope'))
  end)

  t.it('lsp/ctxd.lua gives cmd ctxd and the .git root marker', function()
    local cfg = vim.lsp.config.ctxd
    t.eq({ 'ctxd' }, cfg.cmd)
    t.eq({ '.git' }, cfg.root_markers)
    local methods = require('ctxd.protocol').methods
    for _, name in ipairs({ 'usage_changed', 'compacted', 'threads_changed', 'ghost_changed', 'show_message' }) do
      t.truthy(cfg.handlers[methods[name]], name)
    end
  end)
end)

t.describe('setup', function()
  t.after_each(function()
    require('ctxd.config').set({})
  end)

  t.it('merges into the defaults', function()
    local config = require('ctxd.config')
    require('ctxd').setup({ thread = 'agent', float = { bar_width = 20 } })
    t.eq('agent', config.options.thread)
    t.eq(20, config.options.float.bar_width)
    t.eq('rounded', config.options.float.border)
    t.eq({}, config.problems)
  end)

  t.it('pushes cmd and settings into the LSP config', function()
    require('ctxd').setup({ cmd = { 'my-ctxd', '--stdio' }, settings = { contextWindow = 64000 } })
    t.eq({ 'my-ctxd', '--stdio' }, vim.lsp.config.ctxd.cmd)
    t.eq(64000, vim.lsp.config.ctxd.init_options.ctxd.contextWindow)
    vim.lsp.config('ctxd', { cmd = { 'ctxd' } })
  end)

  t.it('reports unknown keys and bad types instead of erroring', function()
    local notified = {}
    local saved = vim.notify
    vim.notify = function(msg)
      table.insert(notified, msg)
    end
    require('ctxd').setup({ tread = 'x', statusline = { prefx = 'c', highlight = 'yes' }, cmd = 'ctxd', trusted = 'yes' })
    t.wait_for(function()
      return #notified > 0
    end, 'the setup message (said from the main loop)')
    vim.notify = saved
    local config = require('ctxd.config')
    t.eq(nil, config.options.thread, 'no thread option: the gauge follows the most recently active thread')
    t.eq(nil, config.options.trusted)
    t.eq(true, config.options.statusline.highlight)
    t.eq({ 'ctxd' }, vim.lsp.config.ctxd.cmd)
    local problems = table.concat(config.problems, '\n')
    t.contains('unknown option `tread`', problems)
    t.contains('unknown option `statusline.prefx`', problems)
    t.contains('option `statusline.highlight` must be a boolean, got string', problems)
    t.contains('option `cmd` must be a table, got string', problems)
    t.contains('option `trusted` must be a boolean or function, got string', problems)
    t.contains('see :checkhealth ctxd', notified[1])
  end)

  t.it(':checkhealth ctxd lists the unknown keys', function()
    local saved = vim.notify
    vim.notify = function() end
    require('ctxd').setup({ tread = 'x' })
    vim.wait(50)
    vim.notify = saved
    vim.cmd('silent checkhealth ctxd')
    local text = table.concat(vim.api.nvim_buf_get_lines(0, 0, -1, false), '\n')
    vim.cmd('bwipeout!')
    t.contains('unknown option `tread` (ignored)', text)
    t.contains('no ctxd client is running', text)
  end)
end)

t.describe('gauge', function()
  local status = lazy('ctxd.status')
  local target = { workspace = 'file:///fake', thread = 'default' }

  t.it('formats token counts', function()
    t.eq('950', status.format_tokens(950))
    t.eq('48.2k', status.format_tokens(48213))
    t.eq('128k', status.format_tokens(128000))
    t.eq('131.1k', status.format_tokens(131072))
    t.eq('1M', status.format_tokens(1000000))
    t.eq('1.2M', status.format_tokens(1234567))
  end)

  t.it('is empty before any usage is known', function()
    t.eq('', status.statusline({ workspace = 'file:///nothing' }))
  end)

  t.it('shows percent, used and window, highlighted by tier', function()
    status.update(fake_snapshot())
    t.eq('ctx 38% · 48.2k/128k', status.gauge(target).text)
    t.eq("%@v:lua.require'ctxd.menu'.click@%#CtxdOk#ctx 38%% · 48.2k/128k%*%X", status.statusline(target))
    t.eq('ctx 38%% · 48.2k/128k', status.statusline(vim.tbl_extend('force', target, { highlight = false, click = false })))
    status.update(fake_snapshot({ tier = 'warn', percent = 81 }))
    t.eq('%#CtxdWarn#ctx 81%% · 48.2k/128k%*', status.statusline(vim.tbl_extend('force', target, { click = false })))
    status.update(fake_snapshot({ tier = 'compact', percent = 95.5 }))
    t.eq('CtxdCompact', status.gauge(target).group)
    t.eq('ctx 96% · 48.2k/128k', status.gauge(target).text)
  end)

  t.it('names a followed agent session by its source', function()
    local threads = require('ctxd.threads')
    threads.set_list('file:///fake', {
      threads = {
        { thread = 'codex:019a', source = 'codex', title = 'fix the flaky test', model = 'gpt-5-codex', lastActivity = '2026-01-02T00:00:00Z' },
        { thread = 'claude:77', source = 'claude', title = 'refactor', model = 'claude-sonnet-4-5', lastActivity = '2026-01-01T00:00:00Z' },
        { thread = 'default', source = 'client', lastActivity = '2025-12-01T00:00:00Z' },
      },
    })
    t.eq('codex:019a', threads.current('file:///fake'), 'the most recently active is followed')
    status.update(fake_snapshot({ thread = 'codex:019a', usedTokens = 55000, percent = 43 }))
    t.eq('Codex 43% · 55k/128k', status.gauge({ workspace = 'file:///fake' }).text)
    status.update(fake_snapshot({ thread = 'claude:77', usedTokens = 20000, percent = 15.6 }))
    t.eq('Claude 16% · 20k/128k', status.gauge({ workspace = 'file:///fake' }).text, 'activity moves the gauge')
    t.matches('^ctx %d+%% · ', status.gauge(target).text, 'a client thread keeps the prefix')
    t.eq('Codex "fix the flaky test"', require('ctxd.ui.view').thread_name('file:///fake', 'codex:019a'))
    threads.reset()
  end)

  t.it('every agent by its own name and icon, from one table; an unknown one by its source', function()
    local threads = require('ctxd.threads')
    threads.reset()
    local list = { threads = {} }
    for i, source in ipairs({ 'codex', 'claude', 'qwen', 'gemini', 'opencode', 'acp', 'newagent', 'client' }) do
      table.insert(list.threads, { thread = source .. ':' .. i, source = source, model = 'm',
        lastActivity = ('2026-01-0%dT00:00:00Z'):format(9 - i) })
    end
    threads.set_list('file:///agents', list)
    local seen, icons = {}, {}
    for i, info in ipairs(list.threads) do
      seen[i] = threads.label('file:///agents', info.thread)
      icons[i] = threads.icon('file:///agents', info.thread) or ''
    end
    t.eq({ 'Codex', 'Claude', 'Qwen', 'Gemini', 'OpenCode', 'ACP', 'Newagent', 'ctx' }, seen)
    t.eq({ '⌬', '✻', '⬢', '✦', '⧈', '⇄', '◉', '' }, icons)
    for _, icon in ipairs(icons) do
      t.truthy(vim.fn.strdisplaywidth(icon) <= 1, 'one cell: ' .. icon)
    end
    -- An agent's name is the daemon's (initialize's capabilities.experimental.ctxd.agents; hooks_spec
    -- shows the real daemon's reach the plugin): the table has none of its own, a new agent needs no code.
    local agents = require('ctxd.agents')
    for _, source in ipairs({ 'codex', 'claude', 'qwen', 'gemini', 'opencode' }) do
      t.eq(nil, agents.known[source].name, source)
    end
    agents.set_names({ claude = 'Claude Code', newagent = 'New Agent', bad = 7 })
    t.eq({ 'Claude Code', 'New Agent', 'Bad', 'ACP agent' },
      { agents.get('claude').name, agents.get('newagent').name, agents.get('bad').name, agents.get('acp').name })
    -- The sentence that refuses to change a followed session names its own commands.
    t.eq('this Claude Code session is read-only: use its /rewind or /compact; files: :Ctxd restore',
      require('ctxd.agents').read_only_sentence('claude'))
    agents.set_names(nil) -- before the daemon answered: the gauge's word
    t.eq('Claude', agents.get('claude').name)
    t.eq("this Newagent session is read-only: use Newagent's own commands; files: :Ctxd restore",
      require('ctxd.agents').read_only_sentence('newagent'))
    t.eq(true, threads.read_only('file:///agents', 'newagent:7'))
    t.eq(false, threads.read_only('file:///agents', 'client:8'))
    -- The statusline puts the icon before a followed agent's name; setup can change an icon.
    require('ctxd.config').options.agents = { gemini = { icon = 'G' } }
    t.eq('G', threads.icon('file:///agents', 'gemini:4'))
    require('ctxd.config').options.agents = {}
    threads.reset()
  end)

  t.it("a followed session shows no window until the daemon knows the session's model", function()
    local threads = require('ctxd.threads')
    threads.reset()
    -- A new Codex session: the daemon lists it before it knows the model; its window is ctxd's default.
    threads.set_list('file:///fake', { threads = { { thread = 'codex:new', source = 'codex', readOnly = true,
      lastActivity = '2026-01-02T00:00:00Z' } } })
    status.update(fake_snapshot({ thread = 'codex:new', usedTokens = 15200, contextWindow = 128000, percent = 11.9 }))
    t.eq('Codex 15.2k', status.gauge({ workspace = 'file:///fake' }).text)
    threads.set_list('file:///fake', { threads = { { thread = 'codex:new', source = 'codex', readOnly = true,
      model = 'gpt-5-codex', lastActivity = '2026-01-02T00:00:00Z' } } })
    status.update(fake_snapshot({ thread = 'codex:new', usedTokens = 15200, contextWindow = 258400, percent = 5.9 }))
    t.eq('Codex 6% · 15.2k/258.4k', status.gauge({ workspace = 'file:///fake' }).text)
    threads.reset()
  end)

  t.it('follows the newest thread that holds something, in the daemon\'s order', function()
    local threads = require('ctxd.threads')
    threads.reset()
    local list = threads.set_list('file:///fake', {
      threads = {
        { thread = 'just-read', itemCount = 0, lastActivity = '2026-01-03T00:00:00.5+00:00' },
        { thread = 'codex:1', itemCount = 4, lastActivity = '2026-01-03T00:00:00Z' },
        { thread = 'old', itemCount = 9, lastActivity = '2026-01-01T00:00:00Z' },
      },
    })
    t.eq({ 'just-read', 'codex:1', 'old' }, vim.tbl_map(function(i)
      return i.thread
    end, list))
    t.eq('codex:1', threads.current('file:///fake'))
    -- A protocol-1 listing (updatedAt, no order) is sorted here.
    list = threads.set_list('file:///v1', {
      threads = { { thread = 'a', itemCount = 1, updatedAt = '2026-01-01T00:00:00Z' },
        { thread = 'b', itemCount = 1, updatedAt = '2026-01-02T00:00:00Z' } },
    })
    t.eq('b', list[1].thread)
    t.eq('b', threads.current('file:///v1'))
    threads.pick('file:///v1', 'a')
    t.eq('a', threads.current('file:///v1'), 'a pick wins')
    threads.activity('file:///v1', 'b')
    t.eq('a', threads.current('file:///v1'), 'activity elsewhere does not move a pick')
    threads.reset()
  end)

  t.it('defines the tier highlight groups as links', function()
    status.define_highlights()
    t.eq('DiagnosticWarn', vim.api.nvim_get_hl(0, { name = 'CtxdWarn' }).link)
    vim.cmd.colorscheme('default')
    t.eq('DiagnosticError', vim.api.nvim_get_hl(0, { name = 'CtxdCompact' }).link)
  end)

  t.it('ignores malformed notifications and tells subscribers of good ones', function()
    local seen = {}
    local unsubscribe = require('ctxd.api').subscribe(function(s)
      table.insert(seen, s.usedTokens)
    end)
    status.on_usage_changed(nil, { usedTokens = 1 })
    status.on_usage_changed(nil, fake_snapshot({ usedTokens = 7 }))
    unsubscribe()
    status.on_usage_changed(nil, fake_snapshot({ usedTokens = 8 }))
    t.eq({ 7 }, seen)
  end)

  t.it('renders in a statusline expression', function()
    vim.o.statusline = "%{%v:lua.require'ctxd'.statusline({'workspace': 'file:///fake', 'highlight': v:false})%}"
    status.update(fake_snapshot({ percent = 10 }))
    local eval = vim.api.nvim_eval_statusline(vim.o.statusline, {})
    t.eq('ctx 10% · 48.2k/128k', vim.trim(eval.str))
  end)

  t.it('feeds a lualine component', function()
    -- A stand-in for lualine's component class: the parts of its API the component uses.
    local base = {}
    function base:extend()
      local cls = setmetatable({}, { __index = self })
      cls.super = self
      return cls
    end
    function base:init(options)
      self.options = options
    end
    package.loaded['lualine.component'] = base
    local cls = dofile(vim.api.nvim_get_runtime_file('lua/lualine/components/ctxd.lua', false)[1])
    local component = setmetatable({}, { __index = cls })
    component:init({})
    status.update(fake_snapshot({ workspace = 'file:///other', tier = 'warn', percent = 85 }))
    -- No client: the gauge falls back to nothing.
    t.eq('', component:update_status())
    -- The tier group's foreground only: lualine keeps the section's own background.
    vim.api.nvim_set_hl(0, 'DiagnosticOk', { fg = '#00ff00', bg = '#123456' })
    local color = component.options.color()
    t.eq({ fg = '#00ff00' }, color)
    package.loaded['lualine.component'] = nil
  end)

  t.it('the lualine component loads and draws before setup(), in a fresh Neovim', function()
    local plugin_root = vim.fs.dirname(vim.fs.dirname(vim.api.nvim_get_runtime_file('doc/ctxd.txt', false)[1]))
    local script = vim.fn.tempname() .. '.lua'
    vim.fn.writefile(vim.split(([[
vim.opt.runtimepath:append(%q)
local base = {}
function base:extend() local cls = setmetatable({}, { __index = self }); cls.super = self; return cls end
function base:init(options) self.options = options end
package.loaded['lualine.component'] = base
local cls = require('lualine.components.ctxd')
local c = setmetatable({}, { __index = cls })
c:init({})
local color = c.options.color()
io.stdout:write(('status=[%%s] color=%%s groups=%%s\\n'):format(c:update_status(), vim.inspect(color),
  tostring(vim.fn.hlexists('CtxdOk') == 1 and vim.fn.hlexists('CtxdWarn') == 1)))
]]):format(plugin_root), '\n'), script)
    local result = vim.system({ vim.v.progpath, '--headless', '--clean', '-l', script }, { text = true }):wait()
    t.eq(0, result.code, result.stderr)
    t.contains('status=[] ', result.stdout)
    t.contains('groups=true', result.stdout)
    t.matches('color={%s*fg = "#%x+"%s*}', result.stdout)
  end)
end)

t.describe('usage float', function()
  local ui = lazy('ctxd.ui')
  local view = lazy('ctxd.ui.view')
  local breakdown = {
    model = 'gpt-5',
    contextWindow = 1000,
    mode = 'actual',
    totalTokens = 300,
    usage = { usedTokens = 300, contextWindow = 1000, percent = 30, autoCompactLimit = 900, tier = 'ok' },
    categories = {
      { name = 'systemPrompt', tokens = 100, percent = 10, details = { { name = 'baseInstructions', tokens = 100 } } },
      { name = 'builtinTools', tokens = 50, percent = 5, details = { { name = 'shell', tokens = 30 }, { name = 'read', tokens = 20 } } },
      { name = 'mcpTools', tokens = 0, percent = 0, details = {} },
      { name = 'skills', tokens = 0, percent = 0, details = {} },
      { name = 'memoryFiles', tokens = 0, percent = 0, details = {} },
      { name = 'messages', tokens = 150, percent = 15, details = {} },
      { name = 'freeSpace', tokens = 600, percent = 60, details = {} },
      { name = 'autocompactBuffer', tokens = 100, percent = 10, details = {} },
    },
  }

  t.it('splits the bar in proportion, adding up to its width', function()
    local cells = view.bar_cells(breakdown.categories, 20)
    t.eq({ 2, 1, 0, 0, 0, 3, 12, 2 }, cells)
    local odd = view.bar_cells({ { tokens = 1 }, { tokens = 1 }, { tokens = 1 } }, 10)
    t.eq(10, odd[1] + odd[2] + odd[3])
    -- A sliver still shows.
    t.eq({ 1, 0, 19 }, view.bar_cells({ { tokens = 1 }, { tokens = 0 }, { tokens = 10000 } }, 20))
  end)

  t.it('draws the bar and the category table, q closes it', function()
    local win, buf = ui.open_breakdown(breakdown)
    t.eq(win, vim.api.nvim_get_current_win())
    t.truthy(vim.api.nvim_win_get_config(win).relative ~= '')
    local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
    t.eq('Context usage', lines[1])
    t.eq(50, vim.fn.strchars(vim.trim(lines[2])))
    t.contains('300/1k tokens (30.0%)  gpt-5', lines[3])
    local text = table.concat(lines, '\n')
    for _, label in ipairs({ 'System prompt', 'Built-in tools', 'Messages', 'Free space', 'Autocompact buffer' }) do
      t.contains(label, text)
    end
    t.matches('Free space%s+600%s+60.0%%', text)
    t.eq(nil, text:find('MCP tools', 1, true), 'an empty overhead category is left out')
    t.matches('shell%s+30', text)
    t.matches('Base instructions%s+100', text, 'the daemon\'s own rows in words')
    t.eq(nil, text:find('baseInstructions', 1, true))
    local groups = {}
    for _, mark in ipairs(vim.api.nvim_buf_get_extmarks(buf, -1, 0, -1, { details = true })) do
      groups[mark[4].hl_group] = true
    end
    t.truthy(groups.CtxdSystemPrompt and groups.CtxdFreeSpace and groups.CtxdMessages, vim.inspect(groups))
    vim.api.nvim_feedkeys('q', 'x', false)
    t.eq(false, vim.api.nvim_win_is_valid(win))
  end)

  --- A followed session's breakdown as big as they come: long notes, five details a category.
  local function big_breakdown()
    local big = vim.deepcopy(breakdown)
    big.mode = 'estimated'
    big.limitSource = "window: the rollout's model_context_window; auto-compact: Codex 0.171's default: 90% of the "
      .. "model's window (Codex 0.171's models.json (gpt-5-codex)), which the session states in its turn context"
    big.inferred = { systemPrompt = 'the first request reported 14,201 input tokens; less the three messages it carried '
      .. '(412 tokens), the rest is the fixed overhead of instructions, tools and memory files' }
    big.cost = { currency = 'USD', input = 0.0006, cachedInput = 3.9, cacheWrite = 0.7794, output = 0.64, total = 5.32, priced = true }
    for _, c in ipairs(big.categories) do
      if c.name ~= 'freeSpace' and c.name ~= 'autocompactBuffer' then
        c.tokens = math.max(c.tokens, 10)
        c.details = {}
        for i = 1, 7 do
          table.insert(c.details, { name = ('%s detail number %d'):format(c.name, i), tokens = 10 - i })
        end
      end
    end
    return big
  end

  --- The float of `b` on a screen of `columns` x `lines`: its config, its lines, and the check
  --- that every row shows, none is wider than the window, and the notes' words are whole.
  local function float_on(columns, lines, b)
    local saved = { vim.o.columns, vim.o.lines }
    vim.o.columns, vim.o.lines = columns, lines
    local win, buf = ui.open_breakdown(b)
    local cfg = vim.api.nvim_win_get_config(win)
    local shown = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
    vim.api.nvim_win_close(win, true)
    vim.o.columns, vim.o.lines = saved[1], saved[2]
    t.eq(#shown, cfg.height, 'every row shows: ' .. vim.inspect(shown))
    t.truthy(cfg.row + cfg.height + 2 <= lines - 1, ('the float and its border fit the screen: row %d, height %d'):format(cfg.row, cfg.height))
    for _, line in ipairs(shown) do
      t.truthy(vim.fn.strdisplaywidth(line) <= cfg.width, ('%q fits %d cells'):format(line, cfg.width))
    end
    local joined = table.concat(shown, ' '):gsub('%s+', ' ')
    t.contains(b.limitSource, joined, 'the note, its words whole')
    t.contains(b.inferred.systemPrompt, joined, 'the note, its words whole')
    return cfg, shown
  end

  t.it('at 200 columns the float is about 90 wide, its notes wrapped between words, every row shown', function()
    local cfg, shown = float_on(200, 50, big_breakdown())
    t.truthy(cfg.width + 2 <= 92 and cfg.width >= 60, 'about 90 columns with the border: ' .. cfg.width)
    t.contains('estimated (no usage reported by the model yet)', table.concat(shown, '\n'))
    t.eq('Context usage', shown[1])
    t.matches('\n      … %d more\n', table.concat(shown, '\n'), 'detail rows gave way to fit 50 lines')
  end)

  t.it('at 80x24 the compact float shows every row: detail rows give way, words stay whole', function()
    local cfg, shown = float_on(80, 24, big_breakdown())
    t.truthy(cfg.width + 2 <= 80, 'fits 80 columns: ' .. cfg.width)
    local text = table.concat(shown, '\n')
    t.contains('tier ok · auto-compact at 900 · estimated', text)
    t.eq(nil, text:find('no usage reported', 1, true), 'the compact wording')
    for _, label in ipairs({ 'System prompt', 'Built-in tools', 'Messages', 'Free space', 'Autocompact buffer' }) do
      t.contains(label, text)
    end
  end)

  t.it('keeps the columns aligned for long names', function()
    local long = vim.deepcopy(breakdown)
    long.categories[3] = {
      name = 'mcpTools',
      tokens = 40,
      percent = 4,
      details = {
        { name = 'mcp__github__create_pull_request_review_with_comments_and_suggestions', tokens = 25 },
        { name = 'mcp__fs__read', tokens = 15 },
      },
    }
    long.categories[7].tokens = 560
    local lines = vim.tbl_map(function(l)
      return l.text
    end, view.render_breakdown(long))
    local ends = {}
    for _, line in ipairs(lines) do
      -- Rows of the table end with a token count (details) or a percentage (categories).
      local count_end = line:match('^  .+%s([%d%.]+k?)%s+[%d%.]+%%$') and line:find('[%d%.]+k?%s+[%d%.]+%%$')
      local detail = line:match('^      %S.-%s%s+([%d%.]+k?)$')
      if count_end or detail then
        local e = detail and #line or (line:find('%s+[%d%.]+%%$') - 1)
        table.insert(ends, vim.fn.strdisplaywidth(line:sub(1, e)))
      end
    end
    t.truthy(#ends >= 8, vim.inspect(lines))
    for _, e in ipairs(ends) do
      t.eq(ends[1], e, vim.inspect(lines))
    end
    local text = table.concat(lines, '\n')
    t.contains('mcp__github__create_pull_request_revi', text)
    t.contains('…', text, 'a name longer than the column is cut')
    t.eq(nil, text:find('suggestions', 1, true))
  end)

  t.it('shows the cost with cache writes, the parts adding up to the total in cents', function()
    -- A Claude session: $0.0006 input, $3.90 cache reads, $0.7794 cache writes, $0.64 output.
    local cost = { currency = 'USD', input = 0.0006, cachedInput = 3.9, cacheWrite = 0.7794, output = 0.64,
      total = 5.32, priced = true }
    local text = table.concat(vim.tbl_map(function(l)
      return l.text
    end, view.render_breakdown(vim.tbl_extend('force', breakdown, { cost = cost }))), '\n')
    t.contains('cost $5.32 = in $0.00 + cache read $3.90 + cache write $0.78 + out $0.64', text)
    for n = 0, 200 do
      local total, parts = view.cost_cents({ input = n * 0.00137, cachedInput = n * 0.0291, cacheWrite = n * 0.00555,
        output = n * 0.0173, total = n * (0.00137 + 0.0291 + 0.00555 + 0.0173), priced = true })
      t.eq(total, parts[1] + parts[2] + parts[3] + parts[4])
    end
  end)

  t.it('says when the figures are estimated', function()
    local estimated = vim.tbl_extend('force', breakdown, { mode = 'estimated', totalTokens = vim.NIL })
    local text = table.concat(vim.tbl_map(function(l)
      return l.text
    end, view.render_breakdown(estimated)), '\n')
    t.contains('~300/1k tokens', text)
    t.contains('estimated', text)
  end)

  t.it('says the prompt cache in plain words: warm for how long, or what the next turn re-writes', function()
    local now = os.time()
    local function iso(at, offset)
      return os.date('!%Y-%m-%dT%H:%M:%S', at) .. (offset or '+00:00')
    end
    local warm = { state = 'warm', lastRequestAt = iso(now - 120), lifetimeSeconds = 300, expiresAt = iso(now + 180),
      rewriteTokens = 45000, rewriteCost = 0.17 }
    t.eq('cache warm for 3 min', view.cache_text(warm, now))
    -- The same instant written with another UTC offset.
    local shifted = os.date('!%Y-%m-%dT%H:%M:%S', now + 180 + 7200) .. '+02:00'
    t.eq('cache warm for 3 min', view.cache_text(vim.tbl_extend('force', warm, { expiresAt = shifted }), now))
    t.eq('cache warm for 1 h', view.cache_text(vim.tbl_extend('force', warm, { expiresAt = iso(now + 3600, 'Z') }), now))
    local cold = { state = 'cold', lastRequestAt = iso(now - 900), lifetimeSeconds = 300, expiresAt = iso(now - 600),
      rewriteTokens = 45000, rewriteCost = 0.17 }
    t.eq('cache cold: the next turn re-writes 45k tokens ($0.17)', view.cache_text(cold, now))
    t.eq('cache cold: the next turn re-writes 45k tokens', view.cache_text(vim.tbl_extend('force', cold, { rewriteCost = vim.NIL }), now))
    t.eq(nil, view.cache_text({ state = 'unknown', lifetimeSeconds = 300, rewriteTokens = 0, expiresAt = vim.NIL }, now))
    t.eq(nil, view.cache_text(nil, now))
    -- In the float, under the cost, with what the last compaction cost the cache.
    cold.compactions = {
      { at = iso(now - 3000), cacheWriteTokens = 20000, cacheWriteCost = 0.08, savedTokensPerTurn = 9000, savedCostPerTurn = 0.01 },
      { at = iso(now - 1000), cacheWriteTokens = 30000, cacheWriteCost = 0.11, savedTokensPerTurn = 12000, savedCostPerTurn = 0.04 },
    }
    local lines = vim.tbl_map(function(l)
      return l.text
    end, view.render_breakdown(vim.tbl_extend('force', breakdown, { cache = cold }), nil, now))
    t.truthy(vim.tbl_contains(lines, '  cache cold: the next turn re-writes 45k tokens ($0.17)'), vim.inspect(lines))
    t.contains('last compaction re-wrote 30k tokens ($0.11), saves 12k tokens ($0.04) a turn (2 compactions)',
      (table.concat(lines, ' '):gsub('%s+', ' ')), vim.inspect(lines))
    local plain = table.concat(vim.tbl_map(function(l)
      return l.text
    end, view.render_breakdown(breakdown, nil, now)), '\n')
    t.eq(nil, plain:find('cache', 1, true), 'no cache line without a CacheState')
  end)

  t.it('an open float counts the cache down, and says cold once it has expired', function()
    local module = require('ctxd.ui')
    local every = module.CACHE_REDRAW_MS
    module.CACHE_REDRAW_MS = 50
    local expires = os.date('!%Y-%m-%dT%H:%M:%SZ', os.time() + 2)
    local cache = { state = 'warm', lifetimeSeconds = 300, expiresAt = expires, rewriteTokens = 45000, rewriteCost = 0.17 }
    local win, buf = ui.open_breakdown(vim.tbl_extend('force', breakdown, { cache = cache }))
    module.CACHE_REDRAW_MS = every
    local function cache_line()
      for _, line in ipairs(vim.api.nvim_buf_get_lines(buf, 0, -1, false)) do
        if line:match('^  cache ') then
          return line
        end
      end
    end
    t.matches('^  cache warm for [12] s$', cache_line())
    t.wait_for(function()
      return cache_line() == '  cache cold: the next turn re-writes 45k tokens ($0.17)'
    end, 'the cache line to say cold (now ' .. tostring(cache_line()) .. ')', 10000)
    vim.api.nvim_win_close(win, true)
  end)

  t.it('shows the cost the daemon reports', function()
    local function text_of(b)
      return table.concat(vim.tbl_map(function(l)
        return l.text
      end, view.render_breakdown(b)), '\n')
    end
    local priced = vim.tbl_extend('force', breakdown, {
      cost = { currency = 'USD', input = 0.1, cachedInput = 0.02, output = 0.3, total = 0.42, priced = true },
    })
    t.contains('cost $0.42 = in $0.10 + cache read $0.02 + cache write $0.00 + out $0.30', text_of(priced))
    local unpriced = vim.tbl_extend('force', breakdown, {
      cost = { currency = 'USD', input = 0, cachedInput = 0, output = 0, total = 0, priced = false, unpricedModels = { 'my-model' } },
    })
    t.contains('cost n/a (no price for my-model)', text_of(unpriced))
    t.eq(nil, text_of(breakdown):find('cost', 1, true))
  end)
end)

t.describe(':Ctxd', function()
  local function complete(line)
    return vim.fn.getcompletion(line, 'cmdline')
  end

  t.it('completes subcommands and strategies', function()
    t.eq({ 'compact', 'diff', 'hooks', 'log', 'menu', 'recall', 'redo', 'restart', 'restore', 'rollback', 'snapshot', 'threads', 'undo', 'undo-restore', 'usage' }, complete('Ctxd '))
    t.eq({ 'recall', 'redo', 'restart', 'restore', 'rollback' }, complete('Ctxd r'))
    t.eq({ 'auto', 'llm', 'remote', 'offline' }, complete('Ctxd compact '))
    t.eq({ 'llm' }, complete('Ctxd compact l'))
    t.eq({}, complete('Ctxd compact llm '))
  end)

  t.it('reports that no daemon is running', function()
    local messages = {}
    local saved = vim.notify
    vim.notify = function(msg, level)
      table.insert(messages, { msg = msg, level = level })
    end
    vim.cmd('Ctxd usage')
    vim.cmd('Ctxd nonsense')
    t.wait_for(function()
      return #messages == 2
    end, 'two messages')
    vim.notify = saved
    local text = messages[1].msg .. '\n' .. messages[2].msg
    t.contains('ctxd: usage failed: ctxd is not running', text)
    t.contains('unknown subcommand "nonsense"', text)
    t.eq(vim.log.levels.ERROR, messages[1].level)
  end)
end)

t.describe("the gauge's menu", function()
  local function labels(state)
    return vim.tbl_map(function(item)
      return item.label
    end, require('ctxd.menu').items(state))
  end
  local all = function()
    return true
  end

  t.it('offers the ways out when the daemon is not running', function()
    t.eq({ 'Restart the daemon (it is stopped)', 'Check health: why it is not running, how to fix it' },
      labels({ down = 'stopped', read_only = false, supports = all }))
  end)

  t.it("offers no change of a followed session's conversation, and nothing the daemon cannot do", function()
    local mine = table.concat(labels({ read_only = false, supports = all }), '\n')
    local followed = table.concat(labels({ read_only = true, supports = all }), '\n')
    for _, row in ipairs({ 'roll back the last turn', 'undo the last compaction', 'Compact now' }) do
      t.contains(row, mine)
      t.eq(nil, followed:find(row, 1, true), row)
    end
    t.contains('Time machine: restore files from a checkpoint', followed)
    local old = table.concat(labels({ read_only = false, supports = function(method)
      return method ~= 'ctxd/recall' and method ~= 'ctxd/undo'
    end }), '\n')
    t.eq(nil, old:find('Recall', 1, true))
    t.eq(nil, old:find('undo the last compaction', 1, true))
  end)

  t.it('the lualine component opens it on a click', function()
    local base = {}
    function base:extend()
      local cls = setmetatable({}, { __index = self })
      cls.super = self
      return cls
    end
    function base:init(options)
      self.options = options
    end
    package.loaded['lualine.component'] = base
    local cls = dofile(vim.api.nvim_get_runtime_file('lua/lualine/components/ctxd.lua', false)[1])
    local component = setmetatable({}, { __index = cls })
    component:init({})
    package.loaded['lualine.component'] = nil
    local asked
    local saved = vim.ui.select
    vim.ui.select = function(_, opts, on_choice)
      asked = opts.kind
      on_choice(nil, nil)
    end
    component.options.on_click()
    vim.ui.select = saved
    t.eq('ctxd.menu', asked)
  end)
end)

t.describe('daemon messages', function()
  t.it("a manual compaction's warning is not said again, whatever the order of warning and answer", function()
    local lsp = require('ctxd.lsp')
    local said = {}
    local saved = vim.notify
    vim.notify = function(msg)
      table.insert(said, msg)
    end
    local function warn(thread)
      lsp.handlers['window/showMessage'](nil, { type = 2, message = ("ctxd compacted thread '%s' (900 → 100 tokens, "
        .. 'offline). Every compaction drops detail.'):format(thread) }, { client_id = 999 })
    end
    -- Started, answered, then warned: the command said it; the warning is not said.
    lsp.manual_compaction(999, 'a', 1)
    warn('a')
    -- A later automatic compaction of the same thread is said.
    warn('a')
    -- Started and failed: no warning is counted off, so an automatic one after it is said.
    lsp.manual_compaction(999, 'b', 1)
    lsp.manual_compaction(999, 'b', -1)
    warn('b')
    t.wait_for(function()
      return #said >= 1
    end, 'the daemon messages')
    vim.wait(400)
    vim.notify = saved
    t.eq(1, #said, vim.inspect(said))
    t.contains('2 messages from the daemon', said[1])
    local recent = require('ctxd.notify').recent
    t.contains("thread 'a'", recent[#recent - 1].msg)
    t.contains("thread 'b'", recent[#recent].msg)
  end)
end)

t.describe('snapshot rows', function()
  t.it('name a snapshot with no time as such', function()
    local view = require('ctxd.ui.view')
    t.eq('abcdef0123  2026-01-02 03:04:05  first  (3 files)',
      view.format_snapshot({ id = 'abcdef0123456', createdAt = '2026-01-02T03:04:05Z', message = 'first', fileCount = 3 }))
    t.eq('abcdef0123  (time unknown)  (no message)  (3 files)',
      view.format_snapshot({ id = 'abcdef0123456', createdAt = vim.NIL, message = vim.NIL, fileCount = 3 }))
  end)

  t.it('group an agent turn\'s checkpoints under it, in the order taken, with their tool', function()
    local view = require('ctxd.ui.view')
    local turn3 = { index = 3, text = 'fix the tests' }
    local function c(id, extra)
      return vim.tbl_extend('force', { id = id, createdAt = '2026-01-02T03:04:05Z', message = '', fileCount = 3,
        thread = 'claude:s1', trigger = 'manual' }, extra)
    end
    -- The daemon's order: newest first.
    local ordered = view.order_snapshots({
      c('manual0000', { message = 'mine', thread = vim.NIL }),
      c('bash000000', { trigger = 'tool', turn = turn3, tool = { name = 'Bash' }, message = 'before Bash: sed -i s/a/b/ x.py' }),
      c('edit000000', { trigger = 'tool', turn = turn3, tool = { name = 'Edit', paths = { 'src/app.py' } } }),
      c('turn200000', { trigger = 'turn', turn = { index = 2, text = 'add a flag' }, message = 'add a flag' }),
      c('turn300000', { trigger = 'turn', turn = turn3, message = 'fix the tests' }),
    })
    t.eq({ 'manual0000', 'turn300000', 'edit000000', 'bash000000', 'turn200000' }, vim.tbl_map(function(x)
      return x.id
    end, ordered))
    local rows = vim.tbl_map(view.format_snapshot, ordered)
    t.eq('turn300000  2026-01-02 03:04:05  Turn 3: fix the tests › start of the turn  (3 files)', rows[2])
    t.eq('edit000000  2026-01-02 03:04:05  Turn 3: fix the tests › before Edit src/app.py  (3 files)', rows[3])
    t.eq('bash000000  2026-01-02 03:04:05  Turn 3: fix the tests › before Bash: sed -i s/a/b/ x.py  (3 files)', rows[4])
    t.eq('abcdef0123  2026-01-02 03:04:05  before restoring 1234 (taken before a restore)  (3 files)',
      view.format_snapshot(c('abcdef0123456', { trigger = 'restore', message = 'before restoring 1234' })))
  end)
end)

t.describe('undo and redo', function()
  local function op(id, kind, undone_by)
    return { id = id, kind = kind, itemsBefore = 4, itemsAfter = 2, undoneBy = undone_by }
  end
  t.it(':Ctxd undo takes the newest operation in effect that is not an undo', function()
    local commands = require('ctxd.timemachine')
    t.eq(1, commands.last_undoable({ op(1, 'compaction'), op(2, 'rollback', 3), op(3, 'undo') }).id)
    t.eq(2, commands.last_undoable({ op(1, 'compaction', 2), op(2, 'rollback') }).id)
    t.eq(nil, commands.last_undoable({ op(1, 'compaction', 2), op(2, 'undo') }))
  end)
  t.it(':Ctxd redo takes the newest undo in effect that undid an operation, not an undo', function()
    local commands = require('ctxd.timemachine')
    -- B undone by 3, A undone by 4, then 4 undone by 5 (A redone): redo redoes B.
    local ops = { op(1, 'compaction'), op(2, 'rollback', 3), op(3, 'undo'), op(4, 'undo', 5), op(5, 'undo') }
    local undo, undid = commands.last_redoable(ops)
    t.eq(3, undo.id)
    t.eq(2, undid.id)
    t.eq(nil, commands.last_redoable({ op(1, 'compaction') }))
  end)
end)

t.describe('help', function()
  t.it('doc/ctxd.txt has its tags, without duplicates', function()
    local doc = vim.api.nvim_get_runtime_file('doc/ctxd.txt', false)[1]
    local dir = vim.fn.tempname()
    vim.fn.mkdir(dir, 'p')
    vim.fn.writefile(vim.fn.readfile(doc), dir .. '/ctxd.txt')
    vim.cmd.helptags(dir)
    local tags = table.concat(vim.fn.readfile(dir .. '/tags'), '\n')
    for _, tag in ipairs({ 'ctxd', ':Ctxd', 'ctxd-setup', 'ctxd-statusline', 'ctxd-api', 'ctxd-health', 'ctxd.statusline()',
      ':Ctxd-threads', ':Ctxd-diff', ':Ctxd-undo-restore', 'ctxd-trust', 'ctxd-follow', 'CtxdThreadsChanged',
      ':Ctxd-menu', ':Ctxd-hooks', 'ctxd-agents', 'CtxdStale' }) do
      t.contains(tag .. '\tctxd.txt', tags)
    end
  end)

  t.it('the install instructions name what exists: a clone, pipx or a venv, not an unpublished package', function()
    local plugin_root = vim.fs.dirname(vim.fs.dirname(vim.api.nvim_get_runtime_file('doc/ctxd.txt', false)[1]))
    for _, file in ipairs({ 'README.md', 'doc/ctxd.txt' }) do
      local text = table.concat(vim.fn.readfile(vim.fs.joinpath(plugin_root, file)), '\n')
      t.eq(nil, text:find('pip install ctxd-daemon', 1, true), file)
      t.contains('pipx install ~/src/ctxd', text)
      t.contains('python3 -m venv ~/.local/share/ctxd', text)
    end
  end)

  t.it("the README's lazy.nvim spec makes :help ctxd and :Ctxd work, loaded before lualine", function()
    local plugin_root = vim.fs.dirname(vim.fs.dirname(vim.api.nvim_get_runtime_file('doc/ctxd.txt', false)[1]))
    local readme = table.concat(vim.fn.readfile(vim.fs.joinpath(plugin_root, 'README.md')), '\n')
    local code = readme:match('With %[lazy%.nvim%].-```lua\n(.-)\n```')
    t.truthy(code, 'a lua block after "With [lazy.nvim]"')
    local spec = assert(load('return ' .. code))()
    -- lazy.nvim loads start plugins by priority (default 50), highest first: ctxd before lualine,
    -- so lualine's `lualine_x = { 'ctxd' }` finds the component whatever the order of the specs.
    t.truthy((spec.priority or 50) > 50, 'priority above the default: ' .. tostring(spec.priority))
    t.eq(false, spec.lazy)
    t.matches('/editors/nvim$', spec.dir)
    -- A copy of the repository's plugin folder, loaded as lazy.nvim loads a local `dir` plugin on
    -- its first start: on the runtimepath, its plugin/ sourced, then config. lazy.nvim makes help
    -- tags for such a plugin only on `:Lazy update`: the plugin makes its own.
    local clone = vim.fn.tempname()
    vim.fn.mkdir(clone .. '/editors', 'p')
    vim.system({ 'cp', '-R', plugin_root, clone .. '/editors/nvim' }):wait()
    os.remove(clone .. '/editors/nvim/doc/tags')
    local dir = clone .. '/editors/nvim'
    local script = vim.fn.tempname() .. '.lua'
    vim.fn.writefile(vim.split(([[
local spec = assert(load('return ' .. %q))()
vim.opt.runtimepath:append(%q)
for _, file in ipairs(vim.fn.glob(%q .. '/plugin/**/*.lua', false, true)) do vim.cmd.source(file) end
spec.config({ dir = %q, name = spec.name }, {})
local ok, err = pcall(vim.cmd.help, 'ctxd')
io.stdout:write(('help=%%s file=%%s command=%%d lualine=%%s\n'):format(tostring(ok), ok and vim.api.nvim_buf_get_name(0) or err,
  vim.fn.exists(':Ctxd'), tostring(#vim.api.nvim_get_runtime_file('lua/lualine/components/ctxd.lua', false) == 1)))
]]):format(code, dir, dir, dir), '\n'), script)
    local result = vim.system({ vim.v.progpath, '--headless', '--clean', '-l', script }, { text = true }):wait()
    t.eq(0, result.code, result.stderr)
    t.contains(('help=true file=%s/editors/nvim/doc/ctxd.txt command=2 lualine=true'):format(clone), result.stdout .. result.stderr)
    t.eq(1, vim.fn.filereadable(dir .. '/doc/tags'), 'the plugin made its help tags')
    -- The README says what lazy.nvim does and does not do.
    t.eq(nil, readme:find('sources its `plugin/` and makes its help', 1, true), 'the README no longer says lazy.nvim makes them')
    t.contains('only on `:Lazy update`', readme)
  end)
end)
