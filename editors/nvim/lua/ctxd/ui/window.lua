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
  local texts = vim.tbl_map(function(l)
    return l.text
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

--- Size and place of a centred float for `lines`.
---@param lines ctxd.Line[]
---@return vim.api.keyset.win_config
function M.geometry(lines)
  local width = 0
  for _, l in ipairs(lines) do
    width = math.max(width, vim.fn.strdisplaywidth(l.text))
  end
  width = math.min(width + 2, vim.o.columns - 4)
  local height = math.min(#lines, vim.o.lines - 4)
  return {
    relative = 'editor',
    width = width,
    height = height,
    row = math.max(0, math.floor((vim.o.lines - height) / 2) - 1),
    col = math.max(0, math.floor((vim.o.columns - width) / 2)),
  }
end

--- Open `lines` in a centred float with `title`, focused; returns its window and buffer.
---@param lines ctxd.Line[]
---@param filetype string
---@param title string
---@return integer win
---@return integer buf
function M.open_float(lines, filetype, title)
  local buf = M.scratch(filetype)
  M.fill(buf, lines)
  local opts = vim.tbl_extend('force', M.geometry(lines), {
    style = 'minimal',
    border = config.options.float.border,
    title = title,
    title_pos = 'center',
  })
  return vim.api.nvim_open_win(buf, true, opts), buf
end

--- Show new lines in a float opened by `open_float`, resized to them; false once it is gone.
---@param win integer
---@param buf integer
---@param lines ctxd.Line[]
---@return boolean
function M.redraw_float(win, buf, lines)
  if not vim.api.nvim_buf_is_valid(buf) then
    return false
  end
  M.fill(buf, lines)
  if vim.api.nvim_win_is_valid(win) then
    vim.api.nvim_win_set_config(win, M.geometry(lines))
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

--- Replace the quickfix list with `items` under `title`; with `on_enter`, <CR> in the quickfix
--- window calls it on an entry whose `user_data` has `key` (any other entry: what <CR> does).
---@param title string
---@param items table[] setqflist() items
---@param key string?
---@param on_enter fun(data: table)?
function M.set_quickfix(title, items, key, on_enter)
  vim.fn.setqflist({}, ' ', { title = title, items = items })
  if not (key and on_enter) then
    return
  end
  local function map(buf)
    vim.keymap.set('n', '<CR>', function()
      local item = vim.fn.getqflist({ items = 0, idx = vim.fn.line('.') }).items[1]
      local data = item and type(item.user_data) == 'table' and item.user_data[key]
      if data then
        on_enter(data)
      else
        vim.cmd.normal({ args = { vim.keycode('<CR>') }, bang = true })
      end
    end, { buffer = buf, desc = 'ctxd: open the entry' })
  end
  vim.api.nvim_create_autocmd('FileType', {
    group = vim.api.nvim_create_augroup('ctxd_quickfix_' .. key, { clear = true }),
    pattern = 'qf',
    callback = function(ev)
      map(ev.buf)
    end,
  })
  for _, win in ipairs(vim.api.nvim_list_wins()) do
    local buf = vim.api.nvim_win_get_buf(win)
    if vim.bo[buf].filetype == 'qf' then
      map(buf)
    end
  end
end

---@param text any
---@return string[]
local function text_lines(text)
  if type(text) ~= 'string' or text == '' then
    return {}
  end
  return vim.split((text:gsub('\n$', '')), '\n', { plain = true })
end

--- Open Neovim's diff of `path` in a new tab: `before` (the snapshot's text) on the left,
--- read-only, named `ctxd://snapshot/<id>/<path>`; the working file on the right (a scratch
--- buffer when `deleted`). Returns the tab.
---@param root string the workspace folder
---@param path string workspace-relative
---@param short_id string
---@param before string?
---@param deleted boolean
---@return integer tab
function M.open_diff_tab(root, path, short_id, before, deleted)
  vim.cmd.tabnew()
  local tab = vim.api.nvim_get_current_tabpage()
  if deleted then
    local gone = vim.api.nvim_get_current_buf()
    vim.bo[gone].buftype = 'nofile'
    vim.bo[gone].bufhidden = 'wipe'
    vim.api.nvim_buf_set_name(gone, ('ctxd://deleted/%s'):format(path))
  else
    vim.cmd.edit(vim.fn.fnameescape(vim.fs.joinpath(root, path)))
  end
  vim.cmd.diffthis()
  vim.cmd('leftabove vnew')
  local left = vim.api.nvim_get_current_buf()
  vim.bo[left].buftype = 'nofile'
  vim.bo[left].bufhidden = 'wipe'
  vim.bo[left].swapfile = false
  vim.api.nvim_buf_set_lines(left, 0, -1, false, text_lines(before))
  vim.api.nvim_buf_set_name(left, ('ctxd://snapshot/%s/%s'):format(short_id, path))
  vim.bo[left].filetype = vim.filetype.match({ filename = path }) or ''
  vim.bo[left].modifiable = false
  vim.cmd.diffthis()
  return tab
end

return M
