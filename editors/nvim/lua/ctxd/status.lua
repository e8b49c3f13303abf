---@mod ctxd.status The usage gauge: the latest UsageSnapshot per workspace and thread.
---
--- Fed only by the daemon's `ctxd/usageChanged` notifications (plus one `ctxd/usage` when a
--- client attaches, so a reopened editor shows the stored ledger): nothing polls.

local config = require('ctxd.config')

local M = {}

---@class ctxd.UsageSnapshot
---@field usedTokens integer
---@field contextWindow integer
---@field percent number
---@field autoCompactLimit integer
---@field tier 'ok'|'warn'|'compact'
---@field source string
---@field historyVersion integer
---@field workspace string?
---@field thread string?

--- Highlight group for each tier.
M.tier_groups = { ok = 'CtxdOk', warn = 'CtxdWarn', compact = 'CtxdCompact' }

--- The group of figures kept from before the daemon restarted, until it sends new ones.
M.STALE_GROUP = 'CtxdStale'

---@type table<string, ctxd.UsageSnapshot> keyed by `workspace .. '\n' .. thread`
local snapshots = {}
--- Keys of snapshots kept from a daemon that stopped: shown dimmed until new figures arrive.
---@type table<string, boolean>
local stale = {}
---@type table<integer, fun(snapshot: ctxd.UsageSnapshot)>
local subscribers = {}
local next_subscriber = 0

---@param workspace string
---@param thread string
local function key(workspace, thread)
  return workspace .. '\n' .. thread
end

local highlights_defined = false

--- Define the highlight groups (as `default` links, so a colorscheme may override them) and keep
--- them across `:colorscheme`.
function M.define_highlights()
  local links = {
    CtxdOk = 'DiagnosticOk',
    CtxdWarn = 'DiagnosticWarn',
    CtxdCompact = 'DiagnosticError',
    CtxdStale = 'Comment',
  }
  for group, target in pairs(links) do
    vim.api.nvim_set_hl(0, group, { link = target, default = true })
  end
  if not highlights_defined then
    highlights_defined = true
    vim.api.nvim_create_autocmd('ColorScheme', {
      group = vim.api.nvim_create_augroup('ctxd_highlights', { clear = true }),
      callback = function()
        M.define_highlights()
        require('ctxd.ui.view').define_highlights()
      end,
    })
  end
end

--- Store a snapshot and tell everyone who cares. Another thread's change does not move the gauge
--- by itself: the daemon also reports threads it re-reads from disk (sessions a year old), so the
--- workspace's threads are read again and the most recently active one is followed.
---@param snapshot ctxd.UsageSnapshot must carry `workspace` and `thread`
function M.update(snapshot)
  snapshots[key(snapshot.workspace, snapshot.thread)] = snapshot
  stale[key(snapshot.workspace, snapshot.thread)] = nil
  local threads = require('ctxd.threads')
  if snapshot.thread ~= threads.current(snapshot.workspace) and not threads.is_pinned(snapshot.workspace) then
    require('ctxd.lsp').follow_latest(snapshot.workspace, snapshot.thread)
  elseif not M.window_known(snapshot.workspace, snapshot.thread) then
    -- A new agent session: its window is ctxd's default until the daemon knows the model, which
    -- `ctxd/threads` says (a usage notification does not).
    require('ctxd.lsp').reload_threads(snapshot.workspace, snapshot.thread)
  end
  for _, fn in pairs(subscribers) do
    local ok, err = pcall(fn, snapshot)
    if not ok then
      require('ctxd.notify').say(('a usage subscriber failed: %s'):format(err), vim.log.levels.WARN)
    end
  end
  vim.api.nvim_exec_autocmds('User', { pattern = 'CtxdUsageChanged', modeline = false, data = snapshot })
  vim.cmd.redrawstatus({ bang = true })
end

--- Handler for the `ctxd/usageChanged` notification.
---@param params ctxd.UsageSnapshot
function M.on_usage_changed(_, params)
  if type(params) == 'table' and params.workspace and params.thread then
    M.update(params)
  end
end

--- Seed the gauge of a thread from `ctxd/usage` or `ctxd/threads`, unless a notification was
--- faster. Not activity: it does not move the gauge to that thread.
---@param workspace string
---@param thread string
---@param usage ctxd.UsageSnapshot
function M.seed(workspace, thread, usage)
  local k = key(workspace, thread)
  if snapshots[k] == nil or stale[k] then
    snapshots[k] = vim.tbl_extend('force', usage, { workspace = workspace, thread = thread })
    stale[k] = nil
    vim.cmd.redrawstatus({ bang = true })
  end
