---@mod ctxd.ui The `:Ctxd` views, each wired from its three parts, as fidget.nvim splits them:
---
--- `ctxd.ui.model` asks the daemon and keeps what the views need between requests,
--- `ctxd.ui.view` turns results into lines (and sends nothing), `ctxd.ui.window` puts lines in
--- floats, splits, read-only buffers, the quickfix list and diff tabs. This file only connects them.

local model = require('ctxd.ui.model')
local view = require('ctxd.ui.view')
local window = require('ctxd.ui.window')

local M = {}

--- How often an open usage float redraws its cache line ("warm for 3 min" counts down).
M.CACHE_REDRAW_MS = 15000

---@param text string
local function say(text, level)
  require('ctxd.notify').say(text, level)
end

--- The usage float's layout for the screen as it is now.
---@return ctxd.FloatLayout
local function layout()
  return view.float_layout(vim.o.columns, vim.o.lines)
end

--- Open the breakdown in a centred float (about 90 columns at most; notes wrapped between words;
--- as tall as what it shows); returns its window and buffer. With a `target` (`workspace` and
--- `thread`), the float follows that thread's usage while it is open.
---@param breakdown ctxd.Breakdown the `ctxd/usage` result
---@param target ctxd.Target?
---@return integer win
---@return integer buf
function M.open_breakdown(breakdown, target)
  view.define_highlights()
  require('ctxd.status').define_highlights()
  local title = ' ctxd '
  if target and target.workspace and target.thread then
    local name = view.thread_name(target.workspace, target.thread)
    title = (' ctxd · %s '):format(view.fit(name, math.min(60, layout().width - 12)):gsub('%s+$', ''))
  end
  local shape = layout()
  local win, buf = window.open_float(view.render_breakdown(breakdown, shape), 'ctxd-usage', title, shape)
  local latest = breakdown
  local function redraw()
    shape = layout()
    window.redraw_float(win, buf, view.render_breakdown(latest, shape), shape)
  end
  if target and target.workspace and target.thread then
    local stop = model.follow_usage(target, function(result)
      latest = result
      redraw()
    end)
    window.on_close(buf, stop)
  end
  -- The cache's "warm for N min" is a countdown: redraw it while the float is open.
  local timer = assert(vim.uv.new_timer())
  timer:start(M.CACHE_REDRAW_MS, M.CACHE_REDRAW_MS, vim.schedule_wrap(function()
    if type(latest) == 'table' and type(latest.cache) == 'table' and vim.api.nvim_buf_is_valid(buf) then
      redraw()
    end
  end))
  -- A resized screen gets the layout that fits it.
  local resized = vim.api.nvim_create_autocmd('VimResized', { callback = redraw })
  window.on_close(buf, function()
    timer:stop()
    timer:close()
    pcall(vim.api.nvim_del_autocmd, resized)
  end)
  return win, buf
end

