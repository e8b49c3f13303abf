-- Entry point of one spec file: `nvim --headless --clean -l tests/init.lua SPEC.lua`.
-- Puts the plugin and this folder on the paths, sources plugin/ctxd.lua as Neovim would, runs
-- the spec's tests, stops the daemon and exits 0 only if every test passed.
local here = vim.fs.dirname(vim.fs.normalize(debug.getinfo(1, 'S').source:sub(2)))
local plugin = vim.fs.dirname(here)
vim.opt.runtimepath:prepend(plugin)
package.path = ('%s/?.lua;%s'):format(here, package.path)

local spec = assert(_G.arg[1], 'usage: nvim --headless --clean -l tests/init.lua SPEC.lua')
vim.cmd.runtime('plugin/ctxd.lua')

local t = require('harness')

-- A headless Neovim has no one to answer a prompt: a picker a test did not expect fails the test
-- (a test that expects one replaces vim.ui.select for its duration).
vim.ui.select = function(_, opts)
  error(('unexpected vim.ui.select: %s'):format(opts and opts.prompt or '?'), 2)
end
local ok, err = xpcall(dofile, debug.traceback, spec)
if not ok then
  io.stdout:write(('  FAIL  loading %s\n%s\n0 passed, 1 failed\n'):format(spec, err))
  os.exit(1)
end
local _, failed = t.run({ exit = false })
local clients = vim.lsp.get_clients()
for _, c in ipairs(clients) do
  c:stop()
end
vim.wait(5000, function()
  return #vim.lsp.get_clients() == 0
end, 20)
io.stdout:flush()
os.exit(failed == 0 and 0 or 1)
