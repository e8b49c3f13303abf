-- Workspace trust end to end: a `.ctxd.toml` that sets a key only a trusted workspace may set is
-- ignored (the daemon says so, once, as a warning; :checkhealth shows the fix to type) until the
-- user runs :trust on it, after which a restart sends `trusted = true` and the key is used.
local t = require('harness')
local h = require('helpers')

--- `:checkhealth ctxd` as text.
local function health()
  vim.cmd.buffer(vim.fn.bufnr(vim.fs.joinpath(h.workspace, 'README.md')))
  vim.cmd('silent checkhealth ctxd')
  local text = table.concat(h.lines(0), '\n')
  vim.cmd('bwipeout!')
  return text
end

local function restart(old)
  vim.cmd('Ctxd restart')
  return t.wait_for(function()
    local c = vim.lsp.get_clients({ name = 'ctxd', bufnr = vim.fn.bufnr(vim.fs.joinpath(h.workspace, 'README.md')) })[1]
    return c and c.initialized and c.id ~= old.id and c or nil
  end, 'the restarted client', 20000)
end

t.describe('workspace trust', function()
  t.before_each(function()
    h.capture_notify()
  end)

  t.it('an untrusted .ctxd.toml key is ignored with one warning and the fix in :checkhealth', function()
    h.write('.ctxd.toml', 'model = "gpt-5"\n[llm]\nbase_url = "http://127.0.0.1:9/v1"\n')
    local client = h.start()
    local warning = h.wait_message("setting 'llm.base_url' ignored", 20000)
    t.eq(vim.log.levels.WARN, warning.level)
    t.eq(1, #vim.tbl_filter(function(m)
      return m.full:find('llm.base_url', 1, true) ~= nil
    end, h.messages), vim.inspect(h.messages))
    t.eq(false, h.request('ctxd/status', {}).trusted)
    local text = health()
    t.contains('workspace not trusted', text)
    t.contains("llm.base_url", text)
    t.contains('if you trust this repository: open its .ctxd.toml, :trust, then :Ctxd restart', text)
    t.eq(nil, text:find('no settings problems', 1, true))
    -- :trust, then a restart: the daemon is told the workspace is trusted and takes the key.
    vim.cmd.edit(vim.fs.joinpath(h.workspace, '.ctxd.toml'))
    t.truthy(vim.secure.trust({ action = 'allow', bufnr = 0 }))
    vim.cmd.buffer(vim.fn.bufnr(vim.fs.joinpath(h.workspace, 'README.md')))
    h.messages = {}
    client = restart(client)
    t.eq(true, h.request('ctxd/status', {}).trusted)
    text = health()
    t.contains('workspace trusted (', text)
    t.contains('no settings problems', text)
    t.eq(nil, text:find('llm.base_url', 1, true), text)
    t.truthy(client)
  end)
end)
