---@mod ctxd.hooks `:Ctxd hooks install|uninstall|status`: ctxd's hooks inside the agents, from the editor.
---
--- Runs the daemon's own command line (`ctxd hooks ...`, PROTOCOL.md "The agents' own way in"),
--- never the agents' files itself: install and uninstall show `--dry-run`'s diff first, in a
--- scratch buffer, and change nothing until the user says so; status shows what `ctxd hooks
--- status` says, in a buffer, with one line that sums it up. Nothing blocks the editor.
---
--- With no agent named, install goes into the agents on this machine (`ctxd hooks install` with no
--- `--agent`: those whose own folder exists); an agent named goes in whether it is here or not;
--- `all` is every agent.

local M = {}

M.actions = { 'install', 'uninstall', 'status' }
M.scopes = { 'user', 'project' }

--- The agents ctxd hooks, for when no daemon has said yet (by their names, as `ctxd hooks` lists them).
M.FALLBACK_AGENTS = { 'claude', 'codex', 'gemini', 'opencode', 'qwen' }

--- The agent ids `:Ctxd hooks` takes (besides `all`): the daemon's (its `initialize` answer,
--- `capabilities.experimental.ctxd.agents`), so an agent a newer ctxd adds needs no change here;
--- before a daemon has answered, the five ctxd knows. In `ctxd hooks`'s order: by name.
---@return string[]
function M.agents()
  local names = require('ctxd.agents').names
  local ids = vim.tbl_keys(names)
  if #ids == 0 then
    return vim.deepcopy(M.FALLBACK_AGENTS)
  end
  table.sort(ids, function(a, b)
    return names[a] < names[b]
  end)
  return ids
end

