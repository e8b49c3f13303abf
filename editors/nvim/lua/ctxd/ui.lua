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

--- Human names for the daemon's own detail rows (tool, file and skill names are shown as they are).
M.detail_names = {
  baseInstructions = 'Base instructions',
  toolResults = 'Tool results',
  toolCalls = 'Tool calls',
  userMessages = 'Your messages',
  assistantMessages = 'Assistant messages',
  reasoning = 'Reasoning',
  images = 'Images',
  compactedHistory = 'Compacted history',
  otherMessages = 'Other messages',
  other = 'Other items',
  ['(unattributed)'] = 'Not attributed',
}

--- A detail row's name: the daemon's own rows (of the system prompt and messages) in words; tool,
--- file and skill names as they are.
---@param name any
---@param category string?
---@return string
function M.detail_name(name, category)
  if category == 'systemPrompt' or category == 'messages' then
    return M.detail_names[name] or tostring(name)
  end
  return tostring(name)
end

--- Widest name in the float's table, in cells; longer names are cut with `…`.
M.MAX_NAME = 40

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
  -- Estimated: no total from the model API yet (with messages, the breakdown is then 'actual' but estimated).
  local estimated = breakdown.mode == 'estimated' or usage.source == 'estimate'
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
  local cost = M.cost_text(breakdown.cost, breakdown.model)
  if cost then
    add('  cost ' .. cost)
  end
  if type(breakdown.limitSource) == 'string' then
    add("  the agent's own figures: " .. breakdown.limitSource)
  end
  for name, how in pairs(type(breakdown.inferred) == 'table' and breakdown.inferred or {}) do
    add(('  %s is inferred: %s'):format((by_name[name] or { label = name }).label, how))
  end
  add('')
  if #cats == 0 then
    add('  (the daemon sent no breakdown by category)')
  end

  -- One column of names, wide enough for every category and detail shown (a long MCP tool name
  -- is cut with `…` at `MAX_NAME` cells), so the token counts line up.
  local label_width = 0
  for _, c in ipairs(cats) do
    local info = by_name[c.name]
    label_width = math.max(label_width, vim.fn.strdisplaywidth(info and info.label or c.name))
    for k, d in ipairs(c.details or {}) do
      if k <= max_details then
        label_width = math.max(label_width, vim.fn.strdisplaywidth(M.detail_name(d.name, c.name)) + 2)
      end
    end
  end
  label_width = math.min(label_width, M.MAX_NAME)
  for _, c in ipairs(cats) do
    local info = by_name[c.name] or { label = c.name, glyph = '█', group = 'CtxdMessages' }
    -- An empty overhead category (no MCP tools, say) is noise; the space rows always show.
    if (c.tokens or 0) == 0 and info.glyph == '█' then
      goto continue
    end
    local text = ('  %s %s  %7s  %6s'):format(
      info.glyph,
      M.fit(info.label, label_width),
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
      add(('      %s  %7s'):format(M.fit(M.detail_name(d.name, c.name), label_width - 2), status.format_tokens(d.tokens or 0)))
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
    title = target and target.workspace and target.thread
        and (' ctxd · %s '):format(M.fit(M.thread_name(target.workspace, target.thread), 60):gsub('%s+$', ''))
      or ' ctxd ',
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
      thread or '?',
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
  else
    when = '(time unknown)' -- createdAt may be null (protocol 2)
  end
  local message = commit.message
  if message == nil or message == vim.NIL or message == '' then
    message = '(no message)'
  end
  -- v3 checkpoints: the turn they belong to, then what took them (the tool, in plain words).
  local turn, tool = commit.turn, commit.tool
  if type(turn) == 'table' and turn.index then
    local what
    if commit.trigger == 'turn' then
      what = 'start of the turn'
    elseif type(tool) == 'table' and tool.name then
      local paths = type(tool.paths) == 'table' and #tool.paths > 0 and (' ' .. table.concat(tool.paths, ', ')) or ''
      what = message ~= '(no message)' and message or ('before ' .. tool.name .. paths)
      if not what:find(tool.name, 1, true) then
        what = ('%s (%s)'):format(what, tool.name)
      end
    else
      what = message
    end
    message = ('Turn %d: %s › %s'):format(turn.index, M.fit(tostring(turn.text or ''):gsub('%s+', ' '), 40):gsub('%s+$', ''), what)
  elseif commit.trigger == 'restore' then
    message = message .. ' (taken before a restore)'
  end
  return ('%s  %s  %s  (%s files)'):format(
    tostring(commit.id or '?'):sub(1, 10),
    tostring(when),
    message,
    tostring(commit.fileCount or '?')
  )
end

--- Snapshots for a picker: newest first, but the checkpoints of one agent turn (v3 `turn`)
--- together, in the order they were taken, where the turn's newest one would be.
---@param snapshots table[] GhostCommits, newest first (the daemon's order)
---@return table[]
function M.order_snapshots(snapshots)
  local ordered, groups = {}, {}
  for _, commit in ipairs(snapshots) do
    local turn = commit.turn
    if type(turn) == 'table' and turn.index then
      local key = tostring(commit.thread) .. '\0' .. tostring(turn.index)
      if not groups[key] then
        groups[key] = {}
        table.insert(ordered, { group = key })
      end
      table.insert(groups[key], 1, commit) -- oldest first
    else
      table.insert(ordered, { commit = commit })
    end
  end
  local out = {}
  for _, entry in ipairs(ordered) do
    if entry.commit then
      table.insert(out, entry.commit)
    else
      vim.list_extend(out, groups[entry.group])
    end
  end
  return out
end

--- `text` cut to `width` display cells (with `…`) and padded to it.
---@param text string
---@param width integer
---@return string
function M.fit(text, width)
  if vim.fn.strdisplaywidth(text) > width then
    local chars = vim.fn.strchars(text)
    while chars > 0 and vim.fn.strdisplaywidth(vim.fn.strcharpart(text, 0, chars)) > width - 1 do
      chars = chars - 1
    end
    text = vim.fn.strcharpart(text, 0, chars) .. '…'
  end
  return text .. (' '):rep(width - vim.fn.strdisplaywidth(text))
end

--- `Codex "fix the flaky test"` or `ctx default`: how a thread is named to the user.
---@param workspace string
---@param thread string
---@return string
function M.thread_name(workspace, thread)
  local threads = require('ctxd.threads')
  local info = threads.info(workspace, thread) or {}
  local title = type(info.title) == 'string' and info.title ~= '' and ('"%s"'):format(info.title) or thread
  return ('%s %s'):format(threads.label(workspace, thread), title)
end

--- How long ago an ISO time or a Unix time was: `5s`, `3m`, `2h`, `4d`.
---@param when any
---@return string
local function ago(when)
  local seconds
  if type(when) == 'number' then
    seconds = when > 1e11 and when / 1000 or when
  elseif type(when) == 'string' then
    local y, mo, d, h, mi, sec = when:match('^(%d+)-(%d+)-(%d+)[T ](%d+):(%d+):(%d+)')
    if not y then
      return ''
    end
    local utc = os.time({ year = y, month = mo, day = d, hour = h, min = mi, sec = sec, isdst = false })
    -- os.time reads the table as local time: correct by this machine's offset from UTC.
    local offset = os.time() - os.time(os.date('!*t') --[[@as osdateparam]])
    seconds = utc + offset
  else
    return ''
  end
  local age = math.max(0, os.time() - seconds)
  if age < 60 then
    return ('%ds'):format(age)
  elseif age < 3600 then
    return ('%dm'):format(age / 60)
  elseif age < 86400 then
    return ('%dh'):format(age / 3600)
  end
  return ('%dd'):format(age / 86400)
end

local COST_PARTS = {
  { key = 'input', label = 'in' },
  { key = 'cachedInput', label = 'cache read' },
  { key = 'cacheWrite', label = 'cache write' },
  { key = 'output', label = 'out' },
}

--- The cost's total and parts in whole cents, the parts rounded (largest remainder) so that they
--- add up to the total as shown: the daemon's rule too (ctxd/sessions/pricing.py `cents`).
---@param cost ctxd.Cost
---@return integer total
---@return integer[] parts in COST_PARTS order
function M.cost_cents(cost)
  local total = math.floor((cost.total or 0) * 100 + 0.5)
  local exact, parts, left = {}, {}, total
  for i, p in ipairs(COST_PARTS) do
    exact[i] = math.max(0, (cost[p.key] or 0) * 100)
    parts[i] = math.floor(exact[i])
    left = left - parts[i]
  end
  local order = { 1, 2, 3, 4 }
  table.sort(order, function(a, b)
    local ra, rb = exact[a] - parts[a], exact[b] - parts[b]
    if ra ~= rb then
      return ra > rb
    end
    return a < b
  end)
  for _, i in ipairs(order) do
    if left <= 0 then
      break
    end
    parts[i] = parts[i] + 1
    left = left - 1
  end
  return total, parts
end

--- `$5.32 = in $0.00 + cache read $3.90 + cache write $0.78 + out $0.64`, or why there is no
--- price; nil when the daemon reports no cost.
---@param cost ctxd.Cost?
---@param model string? named when the cost names no unpriced model
---@return string?
function M.cost_text(cost, model)
  if type(cost) ~= 'table' or type(cost.total) ~= 'number' then
    return nil
  end
  if not cost.priced then
    return 'n/a (no price for ' .. table.concat(cost.unpricedModels or { model or 'this model' }, ', ') .. ')'
  end
  local total, parts = M.cost_cents(cost)
  local listed = {}
  for i, p in ipairs(COST_PARTS) do
    table.insert(listed, ('%s $%.2f'):format(p.label, parts[i] / 100))
  end
  return ('$%.2f = %s'):format(total / 100, table.concat(listed, ' + '))
end

--- A `format_item` for the `:Ctxd threads` picker: one aligned row per thread (source, fill,
--- tokens, title, age), the first item being "follow the most recently active".
---@param workspace string
---@param list ctxd.ThreadInfo[]
---@param current string
---@return fun(item: table): string
function M.thread_formatter(workspace, list, current)
  local threads = require('ctxd.threads')
  local rows, widths = {}, { 0, 0, 0, 0 }
  for _, info in ipairs(list) do
    -- A protocol-1 daemon lists no usage: the gauge may know it.
    local usage = type(info.usage) == 'table' and info.usage
      or status.get({ workspace = workspace, thread = info.thread })
      or {}
    local title = type(info.title) == 'string' and info.title ~= '' and info.title or info.thread
    local row = {
      threads.label(workspace, info.thread),
      usage.percent and ('%d%%'):format(math.floor(usage.percent + 0.5)) or '',
      usage.usedTokens and ('%s/%s'):format(status.format_tokens(usage.usedTokens), status.format_tokens(usage.contextWindow or 0)) or '',
      title,
    }
    for i = 1, 4 do
      widths[i] = math.max(widths[i], vim.fn.strdisplaywidth(row[i]))
    end
    widths[4] = math.min(widths[4], M.MAX_NAME + 8)
    rows[info.thread] = { row = row, info = info }
  end
  return function(item)
    if item.follow then
      return 'Follow the most recently active thread' .. (list[1] and (' (now ' .. M.thread_name(workspace, list[1].thread) .. ')') or '')
    end
    local entry = rows[item.thread]
    local row = entry.row
    local text = ('%s %s  %s  %s  %s'):format(
      item.thread == current and '●' or ' ',
      M.fit(row[1], widths[1]),
      (' '):rep(widths[2] - vim.fn.strdisplaywidth(row[2])) .. row[2],
      (' '):rep(widths[3] - vim.fn.strdisplaywidth(row[3])) .. row[3],
      M.fit(row[4], widths[4])
    )
    local age = ago(entry.info.lastActivity or entry.info.updatedAt)
    if age ~= '' then
      text = text .. '  ' .. age
    end
    if type(entry.info.cost) == 'table' and entry.info.cost.priced then
      text = text .. ('  $%.2f'):format(M.cost_cents(entry.info.cost) / 100)
    end
    if entry.info.readOnly then
      text = text .. '  (read-only)'
    end
    return (text:gsub('%s+$', ''))
  end
end

--- Fill the quickfix list with the files changed since snapshot `id` (from `ctxd/ghost/diff`).
--- In that list <CR> opens Neovim's diff of the entry against the snapshot.
---@param workspace string
---@param id string
---@param files { path: string, status: string, binary: boolean? }[]
function M.set_diff_quickfix(workspace, id, files)
  local root = vim.uri_to_fname(workspace)
  local items = {}
  for _, f in ipairs(files) do
    table.insert(items, {
      filename = vim.fs.joinpath(root, f.path),
      lnum = 1,
      text = f.status .. (f.binary and ' (binary)' or ''),
      user_data = { ctxd_diff = { id = id, path = f.path, status = f.status, binary = f.binary == true } },
    })
  end
  vim.fn.setqflist({}, ' ', { title = ('ctxd diff %s'):format(id:sub(1, 10)), items = items })
  M.last_diff = { workspace = workspace, id = id, files = files }
  vim.api.nvim_create_autocmd('FileType', {
    group = vim.api.nvim_create_augroup('ctxd_diff_quickfix', { clear = true }),
    pattern = 'qf',
    callback = function(ev)
      M.map_quickfix(ev.buf)
    end,
  })
  for _, win in ipairs(vim.api.nvim_list_wins()) do
    local buf = vim.api.nvim_win_get_buf(win)
    if vim.bo[buf].filetype == 'qf' then
      M.map_quickfix(buf)
    end
  end
end

--- <CR> in the quickfix window: on a ctxd diff entry, open the diff; otherwise what <CR> does.
---@param buf integer
function M.map_quickfix(buf)
  vim.keymap.set('n', '<CR>', function()
    local item = vim.fn.getqflist({ items = 0, idx = vim.fn.line('.') }).items[1]
    local data = item and type(item.user_data) == 'table' and item.user_data.ctxd_diff
    if data and M.last_diff then
      M.open_file_diff({ workspace = M.last_diff.workspace }, data.id, data.path)
    else
      vim.cmd.normal({ args = { vim.keycode('<CR>') }, bang = true })
    end
  end, { buffer = buf, desc = 'ctxd: open the diff against the snapshot' })
end

--- Open Neovim's diff of `path` against snapshot `id` in a new tab: the snapshot's text
--- (`before` from `ctxd/ghost/diff`) on the left, read-only; the working file on the right.
---@param target ctxd.Target
---@param id string
---@param path string workspace-relative
---@param cb fun(err: any, tab: integer?)?
function M.open_file_diff(target, id, path, cb)
  cb = cb or function() end
  require('ctxd.client').request('ctxd/ghost/diff', { id = id, path = path }, function(err, r)
    local file = not err and type(r) == 'table' and (r.files or {})[1] or nil
    local problem = err and require('ctxd.client').format_error(err)
      or not file and ('%s has not changed since snapshot %s'):format(path, id:sub(1, 10))
      or file.binary and ('%s is a binary file: no diff'):format(path)
      or nil
    if problem then
      require('ctxd.notify').say('diff failed: ' .. problem, vim.log.levels.WARN)
      cb(problem)
      return
    end
    local root = vim.uri_to_fname(target.workspace)
    local function text_lines(text)
      if type(text) ~= 'string' or text == '' then
        return {}
      end
      return vim.split((text:gsub('\n$', '')), '\n', { plain = true })
    end
    vim.cmd.tabnew()
    local tab = vim.api.nvim_get_current_tabpage()
    if file.status == 'deleted' then
      local gone = vim.api.nvim_get_current_buf()
      vim.bo[gone].buftype = 'nofile'
      vim.bo[gone].bufhidden = 'wipe'
      vim.api.nvim_buf_set_name(gone, ('ctxd://deleted/%s'):format(path))
    else
      vim.cmd.edit(vim.fn.fnameescape(vim.fs.joinpath(root, path)))
    end
    vim.cmd.diffthis()
    vim.cmd('leftabove vnew')
    local before = vim.api.nvim_get_current_buf()
    vim.bo[before].buftype = 'nofile'
    vim.bo[before].bufhidden = 'wipe'
    vim.bo[before].swapfile = false
    vim.api.nvim_buf_set_lines(before, 0, -1, false, text_lines(file.before))
    vim.api.nvim_buf_set_name(before, ('ctxd://snapshot/%s/%s'):format(id:sub(1, 10), path))
    vim.bo[before].filetype = vim.filetype.match({ filename = path }) or ''
    vim.bo[before].modifiable = false
    vim.cmd.diffthis()
    cb(nil, tab)
  end, target)
end

return M
