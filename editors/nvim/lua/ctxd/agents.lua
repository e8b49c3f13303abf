---@mod ctxd.agents Who a thread belongs to: each agent's name, icon and own commands, by `source`.
---
--- `ctxd/threads` names where each thread comes from (`source`: `client`, `codex`, `claude`, and
--- the agents added since). An agent's name is the daemon's (its `initialize` answer,
--- `capabilities.experimental.ctxd.agents`, from the agent's module): the table here has none of
--- its own for an agent, only the gauge's word, the icon and the agent's commands, so a new agent
--- needs no code: one the table does not know is shown by the daemon's name with the fallback
--- icon. `setup({ agents = { qwen = { icon = 'Q' } } })` changes or adds entries.

local M = {}

---@class ctxd.Agent
---@field label string? The gauge's word (`Codex`); nil for the editor's own threads (`statusline.prefix`).
---@field name string The agent's name in sentences (`Claude Code`): the daemon's for an agent.
---@field icon string One cell, shown before the label in pickers (and the gauge, `statusline.icons`).
---@field rewind string? The agent's own way to take turns back (`/rewind`).
---@field compact string? The agent's own compaction command (`/compact`).

--- The agents ctxd follows. Icons are single-cell symbols every font has (no Nerd Font needed). A
--- name only for the sources that are no agent of the daemon's (the editor's own threads, ACP).
---@type table<string, table>
M.known = {
  client = { name = 'ctxd', icon = '⎔' },
  codex = { label = 'Codex', icon = '⌬', rewind = 'Esc Esc (backtrack)', compact = '/compact' },
  claude = { label = 'Claude', icon = '✻', rewind = '/rewind', compact = '/compact' },
  qwen = { label = 'Qwen', icon = '⬢', rewind = '/rewind', compact = '/compress' },
  gemini = { label = 'Gemini', icon = '✦', rewind = '/rewind', compact = '/compress' },
  opencode = { label = 'OpenCode', icon = '⧈', rewind = '/undo', compact = '/compact' },
  acp = { label = 'ACP', name = 'ACP agent', icon = '⇄' },
}

--- The agents' names the daemon last gave (`set_names`), by source.
---@type table<string, string>
M.names = {}

--- Takes the agents' names from the daemon's `initialize` answer (`capabilities.experimental.ctxd.agents`,
--- `{source = name}`); anything else there is ignored. Called after every daemon start.
---@param agents any
function M.set_names(agents)
  local names = {}
  if type(agents) == 'table' then
    for source, name in pairs(agents) do
      if type(source) == 'string' and type(name) == 'string' and vim.trim(name) ~= '' and #name <= 100 then
        names[source] = vim.trim(name)
      end
    end
  end
  M.names = names
end

--- The icon of an agent the table does not know.
M.FALLBACK_ICON = '◉'

--- `source` made into a name: `my-agent` -> `My-agent`.
---@param source string
---@return string
local function titled(source)
  return (source:gsub('^%l', string.upper))
end

--- What the plugin says of the agent behind `source` (a thread's `source`; nil: the editor's own).
---@param source string?
---@return ctxd.Agent
function M.get(source)
  source = type(source) == 'string' and source ~= '' and source or 'client'
  local overrides = require('ctxd.config').options.agents or {}
  local known = M.known[source]
  local given = type(overrides[source]) == 'table' and overrides[source] or {}
  local word = titled(source)
  local base = known and vim.deepcopy(known) or { label = word, icon = M.FALLBACK_ICON }
  -- The daemon's name; before it gave one (or from a daemon that gives none), the gauge's word.
  base.name = M.names[source] or base.name or base.label or word
  return vim.tbl_extend('force', base, given)
end

--- The agent's own ways to change its conversation, in words: `its /rewind or /compact`.
---@param agent ctxd.Agent
---@return string
function M.own_commands(agent)
  if agent.rewind and agent.compact then
    return ('its %s or %s'):format(agent.rewind, agent.compact)
  end
  return ("%s's own commands"):format(agent.name)
end

--- The one sentence that refuses to change a followed session's conversation, pointing to what
--- works: the agent's own commands, and a restore of the files from a checkpoint.
---@param source string?
---@return string
function M.read_only_sentence(source)
  local agent = M.get(source)
  return ('this %s session is read-only: use %s; files: :Ctxd restore'):format(agent.name, M.own_commands(agent))
end

return M