--- Show the ledger (`ctxd/history`) in a split; returns the buffer.
---@param history table
---@param thread string?
---@return integer buf
function M.open_history(history, thread)
  view.define_highlights()
  local lines = vim.tbl_map(function(text)
    return { text = text, marks = {} }
  end, view.render_history(history, thread))
  lines[1].marks = { { col = 0, end_col = #lines[1].text, group = 'CtxdTitle' } }
  return window.open_split(lines, 'ctxd-log')
end

--- Open Neovim's diff of `path` against snapshot `id` in a new tab (see `read_diff`): the
--- snapshot's text on the left, read-only; the working file on the right. `cb(problem)` or
--- `cb(nil, tab)` once both sides are there.
---@param target ctxd.Target
---@param id string
---@param path string workspace-relative
---@param cb fun(err: any, tab: integer?)?
function M.open_file_diff(target, id, path, cb)
  cb = cb or function() end
  model.remember_diff(assert(target.workspace), id)
  vim.cmd.tabnew()
  local tab = vim.api.nvim_get_current_tabpage()
  vim.cmd.edit(vim.fn.fnameescape(model.diff_name(id, path)))
  local buf = vim.api.nvim_get_current_buf()
  model.when_diff_read(buf, function(problem)
    cb(problem, not problem and tab or nil)
  end)
end

--- Fill the quickfix list with the files changed since snapshot `id` (from `ctxd/ghost/diff`).
--- Each entry is the file's diff (`ctxd://diff/<id>/<path>`, see `read_diff`), so <CR>, `:cc`
--- and `:cnext` all open it; a deleted file shows what the snapshot had.
---@param workspace string
---@param id string
---@param files { path: string, status: string, binary: boolean? }[]
function M.set_diff_quickfix(workspace, id, files)
  model.remember_diff(workspace, id)
  local items = {}
  for _, f in ipairs(files) do
    table.insert(items, {
      filename = model.diff_name(id, f.path),
      module = f.path,
      lnum = 1,
      text = f.status .. (f.binary and ' (binary)' or ''),
      user_data = { ctxd_diff = { id = id, path = f.path, status = f.status, binary = f.binary == true } },
    })
  end
  model.last_diff = { workspace = workspace, id = id, files = files }
  window.set_quickfix(('ctxd diff %s'):format(id:sub(1, 10)), items)
end

--- `BufReadCmd` of `ctxd://diff/<id>/<path>`: the buffer gets the file as the snapshot has it
--- (read-only; for a deleted file, all it had), and the window a partner beside it with the
--- working file (an empty scratch buffer for a deleted one), the two in Neovim's diff mode.
---@param buf integer
---@param name string
function M.read_diff(buf, name)
  local ref = model.diff_ref(name)
  if not ref then
    say(('not a ctxd diff: %s'):format(name), vim.log.levels.ERROR)
    return
  end
  model.diff_reading(buf)
  window.loading(buf, ref.path)
  local workspace = model.diff_workspace(ref.id)
  if not workspace then
    window.show_diff_side(buf, { ('-- ctxd: no workspace holds snapshot %s (is the daemon running?)'):format(ref.id:sub(1, 10)) }, ref.path)
    model.diff_read(buf, 'no workspace')
    return
  end
  model.file_diff({ workspace = workspace }, ref.id, ref.path, function(problem, file)
    if not vim.api.nvim_buf_is_valid(buf) then
      return
    end
    if problem or not file then
      window.show_diff_side(buf, { '-- ctxd: ' .. tostring(problem) }, ref.path)
      say(tostring(problem), vim.log.levels.WARN)
      model.diff_read(buf, problem)
      return
    end
    window.show_diff_side(buf, window.text_lines(file.before), ref.path)
    vim.b[buf].ctxd_diff = {
      root = vim.uri_to_fname(workspace),
      path = ref.path,
      deleted = file.status == 'deleted',
      id = ref.id,
    }
    M.pair_diff(buf)
    model.diff_read(buf, nil)
  end)
end

--- `BufWinEnter` of a `ctxd://diff/...` buffer (and once it is read): put the working file
--- beside it, both in diff mode.
---@param buf integer
function M.pair_diff(buf)
  local info = vim.b[buf].ctxd_diff
  local win = vim.fn.bufwinid(buf)
  if type(info) ~= 'table' or win == -1 then
    return
  end
  window.pair_diff(win, info.root, info.path, info.deleted)
end

--- `:Ctxd recall {query}`: search the thread's whole history (its compacted parts included) and
--- list the hits in the quickfix list, or in `vim.ui.select` (`recall.picker = 'select'`).
--- Choosing a hit opens the stored item read-only (`ctxd://item/...`, see `read_item`).
--- `cb(err, result)` after the list is shown.
---@param target ctxd.Target must name `workspace`
---@param query string
---@param cb ctxd.Callback?
function M.recall(target, query, cb)
  cb = cb or function() end
  local options = require('ctxd.config').options.recall
  model.recall(target, query, { scope = options.scope, limit = options.limit }, function(err, result)
    if err then
      cb(err)
      return
    end
    local hits = type(result) == 'table' and result.results or {}
    local workspace = assert(target.workspace)
    local function name_of(hit)
      return model.item_name({ workspace = workspace, thread = hit.thread, seq = hit.seq })
    end
    if #hits == 0 then
      say(('no match for %q'):format(query), vim.log.levels.WARN)
      cb(nil, result)
      return
    end
    if options.picker == 'select' then
      vim.ui.select(hits, {
        prompt = ('ctxd recall %q'):format(query),
        format_item = function(hit)
          return view.recall_place(workspace, hit, target.thread) .. '  ' .. view.recall_text(hit)
        end,
        kind = 'ctxd.recall',
      }, function(hit)
        if hit then
          vim.cmd.edit(vim.fn.fnameescape(name_of(hit)))
        end
      end)
      cb(nil, result)
      return
    end
    local items = {}
    for _, hit in ipairs(hits) do
      table.insert(items, {
        filename = name_of(hit),
        module = view.recall_place(workspace, hit, target.thread),
        text = view.recall_text(hit),
        user_data = { ctxd_recall = hit },
      })
    end
    window.set_quickfix(('ctxd recall %s'):format(query), items)
    vim.cmd('botright copen')
    say(('%d of %d matches for %q; <CR> opens one'):format(#hits, result.total or #hits, query))
    cb(nil, result)
  end)
end

--- `BufReadCmd` of `ctxd://item/...`: fill the buffer with the stored item, read-only, and say in
--- one line whether a compaction replaced it. `cb(err)` when done.
---@param buf integer
---@param name string
---@param cb fun(err: any)?
function M.read_item(buf, name, cb)
  cb = cb or function() end
  local ref = model.item_ref(name)
  if not ref then
    say(('not a ctxd item: %s'):format(name), vim.log.levels.ERROR)
    cb('not an item')
    return
  end
  view.define_highlights()
  require('ctxd.status').define_highlights()
  local place = view.recall_place(ref.workspace, { thread = ref.thread, seq = ref.seq })
  model.item(ref, function(err, result, kind)
    if err or not result then
      say(('item %s: %s'):format(place, require('ctxd.client').format_error(err)), vim.log.levels.ERROR)
      cb(err)
      return
    end
    if vim.api.nvim_buf_is_valid(buf) then
      window.show_read_only(buf, view.render_item(result, place, kind), 'ctxd-item')
    end
    say(view.item_said(place, result.archived, kind))
    cb(nil)
  end)
end

return M