end

--- Whether the gauge may show the thread's window: the editor's own threads always; a followed
--- agent session once the daemon knows its model (before that the window is ctxd's default, not
--- the session's: a new Codex session would read `/128k`, then `/258.4k`).
---@param workspace string
---@param thread string
---@return boolean
function M.window_known(workspace, thread)
  local threads = require('ctxd.threads')
  if threads.source(workspace, thread) == 'client' then
    return true
  end
  local info = threads.info(workspace, thread)
  return info ~= nil and type(info.model) == 'string' and info.model ~= ''
end

--- Workspaces whose daemon is not running, and the word the gauge shows for it.
---@type table<string, string>
local down = {}

--- Mark `workspace`'s daemon as not running (`why`: `stopped`, `not running`, `not installed`),
--- or running (nil).
---@param workspace string
---@param why string?
function M.set_down(workspace, why)
  down[workspace] = why
  vim.cmd.redrawstatus({ bang = true })
end

--- The innermost of `workspaces` (folder URIs) that holds the target's buffer, or nil.
---@param workspaces table<string, any> keyed by URI
---@param target ctxd.Target?
---@return string?
local function holding(workspaces, target)
  local bufnr = target and target.bufnr or vim.api.nvim_get_current_buf()
  if not vim.api.nvim_buf_is_valid(bufnr) or vim.bo[bufnr].buftype ~= '' then
    return nil
  end
  local name = vim.api.nvim_buf_get_name(bufnr)
  if name == '' or name:match('^%a[%w+.-]*://') then
    return nil
  end
  local path = vim.fs.normalize(vim.fn.fnamemodify(name, ':p'))
  local best ---@type string?
  for workspace in pairs(workspaces) do
    local dir = vim.fs.normalize(vim.uri_to_fname(workspace)):gsub('/+$', '')
    if (path == dir or vim.startswith(path, dir .. '/')) and (not best or #workspace > #best) then
      best = workspace
    end
  end
  return best
end

--- Why the daemon of the target's workspace is not running, if it is marked so.
---@param target ctxd.Target?
---@return string?
function M.down(target)
  if next(down) == nil then
    return nil
  end
  if target and target.workspace then
    return down[target.workspace]
  end
  local workspace = holding(down, target)
  return workspace and down[workspace] or nil
end

--- Why some workspace's daemon is not running, if any is marked so (for a buffer of no workspace).
---@return string?
function M.any_down()
  local _, why = next(down)
  return why
end

--- Forget the snapshots of a workspace (its client stopped for good).
---@param workspace string
function M.forget(workspace)
  for k in pairs(snapshots) do
    if vim.startswith(k, workspace .. '\n') then
      snapshots[k] = nil
      stale[k] = nil
    end
  end
  require('ctxd.threads').forget(workspace)
  vim.cmd.redrawstatus({ bang = true })
end

--- The daemon of a workspace stopped and is being started again: its figures stay, dimmed,
--- until the new daemon sends its own (the gauge does not go blank on every restart).
---@param workspace string
function M.mark_stale(workspace)
  for k in pairs(snapshots) do
    if vim.startswith(k, workspace .. '\n') then
      stale[k] = true
    end
  end
  vim.cmd.redrawstatus({ bang = true })
end

--- Workspaces that hold figures (the gauge's while no client runs, during a restart).
---@return table<string, boolean>
local function known_workspaces()
  local out = {}
  for k in pairs(snapshots) do
    out[k:match('^(.-)\n')] = true
  end
  return out
end

--- The workspace and thread of a target whose figures the gauge shows, or nil. Without a running
--- client (a restart), the workspace whose kept figures hold the buffer.
---@param target ctxd.Target?
---@return string? workspace
---@return string? thread
local function locate(target)
  target = target or {}
  local workspace = target.workspace
  if not workspace then
    local client, ws = require('ctxd.client').resolve(vim.tbl_extend('force', target, { strict = true }))
    if client then
      workspace = ws
    elseif #require('ctxd.client').clients() == 0 then
      workspace = holding(known_workspaces(), target)
    end
  end
  if not workspace then
    return nil, nil
  end
  return workspace, target.thread or require('ctxd.threads').current(workspace)
end

--- The latest snapshot for a target (see `ctxd.client.resolve`), or nil. A buffer outside every
--- workspace folder has none. The second result is true for figures kept from a stopped daemon.
---@param target ctxd.Target?
---@return ctxd.UsageSnapshot?
---@return boolean? stale
function M.get(target)
  local workspace, thread = locate(target)
  if not workspace or not thread then
    return nil
  end
  local k = key(workspace, thread)
  return snapshots[k], stale[k] == true
end

--- Call `fn(snapshot)` on every usage change of any thread; returns a function that unsubscribes.
---@param fn fun(snapshot: ctxd.UsageSnapshot)
---@return fun()
function M.subscribe(fn)
  next_subscriber = next_subscriber + 1
  local id = next_subscriber
  subscribers[id] = fn
  return function()
    subscribers[id] = nil
  end
end

--- `48213` -> `48.2k`, `128000` -> `128k`, `950` -> `950`, `1048576` -> `1M`.
---@param n number
---@return string
function M.format_tokens(n)
  n = tonumber(n) or 0
  local function short(value, suffix)
    local text = ('%.1f'):format(value):gsub('%.0$', '')
    return text .. suffix
  end
  if n >= 999950 then
    return short(n / 1e6, 'M')
  elseif n >= 1000 then
    return short(n / 1e3, 'k')
  end
  return tostring(math.floor(n + 0.5))
end

---@class ctxd.Gauge
---@field text string `ctx 38% · 48.2k/128k`, without highlight items
---@field tier string
---@field group string highlight group: the tier's, `CtxdStale` for kept figures
---@field icon string? the followed agent's icon (`ctxd.agents`)
---@field snapshot ctxd.UsageSnapshot?
---@field stale boolean? figures from before the daemon restarted
---@field down boolean? the daemon is not running (`text` says why)

--- The gauge's parts, or nil when no usage is known for the target.
---@param target ctxd.Target?
---@return ctxd.Gauge?
function M.gauge(target)
  local why = M.down(target)
  if why then
    return { text = ('%s %s'):format(config.options.statusline.prefix, why), tier = 'compact', group = M.tier_groups.compact, down = true }
  end
  local snapshot, is_stale = M.get(target)
  if not snapshot then
    return nil
  end
  local threads = require('ctxd.threads')
  local label = threads.label(snapshot.workspace, snapshot.thread)
  local text
  if M.window_known(snapshot.workspace, snapshot.thread) then
    text = ('%s %d%% · %s/%s'):format(
      label,
      math.floor((tonumber(snapshot.percent) or 0) + 0.5),
      M.format_tokens(snapshot.usedTokens),
      M.format_tokens(snapshot.contextWindow)
    )
  else
    text = ('%s %s'):format(label, M.format_tokens(snapshot.usedTokens))
  end
  local tier = M.tier_groups[snapshot.tier] and snapshot.tier or 'ok'
  return {
    text = text,
    tier = tier,
    group = is_stale and M.STALE_GROUP or M.tier_groups[tier],
    icon = threads.icon(snapshot.workspace, snapshot.thread),
    snapshot = snapshot,
    stale = is_stale or nil,
  }
end

--- A click on the gauge opens its menu (`:Ctxd menu`).
M.CLICK = "%@v:lua.require'ctxd.menu'.click@"

--- The statusline item: `ctx 38% · 48.2k/128k` (`⌬ Codex 43% · 55k/128k` for a followed Codex
--- session), wrapped in the tier's highlight group unless `opts.highlight` (default
--- `statusline.highlight`) is false, and in a click label that opens the menu unless
--- `opts.click` (default `statusline.click`) is false.
---@param opts (ctxd.Target|{highlight: boolean?, click: boolean?})?
---@return string
function M.statusline(opts)
  opts = opts or {}
  local gauge = M.gauge(opts)
  if not gauge then
    return config.options.statusline.empty
  end
  local highlight, click = opts.highlight, opts.click
  if highlight == nil then
    highlight = config.options.statusline.highlight
  end
  if click == nil then
    click = config.options.statusline.click
  end
  local text = gauge.text
  if gauge.icon and config.options.statusline.icons then
    text = gauge.icon .. ' ' .. text
  end
  text = text:gsub('%%', '%%%%')
  if highlight then
    if not highlights_defined then
      M.define_highlights()
    end
    text = ('%%#%s#%s%%*'):format(gauge.group, text)
  end
  return click and (M.CLICK .. text .. '%X') or text
end

return M
