---@mod ctxd.ui Views: the `:Ctxd usage` float and the `:Ctxd log` buffer.
---
--- `render_*` build lines and highlight ranges from a daemon result (the model); `open_*` put them
--- in a window (the view). Tests read the buffer the view made.

local config = require('ctxd.config')
local status = require('ctxd.status')

local M = {}

--- Display name, highlight group and bar glyph of each Breakdown category, in protocol order.
M.categories = {
  { name = 'systemPrompt', label = 'System prompt', group = 'CtxdSystemPrompt', link = 'Statement', glyph = '█' },
  { name = 'builtinTools', label = 'Built-in tools', group = 'CtxdBuiltinTools', link = 'Function', glyph = '█' },
  { name = 'mcpTools', label = 'MCP tools', group = 'CtxdMcpTools', link = 'Type', glyph = '█' },
  { name = 'skills', label = 'Skills', group = 'CtxdSkills', link = 'Special', glyph = '█' },
  { name = 'memoryFiles', label = 'Memory files', group = 'CtxdMemoryFiles', link = 'String', glyph = '█' },
  { name = 'messages', label = 'Messages', group = 'CtxdMessages', link = 'Identifier', glyph = '█' },
  { name = 'freeSpace', label = 'Free space', group = 'CtxdFreeSpace', link = 'NonText', glyph = '░' },
  { name = 'autocompactBuffer', label = 'Autocompact buffer', group = 'CtxdAutocompactBuffer', link = 'Comment', glyph = '░' },
}

local by_name = {}
for _, category in ipairs(M.categories) do
  by_name[category.name] = category
end

function M.define_highlights()
  for _, category in ipairs(M.categories) do
    vim.api.nvim_set_hl(0, category.group, { link = category.link, default = true })
  end
  vim.api.nvim_set_hl(0, 'CtxdTitle', { link = 'Title', default = true })
end

---@class ctxd.Line
---@field text string
---@field marks { col: integer, end_col: integer, group: string }[] byte ranges

