-- The daemon runs in Neovim's current folder, often the project: `python -m ctxd` there must run
-- ctxd, not a `ctxd` folder of the project's (a checkout of ctxd, or a trap). lsp/ctxd.lua's
-- PYTHONSAFEPATH keeps that folder off `sys.path`, merged with the cmd_env given to setup().
local t = require('harness')
local h = require('helpers')

t.describe("a project's ctxd folder", function()
  t.it('never answers for the daemon started in that project', function()
    local mark = vim.fs.joinpath(vim.fs.dirname(h.workspace), 'trap-ran')
    vim.fn.mkdir(vim.fs.joinpath(h.workspace, 'ctxd'), 'p')
    h.write('ctxd/__init__.py', '')
    h.write('ctxd/__main__.py', ("open(%q, 'w').write('ran')\n"):format(mark))
    vim.cmd.cd(h.workspace)
    local client = h.start()
    t.eq(true, client.initialized)
    t.eq(nil, vim.uv.fs_stat(mark))
    local _, env = require('ctxd.client').daemon_command()
    t.eq('1', env.PYTHONSAFEPATH)
    t.eq(h.repo, env.PYTHONPATH)
  end)
end)
