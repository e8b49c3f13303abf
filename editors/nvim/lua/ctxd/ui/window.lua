---@mod ctxd.ui.window Floats, splits, scratch buffers, the quickfix list and diff tabs.
---
--- Puts the lines `ctxd.ui.view` made on screen and owns the windows and buffers they live in.
--- Knows nothing of the daemon.

local config = require('ctxd.config')

local M = {}

M.NS = vim.api.nvim_create_namespace('ctxd')

--- Write rendered lines into a buffer, apply their highlights, and leave it unmodifiable.
---@param buf integer
---@param lines ctxd.Line[]
function M.fill(buf, lines)
  -- A name from the daemon (a file's, a tool's, a model's) may hold a line break, which
  -- nvim_buf_set_lines refuses: a space in its place keeps the byte columns of the marks.
  local texts = vim.tbl_map(function(l)
    return (l.text:gsub('[\r\n]', ' '))
  end, lines)
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, texts)
  vim.api.nvim_buf_clear_namespace(buf, M.NS, 0, -1)
  for row, line in ipairs(lines) do
    for _, mark in ipairs(line.marks) do
      vim.api.nvim_buf_set_extmark(buf, M.NS, row - 1, mark.col, { end_col = mark.end_col, hl_group = mark.group })
    end
  end
  vim.bo[buf].modifiable = false
  vim.bo[buf].modified = false
end

--- A scratch buffer that `q` closes.
---@param filetype string
---@return integer
function M.scratch(filetype)
  local buf = vim.api.nvim_create_buf(false, true)
  vim.bo[buf].bufhidden = 'wipe'
  vim.bo[buf].filetype = filetype
  for _, lhs in ipairs({ 'q', '<Esc>' }) do
    vim.keymap.set('n', lhs, '<Cmd>close<CR>', { buffer = buf, nowait = true, desc = 'Close' })
  end
  return buf
end