--- `Claude Code`, `Claude Code and Codex`, `Claude Code, Codex and Qwen Code`.
---@param ids string[]
---@return string
local function in_words(ids)
  local words = vim.tbl_map(function(id)
    return require('ctxd.agents').get(id).name
  end, ids)
  if #words <= 1 then
    return words[1] or ''
  end
  return table.concat(words, ', ', 1, #words - 1) .. ' and ' .. words[#words]
end

--- How long a `ctxd hooks` run may take before it is called failed.
M.TIMEOUT_MS = 30000

---@param msg string
---@param level integer?
local function say(msg, level)
  require('ctxd.notify').say(msg, level)
end

--- `{ action, agent, scope }` from `:Ctxd hooks` arguments (any order after the action), or nil
--- and what is wrong. `agent` nil: none named (install: the agents on this machine; uninstall
--- and status: every agent).
---@param args string[]
---@return { action: string, agent: string?, scope: string }?
---@return string? problem
function M.parse_args(args)
  local parsed = { action = args[1] or 'status', agent = nil, scope = 'user' }
  if not vim.tbl_contains(M.actions, parsed.action) then
    return nil, ('hooks takes %s, got %q'):format(table.concat(M.actions, ', '), parsed.action)
  end
  local agents = vim.list_extend(M.agents(), { 'all' })
  for i = 2, #args do
    local word = args[i]
    if vim.tbl_contains(agents, word) then
      parsed.agent = word
    elseif vim.tbl_contains(M.scopes, word) then
      parsed.scope = word
    else
      return nil, ('unknown hooks argument %q (an agent: %s; a scope: %s)'):format(
        word, table.concat(agents, ', '), table.concat(M.scopes, ', '))
    end
  end
  return parsed, nil
end

--- Completion after `:Ctxd hooks`: the action, then agents and scopes.
---@param arglead string
---@param words string[] the words typed after `:Ctxd hooks` (the one being typed included)
---@return string[]
function M.complete(arglead, words)
  local choices = M.actions
  if #words > 1 or (#words == 1 and arglead == '') then
    choices = vim.list_extend(vim.list_extend(M.agents(), { 'all' }), M.scopes)
  end
  return vim.tbl_filter(function(word)
    return vim.startswith(word, arglead)
  end, choices)
end

--- The folder `ctxd hooks` runs in: its project scope is the workspace of the current buffer.
---@return string
local function project_dir()
  local _, workspace = require('ctxd.client').resolve({ strict = true })
  if type(workspace) == 'string' and workspace:match('^file:') then
    return vim.uri_to_fname(workspace)
  end
  local markers = require('ctxd.config').options.root_markers or { '.git' }
  local name = vim.api.nvim_buf_get_name(0)
  return (name ~= '' and vim.fs.root(0, markers)) or vim.fn.getcwd()
end

--- Run `ctxd hooks {args}` with the daemon's command and environment; `cb(result)` on the main
--- loop with `{code, stdout, stderr}` (code -1 and a reason when it could not run).
---@param args string[]
---@param cwd string?
---@param cb fun(result: { code: integer, stdout: string, stderr: string })
function M.run(args, cwd, cb)
  local cmd, env = require('ctxd.client').daemon_command()
  if not cmd then
    cb({ code = -1, stdout = '', stderr = 'the daemon command is a function: run `ctxd hooks` in a terminal' })
    return
  end
  if vim.fn.executable(cmd[1]) ~= 1 then
    cb({ code = -1, stdout = '', stderr = ('the daemon is not installed (%s not found)'):format(cmd[1]) })
    return
  end
  local argv = vim.list_extend(vim.deepcopy(cmd), vim.list_extend({ 'hooks' }, args))
  local ok, err = pcall(vim.system, argv, {
    cwd = cwd or project_dir(),
    env = env,
    text = true,
    timeout = M.TIMEOUT_MS,
  }, vim.schedule_wrap(function(out)
    cb({ code = out.code, stdout = out.stdout or '', stderr = out.stderr or '' })
  end))
  if not ok then
    cb({ code = -1, stdout = '', stderr = tostring(err) })
  end
end

--- The last non-empty line of a failed run's output, for a message.
---@param result { code: integer, stdout: string, stderr: string }
---@return string
local function failure(result)
  local lines = vim.split(vim.trim(result.stderr ~= '' and result.stderr or result.stdout), '\n', { plain = true })
  return lines[#lines] ~= '' and lines[#lines] or ('exit code %d'):format(result.code)
end

---@class ctxd.HooksState
---@field agent string `claude`, `codex`, ... (the line's first word)
---@field scope string `user` or `project`
---@field installed boolean any of ctxd's hooks is there
---@field trusted boolean? false when the agent has not trusted them yet (Codex); nil when it has no such step
---@field present boolean? whether the agent is on this machine (the line's last clause); nil from a ctxd that does not say
---@field text string the line as `ctxd hooks status` printed it

--- `ctxd hooks status`'s lines, read: `claude user: hooks UserPromptSubmit, ...; status line yes; ...;
--- on this machine yes`.
---@param text string
---@return ctxd.HooksState[]
function M.parse_status(text)
  local states = {}
  for _, line in ipairs(vim.split(text, '\n', { plain = true })) do
    local body, here = line:match('^(.-); on this machine (%a+)[^;]*$')
    local present = nil ---@type boolean?
    if here == 'yes' or here == 'no' then
      present = here == 'yes'
    else
      body = line
    end
    local agent, scope, rest = body:match('^(%S+) (%a+): hooks (.*)$')
    if agent then
      local installed = not vim.startswith(rest, 'none')
      local trusted = nil ---@type boolean?
      -- Codex's trust, in parentheses after the events (the words may hold a `;` of their own).
      local words = rest:match('^[^(;]*%((.-)%);') or rest:match('^[^(;]*%((.-)%)%s*$')
      if installed and words then
        trusted = words == 'trusted'
      end
      table.insert(states, { agent = agent, scope = scope, installed = installed, trusted = trusted, present = present, text = line })
    end
  end
  return states
end

--- The agents on this machine, in `ctxd hooks status`'s order: what install with no agent goes into.
--- An agent whose lines do not say (an older ctxd) counts as here.
---@param states ctxd.HooksState[]
---@return string[]
function M.present(states)
  local ids, absent = {}, {}
  for _, s in ipairs(states) do
    absent[s.agent] = absent[s.agent] or s.present == false
    if not vim.tbl_contains(ids, s.agent) then
      table.insert(ids, s.agent)
    end
  end
  return vim.tbl_filter(function(id)
    return not absent[id]
  end, ids)
end

--- A dry run's output: the lines before the diff (`skipped Gemini CLI: not on this machine ...`,
--- when no agent was named) and the diff itself (empty when there is nothing to change).
---@param stdout string
---@return string[] notes
---@return string diff
function M.split_dry_run(stdout)
  local notes, diff = {}, {}
  for _, line in ipairs(vim.split(stdout:gsub('\n$', ''), '\n', { plain = true })) do
    if #diff > 0 or vim.startswith(line, '--- ') then
      table.insert(diff, line)
    elseif line ~= '' and line ~= 'nothing to change' then
      table.insert(notes, line)
    end
  end
  return notes, table.concat(diff, '\n')
end

--- One line for the states: `Claude Code installed (user); Codex installed (user), not trusted yet`.
---@param states ctxd.HooksState[]
---@return string
function M.summary(states)
  local agents = require('ctxd.agents')
  local order, by_agent = {}, {}
  for _, s in ipairs(states) do
    if not by_agent[s.agent] then
      by_agent[s.agent] = {}
      table.insert(order, s.agent)
    end
    table.insert(by_agent[s.agent], s)
  end
  local parts = {}
  for _, agent in ipairs(order) do
    local scopes, untrusted = {}, false
    for _, s in ipairs(by_agent[agent]) do
      if s.installed then
        table.insert(scopes, s.scope)
        untrusted = untrusted or s.trusted == false
      end
    end
    local name = agents.get(agent).name
    if #scopes == 0 then
      table.insert(parts, name .. ' not installed')
    else
      table.insert(parts, ('%s installed (%s)%s'):format(name, table.concat(scopes, ', '),
        untrusted and ", not trusted yet: review them in the agent's /hooks" or ''))
    end
  end
  if #parts == 0 then
    return 'ctxd hooks status said nothing'
  end
  return table.concat(parts, '; ')
end

--- Show `lines` in a read-only scratch split; returns the buffer.
---@param lines string[]
---@param filetype string
---@return integer buf
local function show(lines, filetype)
  local window = require('ctxd.ui.window')
  return window.open_split(vim.tbl_map(function(text)
    return { text = text, marks = {} }
  end, lines), filetype)
end

--- `:Ctxd hooks status`: what is installed where, and whether the agents trust it.
---@param opts { agent: string? }
---@param cb fun(states: ctxd.HooksState[]?)?
function M.status(opts, cb)
  cb = cb or function() end
  M.run(opts.agent and { 'status', '--agent', opts.agent } or { 'status' }, nil, function(result)
    if result.code ~= 0 then
      say('hooks status failed: ' .. failure(result), vim.log.levels.ERROR)
      cb(nil)
      return
    end
    local states = M.parse_status(result.stdout)
    local lines = vim.split(vim.trim(result.stdout), '\n', { plain = true })
    table.insert(lines, 1, 'ctxd hooks status')
    show(lines, 'ctxd-hooks')
    local any = vim.iter(states):any(function(s)
      return s.installed
    end)
    say('hooks: ' .. M.summary(states) .. (any and '' or '; :Ctxd hooks install adds them'))
    cb(states)
  end)
end

--- The dry run, the diff in a scratch buffer, the question, then the change. `who`: the agents
--- it goes into, in words.
---@param opts { action: string, agent: string?, scope: string }
---@param who string
---@param cwd string
---@param cb fun(done: boolean)
local function preview_then_change(opts, who, cwd, cb)
  local args = { opts.action, '--scope', opts.scope }
  if opts.agent then
    vim.list_extend(args, { '--agent', opts.agent })
  end
  M.run(vim.list_extend(vim.deepcopy(args), { '--dry-run' }), cwd, function(preview)
    if preview.code ~= 0 then
      say(('hooks %s failed: %s'):format(opts.action, failure(preview)), vim.log.levels.ERROR)
      cb(false)
      return
    end
    local _, diff = M.split_dry_run(preview.stdout)
    if vim.trim(diff) == '' then
      say(('hooks %s: nothing to change (%s, %s scope)'):format(opts.action, who, opts.scope))
      cb(false)
      return
    end
    local buf = show(vim.split(diff, '\n', { plain = true }), 'diff')
    local verb = opts.action == 'install' and 'Install' or 'Uninstall'
    vim.ui.select({ verb, 'Cancel' }, {
      prompt = ("%s ctxd's hooks as this diff shows (%s, %s scope)?"):format(verb, who, opts.scope),
      kind = 'ctxd.hooks',
    }, function(choice)
      if choice ~= verb then
        say(('hooks %s cancelled: nothing was written'):format(opts.action))
        cb(false)
        return
      end
      M.run(args, cwd, function(result)
        if result.code ~= 0 then
          say(('hooks %s failed: %s'):format(opts.action, failure(result)), vim.log.levels.ERROR)
          cb(false)
          return
        end
        local written, removed = 0, 0
        for _, line in ipairs(vim.split(result.stdout, '\n', { plain = true })) do
          written = written + (vim.startswith(line, 'wrote ') and 1 or 0)
          removed = removed + (vim.startswith(line, 'removed ') and 1 or 0)
        end
        if vim.api.nvim_buf_is_valid(buf) then
          vim.api.nvim_buf_delete(buf, { force = true })
        end
        say(('hooks %s: %d file%s written, %d removed; :Ctxd hooks status says whether the agents trust them'):format(
          opts.action == 'install' and 'installed' or 'uninstalled', written, written == 1 and '' or 's', removed))
        cb(true)
      end)
    end)
  end)
end

--- `:Ctxd hooks install` / `uninstall`: the diff first, in a scratch buffer; then, if the user
--- says so, the change. Install with no agent named asks `ctxd hooks status` first which agents
--- are on this machine, to name them (and to stop, saying so, when there are none).
--- `cb(done)`: true once changed, false when cancelled or failed.
---@param opts { action: string, agent: string?, scope: string }
---@param cb fun(done: boolean)?
function M.change(opts, cb)
  cb = cb or function() end
  local cwd = project_dir()
  if opts.agent or opts.action ~= 'install' then
    local who = (opts.agent == nil or opts.agent == 'all') and 'every agent' or in_words({ opts.agent })
    preview_then_change(opts, who, cwd, cb)
    return
  end
  M.run({ 'status' }, cwd, function(result)
    if result.code ~= 0 then
      say('hooks install failed: ' .. failure(result), vim.log.levels.ERROR)
      cb(false)
      return
    end
    local here = M.present(M.parse_status(result.stdout))
    if #here == 0 then
      say(('hooks install: no agent found on this machine (none has its folder yet), nothing written; '
        .. 'name one to install into it anyway: :Ctxd hooks install {agent} (%s)'):format(
        table.concat(M.agents(), ', ')), vim.log.levels.WARN)
      cb(false)
      return
    end
    preview_then_change(opts, in_words(here), cwd, cb)
  end)
end

--- `:Ctxd hooks {args}`.
---@param args string[]
function M.command(args)
  local opts, problem = M.parse_args(args)
  if not opts then
    say(assert(problem), vim.log.levels.ERROR)
    return
  end
  if opts.action == 'status' then
    M.status(opts)
  else
    M.change(opts)
  end
end

return M
