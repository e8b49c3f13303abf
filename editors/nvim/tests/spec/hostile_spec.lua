-- What users throw at the plugin, in a headless Neovim against the real daemon: arguments that are
-- numbers to Lua but not to JSON, names with line breaks in the usage float, a daemon file that is
-- there but not executable. Each gets a clear message; none raises a Lua error.
local t = require('harness')
local h = require('helpers')

--- The float `:Ctxd usage` opens, or a timeout.
local function usage_float()
  return t.wait_for(function()
    local w = vim.api.nvim_get_current_win()
    return vim.api.nvim_win_get_config(w).relative ~= '' and w or nil
  end, 'the usage float (messages ' .. vim.inspect(h.messages) .. ')')
end

t.describe('hostile input', function()
  t.before_each(function()
    h.capture_notify()
  end)

  t.it(':Ctxd rollback inf (or 1e400) says it takes a positive number of turns, with no Lua error', function()
    h.start()
    h.fresh_thread()
    h.request('ctxd/record', { items = { h.user('one'), h.assistant('1') } })
    for _, arg in ipairs({ 'inf', '1e400' }) do
      h.messages = {}
      local ok, err = pcall(vim.cmd, 'Ctxd rollback ' .. arg)
      t.eq(true, ok, tostring(err))
      local said = h.wait_message('rollback takes a positive number of turns')
      t.eq(vim.log.levels.ERROR, said.level)
    end
    t.eq(2, h.request('ctxd/history', {}).total)
  end)

  t.it(':Ctxd usage opens its float when a name the daemon lists holds a line break', function()
    h.start()
    h.fresh_thread()
    -- A file name may hold a line break (Linux allows it), and so may a tool's or a model's name.
    h.request('ctxd/setPromptContext', {
      model = 'gpt\n5',
      tools = { { name = 'look\nup', kind = 'mcp', schema = { type = 'object' } } },
      memoryFiles = { { path = 'notes\nold.md', content = h.text(50) } },
    })
    h.request('ctxd/record', { items = { h.user(h.text(100)) } })
    vim.cmd('Ctxd usage')
    local win = usage_float()
    local text = table.concat(h.lines(vim.api.nvim_win_get_buf(win)), '\n')
    t.contains('notes old.md', text)
    t.contains('look up', text)
    vim.api.nvim_win_close(win, true)
  end)

  t.it('a daemon file that is there but not executable is said so, not "not installed"', function()
    h.stop_all()
    local file = vim.fs.joinpath(vim.env.HOME, 'bin', 'ctxd')
    vim.fn.mkdir(vim.fs.dirname(file), 'p')
    vim.fn.writefile({ '#!/bin/sh', 'exec ctxd "$@"' }, file)
    vim.fn.setfperm(file, 'rw-r--r--')
    vim.cmd('filetype on')
    require('ctxd').setup({ enable = true, cmd = { file } })
    vim.cmd.edit(vim.fs.joinpath(h.workspace, 'other.md'))
    h.wait_message('the daemon is not', 20000)
    local said = h.wait_message(('the daemon is not executable (%s: chmod +x it)'):format(file))
    t.eq(vim.log.levels.WARN, said.level)
    t.eq('ctx not executable', require('ctxd').gauge().text)
    vim.cmd('silent checkhealth ctxd')
    local health = table.concat(h.lines(0), '\n')
    vim.cmd('bwipeout!')
    t.contains(('`%s` is there but not executable'):format(file), health)
    t.contains(('chmod +x %s'):format(file), health)
    t.eq(nil, health:find('pipx install', 1, true), health)
    t.eq(nil, health:find('not installed', 1, true), health)
  end)
end)