--- Size and place of a centred float for `lines` (each at most `layout.width` cells: the view
--- wrapped them), as tall as its lines up to `layout.height`.
---@param lines ctxd.Line[]
---@param layout ctxd.FloatLayout
---@return vim.api.keyset.win_config
function M.geometry(lines, layout)
  local width = 0
  for _, l in ipairs(lines) do
    width = math.max(width, vim.fn.strdisplaywidth(l.text))
  end
  width = math.min(width + 2, layout.width + 2, vim.o.columns - 4)
  local height = math.max(1, math.min(#lines, layout.height, vim.o.lines - vim.o.cmdheight - 3))
  return {
    relative = 'editor',
    width = width,
    height = height,
    row = math.max(0, math.floor((vim.o.lines - vim.o.cmdheight - height) / 2) - 1),
    col = math.max(0, math.floor((vim.o.columns - width) / 2) - 1),
  }
end

--- Open `lines` in a centred float with `title`, focused; returns its window and buffer.
---@param lines ctxd.Line[]
---@param filetype string
---@param title string
---@param layout ctxd.FloatLayout
---@return integer win
---@return integer buf
function M.open_float(lines, filetype, title, layout)
  local buf = M.scratch(filetype)
  M.fill(buf, lines)
  local opts = vim.tbl_extend('force', M.geometry(lines, layout), {
    style = 'minimal',
    border = config.options.float.border,
    title = title,
    title_pos = 'center',
  })
  local win = vim.api.nvim_open_win(buf, true, opts)
  -- The view fits every line to the width; a line that still does not breaks between words.
  vim.wo[win].wrap = true
  vim.wo[win].linebreak = true
  return win, buf
end

--- Show new lines in a float opened by `open_float`, resized to them; false once it is gone.
---@param win integer
---@param buf integer
---@param lines ctxd.Line[]
---@param layout ctxd.FloatLayout
---@return boolean
function M.redraw_float(win, buf, lines, layout)
  if not vim.api.nvim_buf_is_valid(buf) then
    return false
  end
  M.fill(buf, lines)
  if vim.api.nvim_win_is_valid(win) then
    vim.api.nvim_win_set_config(win, M.geometry(lines, layout))
  end
  return true
end

--- Run `fn` when `buf` goes away.
---@param buf integer
---@param fn fun()
function M.on_close(buf, fn)
  vim.api.nvim_create_autocmd('BufWipeout', { buffer = buf, once = true, callback = fn })
end

--- Open `lines` in a scratch buffer in a new split at the bottom; returns the buffer.
---@param lines ctxd.Line[]
---@param filetype string
---@return integer buf
function M.open_split(lines, filetype)
  local buf = M.scratch(filetype)
  M.fill(buf, lines)
  vim.cmd('botright split')
  vim.api.nvim_win_set_buf(0, buf)
  return buf
end

--- Make `buf` (a `ctxd://` buffer being read) a read-only view of `lines`.
---@param buf integer
---@param lines ctxd.Line[]
---@param filetype string
function M.show_read_only(buf, lines, filetype)
  vim.bo[buf].buftype = 'nofile'
  vim.bo[buf].swapfile = false
  vim.bo[buf].bufhidden = 'hide'
  M.fill(buf, lines)
  vim.bo[buf].readonly = true
  vim.bo[buf].filetype = filetype
  for _, lhs in ipairs({ 'q' }) do
    vim.keymap.set('n', lhs, '<Cmd>bdelete<CR>', { buffer = buf, nowait = true, desc = 'Close' })
  end
end

--- Replace the quickfix list with `items` under `title`.
---@param title string
---@param items table[] setqflist() items
function M.set_quickfix(title, items)
  vim.fn.setqflist({}, ' ', { title = title, items = items })
end

--- `text` as buffer lines (no trailing empty line for a final newline).
---@param text any
---@return string[]
function M.text_lines(text)
  if type(text) ~= 'string' or text == '' then
    return {}
  end
  return vim.split((text:gsub('\n$', '')), '\n', { plain = true })
end

--- Make `buf` (a `ctxd://diff/...` buffer being read) an empty read-only scratch buffer for now.
---@param buf integer
---@param path string the file it shows, for its filetype
function M.loading(buf, path)
  vim.bo[buf].buftype = 'nofile'
  vim.bo[buf].swapfile = false
  vim.bo[buf].bufhidden = 'hide'
  vim.bo[buf].modifiable = false
  vim.bo[buf].filetype = vim.filetype.match({ filename = path }) or ''
end

--- Show `lines` (the snapshot's side of a diff) in `buf`, read-only.
---@param buf integer
---@param lines string[]
---@param path string
function M.show_diff_side(buf, lines, path)
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].modified = false
  vim.bo[buf].readonly = true
  local ft = vim.filetype.match({ filename = path }) or ''
  if vim.bo[buf].filetype ~= ft then
    vim.bo[buf].filetype = ft
  end
end

--- A scratch buffer that stands for a deleted file on the working side of a diff.
---@param path string
---@return integer
local function deleted_buffer(path)
  local name = ('ctxd://deleted/%s'):format(path)
  local existing = vim.fn.bufnr(name)
  if existing ~= -1 then
    return existing
  end
  local buf = vim.api.nvim_create_buf(false, true)
  vim.bo[buf].bufhidden = 'hide'
  vim.api.nvim_buf_set_name(buf, name)
  vim.bo[buf].modifiable = false
  return buf
end

--- Diff window `win` (the snapshot's side) against the working file of `path`, shown in its
--- partner window to the right, made the first time and reused after (`:cnext` goes on in the
--- same pair of windows). A deleted file's working side is an empty scratch buffer.
---@param win integer
---@param root string the workspace folder
---@param path string workspace-relative
---@param deleted boolean
function M.pair_diff(win, root, path, deleted)
  local partner = vim.w[win].ctxd_diff_partner
  if not (partner and vim.api.nvim_win_is_valid(partner)
      and vim.api.nvim_win_get_tabpage(partner) == vim.api.nvim_win_get_tabpage(win)) then
    partner = vim.api.nvim_win_call(win, function()
      vim.cmd('rightbelow vsplit')
      return vim.api.nvim_get_current_win()
    end)
    vim.w[win].ctxd_diff_partner = partner
  end
  vim.api.nvim_win_call(partner, function()
    if deleted then
      vim.api.nvim_win_set_buf(partner, deleted_buffer(path))
    else
      vim.cmd.edit(vim.fn.fnameescape(vim.fs.joinpath(root, path)))
    end
    vim.cmd.diffthis()
  end)
  vim.api.nvim_win_call(win, function()
    vim.cmd.diffthis()
  end)
end

--- A `ctxd://diff/...` buffer leaves window `win`: its partner leaves diff mode too (the next
--- entry, if any, puts both back).
---@param win integer
function M.unpair_diff(win)
  if win == -1 or not vim.api.nvim_win_is_valid(win) then
    return
  end
  local partner = vim.w[win].ctxd_diff_partner
  for _, w in ipairs({ win, partner }) do
    if w and vim.api.nvim_win_is_valid(w) then
      vim.api.nvim_win_call(w, function()
        vim.cmd.diffoff()
      end)
    end
  end
end

return M
