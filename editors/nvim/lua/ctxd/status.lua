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

---@type table<string, ctxd.UsageSnapshot> keyed by `workspace .. '\n' .. thread`
local snapshots = {}
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
  local threads = require('ctxd.threads')
  if snapshot.thread ~= threads.current(snapshot.workspace) and not threads.is_pinned(snapshot.workspace) then
    require('ctxd.lsp').follow_latest(snapshot.workspace, snapshot.thread)
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
  if snapshots[key(workspace, thread)] == nil then
    snapshots[key(workspace, thread)] = vim.tbl_extend('force', usage, { workspace = workspace, thread = thread })
    vim.cmd.redrawstatus({ bang = true })
  end
end

--- Workspaces whose daemon is not running, and the word the gauge shows for it.
---@type table<string, string>
local down = {}

--- Mark `workspace`'s daemon as not running (`why`: `stopped`, `not running`), or running (nil).
---@param workspace string
---@param why string?
function M.set_down(workspace, why)
  down[workspace] = why
  vim.cmd.redrawstatus({ bang = true })
end

--- Why the daemon of the buffer's workspace is not running, if it is marked so.
---@param target ctxd.Target?
---@return string?
local function down_for(target)
  if next(down) == nil then
    return nil
  end
  if target and target.workspace then
    return down[target.workspace]
  end
  local bufnr = target and target.bufnr or vim.api.nvim_get_current_buf()
  local name = vim.api.nvim_buf_get_name(bufnr)
  if name == '' then
    return nil
  end
  local path = vim.fs.normalize(vim.fn.fnamemodify(name, ':p'))
  for workspace, why in pairs(down) do
    local dir = vim.fs.normalize(vim.uri_to_fname(workspace))
    if path == dir or vim.startswith(path, dir .. '/') then
      return why
    end
  end
end

--- Forget the snapshots of a workspace (its client stopped).
---@param workspace string
function M.forget(workspace)
  for k in pairs(snapshots) do
    if vim.startswith(k, workspace .. '\n') then
      snapshots[k] = nil
    end
  end
  require('ctxd.threads').forget(workspace)
  vim.cmd.redrawstatus({ bang = true })
end

--- The latest snapshot for a target (see `ctxd.client.resolve`), or nil. A buffer outside every
--- workspace folder has none.
---@param target ctxd.Target?
---@return ctxd.UsageSnapshot?
function M.get(target)
  target = target or {}
  local workspace = target.workspace
  if not workspace then
    local client, ws = require('ctxd.client').resolve(vim.tbl_extend('force', target, { strict = true }))
    if not client then
      return nil
    end
    workspace = ws
  end
  return snapshots[key(workspace, target.thread or require('ctxd.threads').current(workspace))]
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

--- The gauge's parts, or nil when no usage is known for the target.
---@param target ctxd.Target?
---@return { text: string, tier: string, group: string, snapshot: ctxd.UsageSnapshot }?
function M.gauge(target)
  local snapshot = M.get(target)
  if not snapshot then
    local why = down_for(target)
    if why then
      return { text = ('%s %s'):format(config.options.statusline.prefix, why), tier = 'compact', group = M.tier_groups.compact, down = true }
    end
    return nil
  end
  local text = ('%s %d%% · %s/%s'):format(
    require('ctxd.threads').label(snapshot.workspace, snapshot.thread),
    math.floor((tonumber(snapshot.percent) or 0) + 0.5),
    M.format_tokens(snapshot.usedTokens),
    M.format_tokens(snapshot.contextWindow)
  )
  local tier = M.tier_groups[snapshot.tier] and snapshot.tier or 'ok'
  return { text = text, tier = tier, group = M.tier_groups[tier], snapshot = snapshot }
end

--- The statusline item: `ctx 38% · 48.2k/128k` (`Codex 43% · 55k/128k` for a followed Codex session), wrapped in the tier's highlight group unless
--- `opts.highlight` (default `statusline.highlight`) is false.
---@param opts (ctxd.Target|{highlight: boolean?})?
---@return string
function M.statusline(opts)
  opts = opts or {}
  local gauge = M.gauge(opts)
  if not gauge then
    return config.options.statusline.empty
  end
  local highlight = opts.highlight
  if highlight == nil then
    highlight = config.options.statusline.highlight
  end
  local text = gauge.text:gsub('%%', '%%%%')
  if not highlight then
    return text
  end
  if not highlights_defined then
    M.define_highlights()
  end
  return ('%%#%s#%s%%*'):format(gauge.group, text)
end

return M
