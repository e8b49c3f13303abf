---@mod ctxd.trust Whether a workspace is trusted, for `initializationOptions.ctxd.trusted`.
---
--- A workspace's `.ctxd.toml` is written by whoever wrote the repository; the daemon takes the
--- settings in it that reach outside the workspace (`llm.*`, `state_dir`, `sources.*`, ...) only
--- from a trusted workspace (PROTOCOL.md "Trust"). The verdict is the user's: the `trusted` option
--- when set, otherwise Neovim's own trust database (`:trust`, |vim.secure|), read without prompting.

local M = {}

--- The workspace settings file whose trust decides.
M.FILE = '.ctxd.toml'

--- Neovim's trust database: full path -> sha256 of the trusted contents, `directory`, or `!`.
---@return table<string, string>
local function trust_db()
  local db = {}
  local file = io.open(vim.fs.joinpath(vim.fn.stdpath('state'), 'trust'), 'r')
  if not file then
    return db
  end
  for line in file:lines() do
    local hash, path = line:match('^(%S+) (.+)$')
    if hash then
      db[path] = hash
    end
  end
  file:close()
  return db
end

--- Why `root` is (not) trusted, by the trust database: the root folder allowed with
--- `vim.secure.read()`, or its `.ctxd.toml` allowed with `:trust` (and unchanged since).
---@param root string
---@return boolean trusted
---@return string reason
function M.from_database(root)
  local db = trust_db()
  local dir = vim.uv.fs_realpath(root) or root
  if db[dir] == 'directory' then
    return true, ('%s is trusted (:trust)'):format(dir)
  end
  local file = vim.fs.joinpath(dir, M.FILE)
  local real = vim.uv.fs_realpath(file)
  if not real then
    return false, ('%s has no %s, and the folder is not in the trust database'):format(dir, M.FILE)
  end
  local hash = db[real]
  if hash == '!' then
    return false, ('%s is denied in the trust database'):format(real)
  end
  if not hash then
    return false, ('%s is not in the trust database (:trust it to allow it)'):format(real)
  end
  local handle = io.open(real, 'rb')
  local contents = handle and handle:read('*a') or nil
  if handle then
    handle:close()
  end
  if contents and vim.fn.sha256(contents) == hash then
    return true, ('%s is trusted (:trust)'):format(real)
  end
  return false, ('%s changed since it was trusted (:trust it again)'):format(real)
end

--- The verdict sent to the daemon for the workspace at `root`.
---@param root string?
---@return boolean trusted
---@return string reason
function M.verdict(root)
  local option = require('ctxd.config').options.trusted
  if type(option) == 'boolean' then
    return option, ('the `trusted` option is %s'):format(tostring(option))
  end
  if not root then
    return false, 'no workspace folder'
  end
  if type(option) == 'function' then
    local ok, value = pcall(option, root)
    if not ok then
      return false, ('the `trusted` function failed: %s'):format(value)
    end
    return value == true, ('the `trusted` function returned %s'):format(tostring(value))
  end
  return M.from_database(root)
end

---@param root string?
---@return boolean
function M.is_trusted(root)
  return (M.verdict(root))
end

return M
