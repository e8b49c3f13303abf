-- Registers `:Ctxd`; everything else loads when it is first used.
if vim.g.loaded_ctxd then
  return
end
vim.g.loaded_ctxd = true

vim.api.nvim_create_user_command('Ctxd', function(opts)
  require('ctxd.commands').run(opts.fargs)
end, {
  nargs = '*',
  desc = 'ctxd: usage, threads, compact, snapshot, diff, restore, undo-restore, rollback, undo, recall, log, restart',
  complete = function(arglead, cmdline)
    return require('ctxd.commands').complete(arglead, cmdline)
  end,
})

-- A daemon command that is not executable: Neovim only logs it; say it once (loads nothing until then).
vim.api.nvim_create_autocmd('FileType', {
  group = vim.api.nvim_create_augroup('ctxd_start_check', { clear = true }),
  callback = function(ev)
    if vim.lsp.is_enabled and vim.lsp.is_enabled('ctxd') and vim.bo[ev.buf].buftype == '' then
      require('ctxd.supervisor').check_command(ev.buf)
    end
  end,
})

-- A stored item `:Ctxd recall` lists (`ctxd://item/<workspace>/<thread>/<seq>`), read from the daemon.
vim.api.nvim_create_autocmd('BufReadCmd', {
  group = vim.api.nvim_create_augroup('ctxd_items', { clear = true }),
  pattern = 'ctxd://item/*',
  callback = function(ev)
    require('ctxd.ui').read_item(ev.buf, ev.match)
  end,
})
