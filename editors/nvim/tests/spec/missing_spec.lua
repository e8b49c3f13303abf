-- A daemon that is not installed, with Neovim's own vim.notify in place (the other specs replace
-- it, and so never saw this): opening a file inside a repository says so once, as a warning,
-- from the main loop, never as an error inside the FileType autocommand (Neovim's filetype code
-- turned that into an exception: a Lua stack trace and "Press ENTER"); the gauge says it.
local t = require('harness')
local h = require('helpers')

--- Neovim's message history, as `:messages` shows it.
local function messages()
  return vim.api.nvim_exec2('messages', { output = true }).output
end

-- Wide enough for the whole lines (a narrower screen cuts them to fit, `ctxd.notify`).
vim.o.columns = 200

t.describe('a daemon that is not installed', function()
  t.it('opening a file says it once as a warning, with no error and no stack trace; the gauge says it', function()
    vim.cmd('filetype on')
    require('ctxd').setup({ enable = true, cmd = { 'ctxd-not-installed-here' } })
    vim.cmd('messages clear')
    local ok, err = pcall(vim.cmd.edit, vim.fs.joinpath(h.workspace, 'README.md'))
    t.eq(true, ok, 'opening the file raised: ' .. tostring(err))
    local said = 'ctxd: the daemon is not installed (ctxd-not-installed-here not found); see :checkhealth ctxd'
    t.wait_for(function()
      return messages():find(said, 1, true)
    end, 'the warning (messages: ' .. messages() .. ')')
    local text = messages()
    t.eq(nil, text:find('stack traceback', 1, true), text)
    t.eq(nil, text:find('Error', 1, true), text)
    t.eq(nil, text:find('E5108', 1, true), text)
    t.eq('ctx not installed', require('ctxd').gauge().text)
    -- Another file of the workspace: said once, not again.
    vim.fn.writefile({ 'x' }, vim.fs.joinpath(h.workspace, 'other.py'))
    t.eq(true, (pcall(vim.cmd.edit, vim.fs.joinpath(h.workspace, 'other.py'))))
    vim.wait(50)
    local _, count = messages():gsub('not installed', '')
    t.eq(1, count, messages())
  end)

  t.it('a command names the way out: how to install, not a bare "not running"', function()
    vim.cmd('messages clear')
    vim.cmd('Ctxd usage')
    t.wait_for(function()
      return messages():find('usage failed', 1, true)
    end, 'the message')
    t.contains('ctxd: usage failed: the daemon is not installed; :checkhealth ctxd says how to install it', messages())
  end)
end)