--- Split `width` cells among categories in proportion to their tokens (largest remainder), so
--- the cells add up to `width` exactly as the tokens add up to the window.
---@param categories { name: string, tokens: integer }[]
---@param width integer
---@return integer[]
function M.bar_cells(categories, width)
  local total = 0
  for _, c in ipairs(categories) do
    total = total + math.max(0, c.tokens or 0)
  end
  local cells, order, used = {}, {}, 0
  if total == 0 then
    for i = 1, #categories do
      cells[i] = 0
    end
    return cells
  end
  for i, c in ipairs(categories) do
    local exact = math.max(0, c.tokens or 0) * width / total
    cells[i] = math.floor(exact)
    used = used + cells[i]
    table.insert(order, { i = i, rest = exact - cells[i] })
  end
  table.sort(order, function(a, b)
    if a.rest ~= b.rest then
      return a.rest > b.rest
    end
    return a.i < b.i
  end)
  for k = 1, width - used do
    local slot = order[(k - 1) % #order + 1].i
    cells[slot] = cells[slot] + 1
  end
  -- A category too small for a cell still gets one, taken from the largest, so it can be seen.
  for i, c in ipairs(categories) do
    if (c.tokens or 0) > 0 and cells[i] == 0 then
      local largest = 1
      for j = 2, #cells do
        if cells[j] > cells[largest] then
          largest = j
        end
      end
      if cells[largest] > 1 then
        cells[largest] = cells[largest] - 1
        cells[i] = 1
      end
    end
  end
  return cells
end

---@param tokens integer
---@param window integer
local function percent(tokens, window)
  if not window or window <= 0 then
    return '0.0%'
  end
  return ('%.1f%%'):format(tokens * 100 / window)
end

--- Lines of the breakdown float.
---@param breakdown table the `ctxd/usage` result
---@param width integer? bar width in cells
---@return ctxd.Line[]
function M.render_breakdown(breakdown, width)
  width = width or config.options.float.bar_width
  local max_details = config.options.float.max_details
  local usage = breakdown.usage or {}
  local window = breakdown.contextWindow or usage.contextWindow or 0
  local estimated = breakdown.mode == 'estimated'
  local lines = {} ---@type ctxd.Line[]
  local function add(text, marks)
    table.insert(lines, { text = text, marks = marks or {} })
  end

  add('Context usage', { { col = 0, end_col = #'Context usage', group = 'CtxdTitle' } })
  local cats = breakdown.categories or {}
  local bar_cats = cats
  if #cats == 0 then
    -- No breakdown by category (an older daemon): draw used against free.
    local used_tokens = math.min(usage.usedTokens or 0, window)
    bar_cats = {
      { name = 'messages', tokens = used_tokens },
      { name = 'freeSpace', tokens = window - used_tokens },
    }
  end
  local cells = M.bar_cells(bar_cats, width)
  local bar, marks = '  ', {}
  for i, c in ipairs(bar_cats) do
    local info = by_name[c.name] or { glyph = '█', group = 'CtxdMessages' }
    if cells[i] > 0 then
      local piece = info.glyph:rep(cells[i])
      table.insert(marks, { col = #bar, end_col = #bar + #piece, group = info.group })
      bar = bar .. piece
    end
  end
  add(bar, marks)
  local used = usage.usedTokens or 0
  local summary = ('  %s%s/%s tokens (%s)  %s'):format(
    estimated and '~' or '',
    status.format_tokens(used),
    status.format_tokens(window),
    percent(used, window),
    type(breakdown.model) == 'string' and breakdown.model or 'unknown model'
  )
  add(summary)
  local tier = status.tier_groups[usage.tier] and usage.tier or 'ok'
  local state = ('  tier %s · auto-compact at %s · %s'):format(
    tier,
    status.format_tokens(usage.autoCompactLimit or 0),
    estimated and 'estimated (no usage reported by the model yet)' or 'actual'
  )
  add(state, { { col = 2, end_col = 2 + #('tier ' .. tier), group = status.tier_groups[tier] } })
  add('')
  if #cats == 0 then
    add('  (the daemon sent no breakdown by category)')
  end

  local label_width = 0
  for _, c in ipairs(cats) do
    local info = by_name[c.name]
    label_width = math.max(label_width, #(info and info.label or c.name))
  end
  for _, c in ipairs(cats) do
    local info = by_name[c.name] or { label = c.name, glyph = '█', group = 'CtxdMessages' }
    -- An empty overhead category (no MCP tools, say) is noise; the space rows always show.
    if (c.tokens or 0) == 0 and info.glyph == '█' then
      goto continue
    end
    local text = ('  %s %-' .. label_width .. 's  %7s  %6s'):format(
      info.glyph,
      info.label,
      status.format_tokens(c.tokens or 0),
      percent(c.tokens or 0, window)
    )
    add(text, { { col = 2, end_col = 2 + #info.glyph, group = info.group } })
    local details = vim.deepcopy(c.details or {})
    table.sort(details, function(a, b)
      return (a.tokens or 0) > (b.tokens or 0)
    end)
    for k, d in ipairs(details) do
      if k > max_details then
        add(('      … %d more'):format(#details - max_details))
        break
      end
      add(('      %-' .. math.max(label_width - 2, 1) .. 's  %7s'):format(d.name, status.format_tokens(d.tokens or 0)))
    end
    ::continue::
  end
  return lines
end

--- Write rendered lines into a scratch buffer and apply their highlights.
---@param buf integer
---@param lines ctxd.Line[]
local function fill(buf, lines)
  local ns = vim.api.nvim_create_namespace('ctxd')
  local texts = vim.tbl_map(function(l)
    return l.text
  end, lines)
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, texts)
  vim.api.nvim_buf_clear_namespace(buf, ns, 0, -1)
  for row, line in ipairs(lines) do
    for _, mark in ipairs(line.marks) do
      vim.api.nvim_buf_set_extmark(buf, ns, row - 1, mark.col, { end_col = mark.end_col, hl_group = mark.group })
    end
  end
  vim.bo[buf].modifiable = false
end

--- A scratch buffer that `q` closes.
---@param filetype string
---@return integer
local function scratch(filetype)
  local buf = vim.api.nvim_create_buf(false, true)
  vim.bo[buf].bufhidden = 'wipe'
  vim.bo[buf].filetype = filetype
  for _, lhs in ipairs({ 'q', '<Esc>' }) do
    vim.keymap.set('n', lhs, '<Cmd>close<CR>', { buffer = buf, nowait = true, desc = 'Close' })
  end
  return buf
end

--- Size and place of the float for `lines`.
---@param lines ctxd.Line[]
local function float_geometry(lines)
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

--- Redraw the float from a fresh `ctxd/usage` whenever the usage of its thread changes, one
--- request at a time, until the float's buffer goes away.
---@param win integer
---@param buf integer
---@param target ctxd.Target must name `workspace` and `thread`
local function follow(win, buf, target)
  local in_flight, again = false, false
  local function refresh()
    if in_flight then
      again = true
      return
    end
    in_flight = true
    require('ctxd.client').request('ctxd/usage', {}, function(err, result)
      in_flight = false
      if err or not vim.api.nvim_buf_is_valid(buf) then
        return
      end
      local lines = M.render_breakdown(result)
      fill(buf, lines)
      if vim.api.nvim_win_is_valid(win) then
        vim.api.nvim_win_set_config(win, float_geometry(lines))
      end
      if again then
        again = false
        refresh()
      end
    end, target)
  end
  local unsubscribe = status.subscribe(function(snapshot)
    if snapshot.workspace == target.workspace and snapshot.thread == target.thread then
      refresh()
    end
  end)
  vim.api.nvim_create_autocmd('BufWipeout', { buffer = buf, once = true, callback = unsubscribe })
end

--- Open the breakdown in a centred float; returns its window and buffer. With a `target`
--- (`workspace` and `thread`), the float follows that thread's usage while it is open.
---@param breakdown table the `ctxd/usage` result
---@param target ctxd.Target?
---@return integer win
---@return integer buf
function M.open_breakdown(breakdown, target)
  M.define_highlights()
  status.define_highlights()
  local lines = M.render_breakdown(breakdown)
  local buf = scratch('ctxd-usage')
  fill(buf, lines)
  local opts = vim.tbl_extend('force', float_geometry(lines), {
    style = 'minimal',
    border = config.options.float.border,
    title = ' ctxd ',
    title_pos = 'center',
  })
  local win = vim.api.nvim_open_win(buf, true, opts)
  if target and target.workspace and target.thread then
    follow(win, buf, target)
  end
  return win, buf
end

--- A short text for one ledger item.
---@param item table
---@return string
local function item_text(item)
  local function first_text(content)
    if type(content) == 'string' then
      return content
    end
    for _, part in ipairs(type(content) == 'table' and content or {}) do
      if type(part) == 'table' and type(part.text) == 'string' then
        return part.text
      elseif type(part) == 'table' and part.type == 'input_image' then
        return '[image]'
      end
    end
    return ''
  end
  local t = item.type
  if t == 'message' then
    return ('%s: %s'):format(item.role or '?', first_text(item.content))
  elseif t == 'function_call' or t == 'custom_tool_call' then
    return ('call %s %s'):format(item.name or '?', item.arguments or item.input or '')
  elseif t == 'function_call_output' or t == 'custom_tool_call_output' then
    return ('output %s'):format(first_text(item.output))
  elseif t == 'reasoning' then
    return ('reasoning: %s'):format(first_text(item.summary))
  elseif t == 'ghost_snapshot' then
    local commit = item.ghost_commit or {}
    return ('snapshot %s'):format(tostring(commit.id or '?'):sub(1, 12))
  elseif t == 'compaction' then
    return 'compacted history'
  end
  return tostring(t)
end

--- One line per item of a `ctxd/history` result.
---@param history table
---@return string[]
function M.render_history(history, thread)
  local lines = {
    ('ctxd thread %s · %d items · history version %s'):format(
      thread or config.options.thread,
      history.total or #(history.items or {}),
      tostring(history.historyVersion)
    ),
  }
  for i, item in ipairs(history.items or {}) do
    local text = item_text(item):gsub('[\r\n]+', ' ')
    if #text > 160 then
      text = text:sub(1, 157) .. '...'
    end
    local marker = item.archived and ' (archived)' or ''
    table.insert(lines, ('%4d  %-22s %s%s'):format(i, item.type, text, marker))
  end
  return lines
end

--- Show the ledger in a scratch buffer in a new split; returns the buffer.
---@param history table
---@param thread string?
---@return integer buf
function M.open_history(history, thread)
  local buf = scratch('ctxd-log')
  local lines = vim.tbl_map(function(text)
    return { text = text, marks = {} }
  end, M.render_history(history, thread))
  lines[1].marks = { { col = 0, end_col = #lines[1].text, group = 'CtxdTitle' } }
  M.define_highlights()
  fill(buf, lines)
  vim.cmd('botright split')
  vim.api.nvim_win_set_buf(0, buf)
  return buf
end

--- A list entry for a GhostCommit.
---@param commit table
---@return string
function M.format_snapshot(commit)
  local when = commit.createdAt or commit.created_at or ''
  if type(when) == 'number' then
    when = os.date('!%Y-%m-%d %H:%M:%S', when)
  elseif type(when) == 'string' then
    local date, time = when:match('^(%d+%-%d+%-%d+)T(%d+:%d+:%d+)')
    when = date and (date .. ' ' .. time) or when
  end
  local message = commit.message
  if message == nil or message == vim.NIL or message == '' then
    message = '(no message)'
  end
  return ('%s  %s  %s  (%s files)'):format(
    tostring(commit.id or '?'):sub(1, 10),
    tostring(when),
    message,
    tostring(commit.fileCount or '?')
  )
end

return M
