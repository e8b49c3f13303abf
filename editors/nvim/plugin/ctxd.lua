-- Registers `:Ctxd`; everything else loads when it is first used.
if vim.g.loaded_ctxd then
  return
end
vim.g.loaded_ctxd = true

vim.api.nvim_create_user_command('Ctxd', function(opts)
  require('ctxd.commands').run(opts.fargs)
end, {
  nargs = '*',
  desc = 'ctxd: usage, threads, compact, snapshot, diff, restore, undo-restore, rollback, undo, log, restart',
  complete = function(arglead, cmdline)
    return require('ctxd.commands').complete(arglead, cmdline)
  end,
})
