---@mod ctxd.ui.view What the user reads: lines and highlights made from daemon results.
---
--- Pure functions of the results (and of what the gauge and the thread list already hold): they
--- send nothing and open no window. `ctxd.ui.window` puts their lines on screen; `ctxd.ui.model`
--- asks the daemon.

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

--- The usage float's widest text, in cells (with its border and margins, about 90 columns), as
--- lualine's and fidget's windows keep to a readable measure on a wide screen.
M.FLOAT_MAX_WIDTH = 86
--- Screens narrower than this get the compact layout (shorter wording).
M.COMPACT_BELOW = 100

---@class ctxd.FloatLayout
---@field width integer cells of text per row (notes are wrapped to it)
---@field height integer rows the float may take (detail rows give way first)
---@field compact boolean shorter wording, for a narrow screen

--- The usage float's layout on a screen of `columns` x `lines` (border, margins, the command line
--- and a status line left out).
---@param columns integer
---@param lines integer
---@return ctxd.FloatLayout
function M.float_layout(columns, lines)
  return {
    width = math.max(30, math.min(M.FLOAT_MAX_WIDTH, columns - 6)),
    height = math.max(6, lines - 5),
    compact = columns < M.COMPACT_BELOW,
  }
end

--- `text` in lines of at most `width` cells, broken between words (a word longer than a line is
--- cut); lines after the first start with `indent` spaces.
---@param text string
---@param width integer
---@param indent integer?
---@return string[]
function M.wrap(text, width, indent)
  if vim.fn.strdisplaywidth(text) <= width then
    return { text }
  end
  indent = indent or 0
  local lead = text:match('^%s*')
  local out, line = {}, lead
  local pad = (' '):rep(indent)
  local function push()
    table.insert(out, (line:gsub('%s+$', '')))
  end
  for word in text:sub(#lead + 1):gmatch('%S+') do
    local sep = line:match('%S') and ' ' or ''
    if vim.fn.strdisplaywidth(line .. sep .. word) <= width then
      line = line .. sep .. word
    else
      if line:match('%S') then
        push()
        line = pad
      end
      -- A word wider than a whole line: cut it to what fits, as often as needed.
      while vim.fn.strdisplaywidth(line .. word) > width and vim.fn.strchars(word) > 1 do
        local room = math.max(1, width - vim.fn.strdisplaywidth(line))
        local chars = room
        while chars > 1 and vim.fn.strdisplaywidth(vim.fn.strcharpart(word, 0, chars)) > room do
          chars = chars - 1
        end
        line = line .. vim.fn.strcharpart(word, 0, chars)
        word = vim.fn.strcharpart(word, chars)
        push()
        line = pad
      end
      line = line .. word
    end
  end
  if line:match('%S') or #out == 0 then
    push()
  end
  return out
end

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

--- How many detail rows each category may show so that `fixed` rows and the categories'
--- details fit `height` rows: `max_details` when they fit, fewer down to 0 (with the `… N more`
--- row each cut category adds).
---@param categories table[] the categories shown, each with `details`
---@param max_details integer
---@param room integer rows left for details
---@return integer
local function details_that_fit(categories, max_details, room)
  for k = max_details, 1, -1 do
    local rows = 0
    for _, c in ipairs(categories) do
      local n = #(c.details or {})
      rows = rows + math.min(n, k) + (n > k and 1 or 0)
    end
    if rows <= room then
      return k
    end
  end
  return 0
end

--- `pieces` (a wrapped note) cut to `limit` lines, the last ending with `…` at a word boundary
--- within `width` cells.
---@param pieces string[]
---@param limit integer
---@param width integer
---@return string[]
local function shorten(pieces, limit, width)
  if #pieces <= limit then
    return pieces
  end
  local out = vim.list_slice(pieces, 1, limit)
  local last = out[limit]
  while vim.fn.strdisplaywidth(last .. ' …') > width and last:find('%S%s+%S') do
    last = last:gsub('%s+%S+%s*$', '')
  end
  out[limit] = last .. ' …'
  return out
end

--- Lines of the breakdown float, each at most `layout.width` cells: notes are wrapped between
--- words and the table fits the width. When the rows are more than `layout.height`, they give
--- way in this order: detail rows (down to none), the blank line, the title line (the window's
--- title names it too), then each long note down to 3, 2 and 1 lines (ending with `…`).
--- Without a layout, the widest one.
---@param breakdown table the `ctxd/usage` result
---@param layout ctxd.FloatLayout?
---@param now number? Unix seconds the cache's lifetime is counted from (default: the clock)
---@return ctxd.Line[]
function M.render_breakdown(breakdown, layout, now)
  layout = layout or { width = M.FLOAT_MAX_WIDTH, height = math.huge, compact = false }
  local text_width = layout.width
  local width = math.max(10, math.min(config.options.float.bar_width, text_width - 2))
  local usage = breakdown.usage or {}
  local window = breakdown.contextWindow or usage.contextWindow or 0
  -- Estimated: no total from the model API yet (with messages, the breakdown is then 'actual' but estimated).
  local estimated = breakdown.mode == 'estimated' or usage.source == 'estimate'
  local lines = {} ---@type ctxd.Line[]
  local function add(text, marks)
    table.insert(lines, { text = text, marks = marks or {} })
  end
  --- The header's parts before the table: each a wrapped text; `long` ones may be shortened.
  local blocks = {} ---@type { pieces: string[], marks: table?, long: boolean? }[]
  local function note(text, marks, long)
    table.insert(blocks, { pieces = M.wrap(text, text_width, 4), marks = marks, long = long })
  end

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
  table.insert(blocks, { pieces = { bar }, marks = marks })
  local used = usage.usedTokens or 0
  note(('  %s%s/%s tokens (%s)  %s'):format(
    estimated and '~' or '',
    status.format_tokens(used),
    status.format_tokens(window),
    percent(used, window),
    type(breakdown.model) == 'string' and breakdown.model or 'unknown model'
  ))
  local tier = status.tier_groups[usage.tier] and usage.tier or 'ok'
  local how = estimated and (layout.compact and 'estimated' or 'estimated (no usage reported by the model yet)') or 'actual'
  note(('  tier %s · auto-compact at %s · %s'):format(tier, status.format_tokens(usage.autoCompactLimit or 0), how),
    { { col = 2, end_col = 2 + #('tier ' .. tier), group = status.tier_groups[tier] } })
  local cost = M.cost_text(breakdown.cost, breakdown.model)
  if cost then
    note('  cost ' .. cost)
  end
  local cache = M.cache_text(breakdown.cache, now)
  if cache then
    note('  ' .. cache)
  end
  local compaction = M.compaction_cost_text(breakdown.cache)
  if compaction then
    note('  ' .. compaction, nil, true)
  end
  if type(breakdown.limitSource) == 'string' then
    note("  the agent's own figures: " .. breakdown.limitSource, nil, true)
  end
  local inferred = type(breakdown.inferred) == 'table' and breakdown.inferred or {}
  local inferred_names = vim.tbl_keys(inferred)
  table.sort(inferred_names)
  for _, name in ipairs(inferred_names) do
    note(('  %s is inferred: %s'):format((by_name[name] or { label = name }).label, tostring(inferred[name])), nil, true)
  end
  local empty_note = #cats == 0 and M.wrap('  (the daemon sent no breakdown by category)', text_width, 4) or {}

  -- The categories shown: an empty overhead category (no MCP tools, say) is noise; the space
  -- rows always show.
  local shown = vim.tbl_filter(function(c)
    local info = by_name[c.name] or { glyph = '█' }
    return not ((c.tokens or 0) == 0 and info.glyph == '█')
  end, cats)

  -- What gives way when the rows do not fit (see above).
  local title, spacer, limit = true, true, nil ---@type boolean, boolean, integer?
  local function header_rows()
    local n = (title and 1 or 0) + (spacer and 1 or 0) + #empty_note
    for _, blk in ipairs(blocks) do
      n = n + ((blk.long and limit) and math.min(#blk.pieces, limit) or #blk.pieces)
    end
    return n
  end
  local steps = {
    function()
      spacer = false
    end,
    function()
      title = false
    end,
    function()
      limit = 3
    end,
    function()
      limit = 2
    end,
    function()
      limit = 1
    end,
  }
  for _, give_way in ipairs(steps) do
    if header_rows() + #shown <= layout.height then
      break
    end
    give_way()
  end
  local max_details = details_that_fit(shown, config.options.float.max_details, layout.height - header_rows() - #shown)

  if title then
    add('Context usage', { { col = 0, end_col = #'Context usage', group = 'CtxdTitle' } })
  end
  for _, blk in ipairs(blocks) do
    local pieces = (blk.long and limit) and shorten(blk.pieces, limit, text_width) or blk.pieces
    for i, piece in ipairs(pieces) do
      add(piece, i == 1 and blk.marks or nil)
    end
  end
  if spacer then
    add('')
  end
  for _, piece in ipairs(empty_note) do
    add(piece)
  end

  -- One column of names, wide enough for every category and detail shown (a long MCP tool name
  -- is cut with `…`), so the token counts line up; the rows fit the text width.
  local label_width = 0
  for _, c in ipairs(shown) do
    local info = by_name[c.name]
    label_width = math.max(label_width, vim.fn.strdisplaywidth(info and info.label or c.name))
    for k, d in ipairs(c.details or {}) do
      if k <= max_details then
        label_width = math.max(label_width, vim.fn.strdisplaywidth(M.detail_name(d.name, c.name)) + 2)
      end
    end
  end
  label_width = math.max(8, math.min(label_width, M.MAX_NAME, text_width - 21))
  for _, c in ipairs(shown) do
    local info = by_name[c.name] or { label = c.name, glyph = '█', group = 'CtxdMessages' }
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
        if max_details > 0 then
          add(('      … %d more'):format(#details - max_details))
        end
        break
      end
      add(('      %s  %7s'):format(M.fit(M.detail_name(d.name, c.name), label_width - 2), status.format_tokens(d.tokens or 0)))
    end
  end
  return lines
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
    local text = M.plain(item_text(item)):gsub('\n+', ' ')
    if #text > 160 then
      text = text:sub(1, 157) .. '...'
    end
    local marker = item.archived and ' (archived)' or ''
    table.insert(lines, ('%4d  %-22s %s%s'):format(i, item.type, text, marker))
  end
  return lines
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

--- Seconds since the epoch of an ISO time (`2026-11-26T23:54:24.5+00:00`, `...Z`; no offset is
--- UTC) or of a Unix time in seconds or milliseconds; nil for anything else.
---@param when any
---@return number?
function M.unix_time(when)
  if type(when) == 'number' then
    return when > 1e11 and when / 1000 or when
  end
  if type(when) ~= 'string' then
    return nil
  end
  local y, mo, d, h, mi, sec, rest = when:match('^(%d+)-(%d+)-(%d+)[T ](%d+):(%d+):(%d+)(.*)$')
  if not y then
    return nil
  end
  local local_time = os.time({ year = y, month = mo, day = d, hour = h, min = mi, sec = sec, isdst = false })
  -- os.time reads the table as local time: correct by this machine's offset from UTC.
  local here = os.time() - os.time(os.date('!*t') --[[@as osdateparam]])
  local seconds = local_time + here
  local sign, oh, om = rest:match('([+-])(%d%d):?(%d%d)$')
  if sign then
    seconds = seconds - (sign == '+' and 1 or -1) * (tonumber(oh) * 3600 + tonumber(om) * 60)
  end
  return seconds
end

--- How long ago an ISO time or a Unix time was: `5s`, `3m`, `2h`, `4d`.
---@param when any
---@return string
local function ago(when)
  local seconds = M.unix_time(when)
  if not seconds then
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

--- `3 min`, `45 s`, `2 h 5 min`: a span in words.
---@param seconds number
---@return string
local function span(seconds)
  seconds = math.max(0, math.floor(seconds + 0.5))
  if seconds < 60 then
    return ('%d s'):format(seconds)
  elseif seconds < 3600 then
    return ('%d min'):format(math.floor(seconds / 60 + 0.5))
  end
  local minutes = math.floor(seconds / 60 + 0.5)
  local h, m = math.floor(minutes / 60), minutes % 60
  return m == 0 and ('%d h'):format(h) or ('%d h %d min'):format(h, m)
end

---@param dollars any
---@return string?
local function dollars_text(dollars)
  if type(dollars) ~= 'number' then
    return nil
  end
  return dollars < 0.01 and dollars > 0 and '<$0.01' or ('$%.2f'):format(dollars)
end

--- The prompt cache in plain words (a `CacheState`): `cache warm for 3 min`, or `cache cold: the
--- next turn re-writes 45k tokens ($0.17)` (also once a warm cache's `expiresAt` has passed); nil
--- when the state is unknown or absent. `now` is Unix seconds (default: the clock).
---@param cache ctxd.CacheState?
---@param now number?
---@return string?
function M.cache_text(cache, now)
  if type(cache) ~= 'table' then
    return nil
  end
  now = now or os.time()
  local state = cache.state
  local expires = M.unix_time(cache.expiresAt)
  if state == 'warm' and expires and expires <= now then
    state = 'cold' -- it was warm when the daemon answered; it has expired since
  end
  if state == 'warm' then
    return expires and ('cache warm for %s'):format(span(expires - now)) or 'cache warm'
  elseif state == 'cold' then
    local tokens = tonumber(cache.rewriteTokens) or 0
    if tokens <= 0 then
      return 'cache cold'
    end
    local cost = dollars_text(cache.rewriteCost)
    return ('cache cold: the next turn re-writes %s tokens%s'):format(
      status.format_tokens(tokens), cost and (' (%s)'):format(cost) or '')
  end
  return nil
end

--- What the thread's compactions did to the cache (`CacheState.compactions`): one line for the
--- latest, with how many there were: `last compaction re-wrote 30k tokens ($0.11), saves 12k
--- tokens ($0.04) a turn (2 compactions)`; nil when there is none.
---@param cache ctxd.CacheState?
---@return string?
function M.compaction_cost_text(cache)
  local list = type(cache) == 'table' and type(cache.compactions) == 'table' and cache.compactions or {}
  local last = list[#list]
  if type(last) ~= 'table' then
    return nil
  end
  local wrote = dollars_text(last.cacheWriteCost)
  local saved = dollars_text(last.savedCostPerTurn)
  return ('last compaction re-wrote %s tokens%s, saves %s tokens%s a turn%s'):format(
    status.format_tokens(last.cacheWriteTokens or 0), wrote and (' (%s)'):format(wrote) or '',
    status.format_tokens(last.savedTokensPerTurn or 0), saved and (' (%s)'):format(saved) or '',
    #list > 1 and (' (%d compactions)'):format(#list) or '')
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

--- What a stored item is, in words, by its `type` (a message by its role).
local kind_words = {
  function_call = 'tool call',
  custom_tool_call = 'tool call',
  local_shell_call = 'shell call',
  function_call_output = 'tool output',
  custom_tool_call_output = 'tool output',
  local_shell_call_output = 'shell output',
  reasoning = 'reasoning',
  compaction = 'compaction summary',
  ghost_snapshot = 'snapshot',
}

--- `user message`, `tool output`, ... for a recall hit or a stored item.
---@param kind string?
---@param role string?
---@return string
function M.kind_text(kind, role)
  if kind == 'message' then
    return type(role) == 'string' and (role .. ' message') or 'message'
  end
  return kind_words[kind] or tostring(kind or 'item')
end

--- `text` without terminal escapes (a tool's coloured output keeps `ESC[2m` and the like) and
--- without other control characters; line breaks and tabs stay.
---@param text string
---@return string
function M.plain(text)
  text = text:gsub('\27%[[0-?]*[ -/]*[@-~]', '') -- CSI: colours, cursor moves
  text = text:gsub('\27%][^\7\27]*\7', ''):gsub('\27%][^\7\27]*\27\\', '') -- OSC: titles, links
  text = text:gsub('\27[@-Z\\-_]', '') -- the other two-byte escapes
  text = text:gsub('\r\n', '\n'):gsub('[%z\1-\8\11\12\13\14-\31\127]', '')
  return text
end

--- The quickfix text of one `ctxd/recall` hit: its kind, its turn, whether a compaction (or
--- another history operation) took it out of the active history, and its snippet.
---@param hit ctxd.RecallHit
---@return string
function M.recall_text(hit)
  local parts = { M.kind_text(hit.type, hit.role) }
  if type(hit.turn) == 'table' and hit.turn.index then
    table.insert(parts, ('turn %d'):format(hit.turn.index))
  end
  if hit.archived then
    table.insert(parts, 'no longer in context')
  end
  local snippet = M.plain(tostring(hit.snippet or '')):gsub('%s+', ' ')
  return ('%s: %s'):format(table.concat(parts, ' · '), snippet)
end

--- Where a hit is, shown in the quickfix list's file column: `ctx #12`, `Codex #340`; a hit in
--- another thread than `current` (a search of the workspace) also names its thread:
--- `Codex "fix the flaky test" #340`.
---@param workspace string
---@param hit { thread: string, seq: integer }
---@param current string? the thread searched from
---@return string
function M.recall_place(workspace, hit, current)
  local label = require('ctxd.threads').label(workspace, hit.thread)
  if current and hit.thread ~= current then
    label = vim.trim(M.fit(M.thread_name(workspace, hit.thread), 40))
  end
  return ('%s #%d'):format(label, hit.seq or 0)
end

--- Every text a stored item holds, whole: a message's parts, a call's arguments, an output.
---@param item table
---@return string
function M.item_body(item)
  local function texts(content)
    if type(content) == 'string' then
      return content
    end
    local out = {}
    for _, part in ipairs(type(content) == 'table' and content or {}) do
      if type(part) == 'table' then
        local text = part.text or part.refusal
        if type(text) == 'string' then
          table.insert(out, text)
        elseif part.type == 'input_image' then
          table.insert(out, '[image]')
        end
      end
    end
    return table.concat(out, '\n\n')
  end
  local t = item.type
  if t == 'message' then
    return texts(item.content)
  elseif t == 'function_call' or t == 'custom_tool_call' then
    return ('%s %s'):format(item.name or '?', tostring(item.arguments or item.input or ''))
  elseif t == 'function_call_output' or t == 'custom_tool_call_output' or t == 'local_shell_call_output' then
    return texts(item.output)
  elseif t == 'reasoning' then
    local summary, content = texts(item.summary), texts(item.content)
    return summary ~= '' and content ~= '' and (summary .. '\n\n' .. content) or (summary .. content)
  end
  local ok, json = pcall(vim.json.encode, item)
  return ok and json or tostring(t)
end

--- What took an archived item out of the active history, in words.
local taken_by = {
  compaction = 'replaced by a compaction',
  rollback = 'dropped by a rollback',
  restore = 'dropped by a restore of the conversation',
}

--- Lines of the read-only buffer that shows one stored item (`ctxd/item`): a title, whether a
--- compaction replaced it (`operation`: the kind of the history operation that archived it, when
--- known), then its whole text.
---@param result ctxd.ItemResult
---@param place string where it is: `ctx #12`
---@param operation string? `compaction`, `rollback`, `restore`
---@return ctxd.Line[]
function M.render_item(result, place, operation)
  local item = type(result.item) == 'table' and result.item or {}
  local title = ('ctxd item %s · %s'):format(place, M.kind_text(item.type, item.role))
  local state
  if result.archived then
    state = ('%s: the model no longer sees it; ctxd keeps it'):format(taken_by[operation] or 'out of the active history')
  else
    state = 'in the active history: the model still sees it'
  end
  local lines = {
    { text = title, marks = { { col = 0, end_col = #title, group = 'CtxdTitle' } } },
    { text = state, marks = { { col = 0, end_col = #state, group = result.archived and 'CtxdWarn' or 'CtxdOk' } } },
    { text = '', marks = {} },
  }
  for _, text in ipairs(vim.split(M.plain(M.item_body(item)), '\n', { plain = true })) do
    table.insert(lines, { text = text, marks = {} })
  end
  return lines
end

--- The one line said when an item opens: `item ctx #12: replaced by a compaction`.
---@param place string
---@param archived boolean
---@param operation string?
---@return string
function M.item_said(place, archived, operation)
  if not archived then
    return ('item %s: in the active history'):format(place)
  end
  return ('item %s: %s'):format(place, taken_by[operation] or 'out of the active history')
end

return M
