---@mod ctxd.notify Messages: one short line per action, never a "Press ENTER" prompt.
---
--- A message wider than the command line, or several in one go, makes Neovim stop and ask for
--- ENTER (and the keys typed meanwhile are lost). Every message of the plugin goes through `say`,
--- which keeps it to one line that fits; the daemon's own messages, which come in bursts (an
--- untrusted repository's settings, one per key), are gathered into one line, and kept whole
--- for `:checkhealth ctxd`.
---
--- Every message is said from the main loop, never from where it was raised: an error-level
--- message given inside an autocommand (a FileType one, say) is turned into an exception by the
--- code that fired it (Neovim's filetype detection), with a stack trace and a "Press ENTER".

local M = {}

--- The daemon's recent messages and the plugin's cut ones, whole, newest last (`:checkhealth ctxd`).
---@type { msg: string, level: integer }[]
M.recent = {}
local KEEP = 50

--- How many cells a message may take without a prompt.
---@return integer
function M.width()
  local space = tonumber(vim.v.echospace) or 0
  if space <= 0 then
    space = vim.o.columns - 12
  end
  return math.max(20, space)
end

--- `text` on one line, cut with `…` to fit `width` cells.
---@param text string
---@param width integer?
---@return string
function M.one_line(text, width)
  width = width or M.width()
  local line = vim.trim(tostring(text):gsub('%s*[\r\n]+%s*', ' '))
  if vim.fn.strdisplaywidth(line) <= width then
    return line
  end
  -- A character takes at least one cell: start at `width` characters and take off until it fits.
  local cut = math.min(vim.fn.strchars(line), width - 1)
  while cut > 0 and vim.fn.strdisplaywidth(vim.fn.strcharpart(line, 0, cut)) > width - 1 do
    cut = cut - 1
  end
  return vim.fn.strcharpart(line, 0, cut) .. '…'
end

--- The whole text of the message being said (what `:checkhealth ctxd` and `:messages` callers
--- may want when the line had to be cut).
---@type string?
M.last_full = nil

--- Say `msg` (prefixed `ctxd: `) in one line that fits, from the main loop (see above); a line
--- that had to be cut is kept whole in `recent` (`:checkhealth ctxd`).
---@param msg string
---@param level integer?
function M.say(msg, level)
  level = level or vim.log.levels.INFO
  local text = tostring(msg)
  vim.schedule(function()
    local full = 'ctxd: ' .. text
    local line = M.one_line(full)
    if line ~= full then
      M.keep(text, level)
    end
    M.last_full = full
    vim.notify(line, level)
    M.last_full = nil
  end)
end

--- Echo `text` in the command line without history (progress), from the main loop.
---@param text string
function M.echo(text)
  vim.schedule(function()
    vim.api.nvim_echo({ { text == '' and '' or M.one_line(text) } }, false, {})
  end)
end

--- Keep a message whole for `:checkhealth ctxd`.
---@param msg string
---@param level integer
function M.keep(msg, level)
  table.insert(M.recent, { msg = msg, level = level })
  if #M.recent > KEEP then
    table.remove(M.recent, 1)
  end
end

local burst = {} ---@type { msg: string, level: integer }[]
local scheduled = false
--- Messages that arrive within this many milliseconds are one burst.
M.BURST_MS = 150

--- A `window/showMessage` from the daemon: kept whole in `recent`, said as part of its burst.
---@param msg string without the `ctxd: ` prefix
---@param level integer
function M.daemon(msg, level)
  M.keep(msg, level)
  table.insert(burst, { msg = msg, level = level })
  if scheduled then
    return
  end
  scheduled = true
  vim.defer_fn(function()
    scheduled = false
    local got = burst
    burst = {}
    if #got == 1 then
      M.say(got[1].msg, got[1].level)
      return
    end
    local worst = vim.log.levels.DEBUG
    for _, m in ipairs(got) do
      worst = math.max(worst, m.level)
    end
    M.say(('%d messages from the daemon; :checkhealth ctxd shows them'):format(#got), worst)
  end, M.BURST_MS)
end

return M
