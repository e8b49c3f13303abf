-- Registers `:Ctxd` and the `ctxd://` buffers; everything else loads when it is first used.
if vim.g.loaded_ctxd then
  return
end
vim.g.loaded_ctxd = true

vim.api.nvim_create_user_command('Ctxd', function(opts)
  require('ctxd.commands').run(opts.fargs)
end, {
  nargs = '*',
  desc = 'ctxd: usage, menu, threads, compact, snapshot, diff, restore, undo-restore, rollback, undo, redo, recall, log, hooks, restart',
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

-- A file's diff against a snapshot (`ctxd://diff/<id>/<path>`, the entries of `:Ctxd diff`'s
-- quickfix list): the snapshot's side, with the working file beside it in diff mode.
local diffs = vim.api.nvim_create_augroup('ctxd_diffs', { clear = true })
vim.api.nvim_create_autocmd('BufReadCmd', {
  group = diffs,
  pattern = 'ctxd://diff/*',
  callback = function(ev)
    require('ctxd.ui').read_diff(ev.buf, ev.match)
  end,
})
vim.api.nvim_create_autocmd('BufWinEnter', {
  group = diffs,
  pattern = 'ctxd://diff/*',
  callback = function(ev)
    require('ctxd.ui').pair_diff(ev.buf)
  end,
})
vim.api.nvim_create_autocmd('BufWinLeave', {
  group = diffs,
  pattern = 'ctxd://diff/*',
  callback = function(ev)
    require('ctxd.ui.window').unpair_diff(vim.fn.bufwinid(ev.buf))
  end,
})

-- `:help ctxd` from the first start: a plugin manager that loads this folder from a local `dir`
-- (lazy.nvim) makes no help tags for it until an update, so make them when they are missing
-- or older than the help file (a read-only folder is left as it is: :checkhealth ctxd says so).
do
  local here = vim.fn.fnamemodify(debug.getinfo(1, 'S').source:sub(2), ':p')
  local doc = vim.fs.joinpath(vim.fs.dirname(vim.fs.dirname(here)), 'doc')
  local text, tags = vim.uv.fs_stat(doc .. '/ctxd.txt'), vim.uv.fs_stat(doc .. '/tags')
  if text and (not tags or tags.mtime.sec < text.mtime.sec) then
    pcall(vim.cmd.helptags, vim.fn.fnameescape(doc))
  end
end
