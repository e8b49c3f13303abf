-- Snapshots with protocol 2 against the real daemon: :Ctxd diff (quickfix, then Neovim's diff),
-- :Ctxd restore offering only what a preview says can change, :Ctxd undo-restore.
local t = require('harness')
local h = require('helpers')

local client ---@type vim.lsp.Client

--- Answer the next vim.ui.select calls in order: each entry is `fun(items, opts) -> index?`.
---@param answers (fun(items: table[], opts: table): integer?)[]
local function answer_selects(answers)
  local saved = vim.ui.select
  local seen = {}
  vim.ui.select = function(items, opts, on_choice)
    local answer = table.remove(answers, 1)
    table.insert(seen, { prompt = opts.prompt, rows = vim.tbl_map(opts.format_item or tostring, items) })
    local index = answer and answer(items, opts) or nil
    if #answers == 0 then
      vim.ui.select = saved
    end
    on_choice(index and items[index] or nil, index)
  end
  return seen
end

local function commit(message)
  h.git({ 'add', '-A' })
  h.git({ '-c', 'user.name=t', '-c', 'user.email=t@e', 'commit', '-qm', message })
end

t.describe('snapshots (protocol 2)', function()
  t.before_each(function()
    h.capture_notify()
    if not client or client:is_stopped() then
      client = h.start()
    end
    h.fresh_thread()
  end)

  t.it('the daemon has the v2 snapshot methods', function()
    for _, method in ipairs({ 'ctxd/ghost/diff', 'ctxd/ghost/delete' }) do
      t.truthy(require('ctxd.client').supports(client, method), method)
    end
  end)

  --- The window showing `name` in the current tab once its buffer is filled, and its partner.
  local function diff_pair(name, what)
    return t.wait_for(function()
      for _, win in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
        local buf = vim.api.nvim_win_get_buf(win)
        local partner = vim.w[win].ctxd_diff_partner
        if vim.api.nvim_buf_get_name(buf) == name and vim.b[buf].ctxd_diff and partner
            and vim.api.nvim_win_is_valid(partner) then
          return { win = win, buf = buf, partner = partner, other = vim.api.nvim_win_get_buf(partner) }
        end
      end
    end, what)
  end

  t.it(':Ctxd diff lists the changed files; <CR>, :cc and :cnext open each diff; a deleted file shows its text', function()
    h.write('calc.py', 'def add(a, b):\n    return a + b\n')
    h.write('gone.txt', 'this file goes away\n')
    commit('calc')
    local snap = h.request('ctxd/ghost/snapshot', { message = 'before the edit' })
    h.write('calc.py', 'def add(a, b):\n    return a + b + 1\n')
    os.remove(vim.fs.joinpath(h.workspace, 'gone.txt'))
    h.write('new.txt', 'new\n')
    vim.cmd('Ctxd diff ' .. snap.id)
    local qf = t.wait_for(function()
      local list = vim.fn.getqflist({ title = 0, items = 0 })
      return vim.startswith(list.title, 'ctxd diff') and list or nil
    end, 'the quickfix list')
    t.eq('ctxd diff ' .. snap.id:sub(1, 10), qf.title)
    local rows, index = {}, {}
    for i, item in ipairs(qf.items) do
      rows[item.module] = item.text
      index[item.module] = i
      t.eq(('ctxd://diff/%s/%s'):format(snap.id, item.module), vim.api.nvim_buf_get_name(item.bufnr))
    end
    t.eq({ ['calc.py'] = 'modified', ['gone.txt'] = 'deleted', ['new.txt'] = 'added' }, rows)
    t.eq('qf', vim.bo.filetype, 'the quickfix window is open and current')
    -- <CR> on calc.py: the snapshot's text, read-only, beside the working file, in diff mode.
    vim.api.nvim_win_set_cursor(0, { index['calc.py'], 0 })
    vim.api.nvim_feedkeys(vim.keycode('<CR>'), 'x', false)
    local pair = diff_pair(('ctxd://diff/%s/calc.py'):format(snap.id), 'the diff of calc.py')
    t.eq({ 'def add(a, b):', '    return a + b' }, h.lines(pair.buf))
    t.eq(false, vim.bo[pair.buf].modifiable)
    t.eq('python', vim.bo[pair.buf].filetype)
    t.eq(vim.fs.joinpath(h.workspace, 'calc.py'), vim.api.nvim_buf_get_name(pair.other))
    t.eq(true, vim.wo[pair.win].diff and vim.wo[pair.partner].diff)
    local wins = #vim.api.nvim_tabpage_list_wins(0)
    -- :cc on the deleted file: what the snapshot had, against an empty working side, in the same windows.
    vim.cmd('cc ' .. index['gone.txt'])
    local gone = diff_pair(('ctxd://diff/%s/gone.txt'):format(snap.id), 'the diff of gone.txt')
    t.eq({ 'this file goes away' }, h.lines(gone.buf))
    t.eq('ctxd://deleted/gone.txt', vim.api.nvim_buf_get_name(gone.other))
    t.eq({ '' }, h.lines(gone.other))
    t.eq(true, vim.wo[gone.win].diff and vim.wo[gone.partner].diff)
    t.eq(wins, #vim.api.nvim_tabpage_list_wins(0), 'the same two windows')
    -- :cfirst / :cnext walk the list the same way.
    vim.cmd('cfirst')
    local first = qf.items[1].module
    diff_pair(('ctxd://diff/%s/%s'):format(snap.id, first), 'the first entry by :cfirst')
    vim.cmd('cnext')
    diff_pair(('ctxd://diff/%s/%s'):format(snap.id, qf.items[2].module), 'the second entry by :cnext')
    -- :Ctxd diff {id} {path}: the same diff, in a tab of its own.
    local tabs = #vim.api.nvim_list_tabpages()
    local opened
    require('ctxd.ui').open_file_diff({ workspace = h.uri }, snap.id, 'calc.py', function(problem, tab)
      opened = { problem = problem, tab = tab }
    end)
    t.wait_for(function()
      return opened
    end, 'open_file_diff')
    t.eq(nil, opened.problem)
    t.eq(tabs + 1, #vim.api.nvim_list_tabpages())
    t.eq(2, #vim.api.nvim_tabpage_list_wins(0))
    vim.cmd.tabclose()
    vim.cmd('silent! only')
    vim.cmd.cclose()
    vim.cmd.buffer(vim.fn.bufnr(vim.fs.joinpath(h.workspace, 'README.md')))
  end)

  t.it(':Ctxd diff says when nothing changed', function()
    local snap = h.request('ctxd/ghost/snapshot', { message = 'unchanged' })
    vim.cmd('Ctxd diff ' .. snap.id)
    h.wait_message('no changes since snapshot ' .. snap.id:sub(1, 10))
  end)

  t.it(':Ctxd restore offers the files with what a preview says, and :Ctxd undo-restore puts them back', function()
    h.write('calc.py', 'version 1\n')
    h.request('ctxd/record', { items = { h.user('first') } })
    local snap = h.request('ctxd/ghost/snapshot', { message = 'version 1' })
    h.write('calc.py', 'version 2\n')
    h.write('extra.txt', 'made after the snapshot\n')
    local seen = answer_selects({
      function(items)
        for i, item in ipairs(items) do
          if item.id == snap.id then
            return i
          end
        end
      end,
      function()
        return 1 -- files only
      end,
    })
    vim.cmd('Ctxd restore')
    local message = h.wait_message('restored ', 30000)
    t.eq(2, #seen)
    t.contains('version 1  (', seen[1].rows[1] .. seen[1].rows[#seen[1].rows])
    t.matches('version 1 .*· this thread', table.concat(seen[1].rows, '\n'))
    t.eq({ 'Files only (1 file written, 1 removed)', 'Files and conversation (1 file written, 1 removed; the thread back to this snapshot)' }, seen[2].rows)
    t.contains(':Ctxd undo-restore puts the files back', message.full)
    t.eq('version 1\n', h.read('calc.py'))
    t.eq(nil, h.read('extra.txt'))
    vim.cmd('Ctxd undo-restore')
    h.wait_message('undid the restore of ' .. snap.id:sub(1, 10), 30000)
    t.eq('version 2\n', h.read('calc.py'))
    t.eq('made after the snapshot\n', h.read('extra.txt'))
    h.messages = {}
    vim.cmd('Ctxd undo-restore')
    t.eq(vim.log.levels.WARN, h.wait_message('nothing to undo').level)
  end)

  t.it('Files and conversation, then :Ctxd undo: the files and the conversation come back (v3)', function()
    h.write('calc.py', 'version 1\n')
    h.request('ctxd/record', { items = { h.user('first'), h.assistant('one') } })
    local snap = h.request('ctxd/ghost/snapshot', { message = 'conversation point' })
    h.request('ctxd/record', { items = { h.user('second'), h.assistant('two') } })
    h.write('calc.py', 'version 2\n')
    local before = h.request('ctxd/history', {})
    answer_selects({
      function(items)
        for i, item in ipairs(items) do
          if item.id == snap.id then
            return i
          end
        end
      end,
      function()
        return 2 -- files and conversation
      end,
    })
    vim.cmd('Ctxd restore')
    local message = h.wait_message('restored ', 30000)
    t.contains(':Ctxd undo puts the files and the conversation back', message.full)
    t.eq('version 1\n', h.read('calc.py'))
    t.eq(before.total - 2, h.request('ctxd/history', {}).total)
    h.messages = {}
    vim.cmd('Ctxd undo')
    h.wait_message('undid the restore of ' .. snap.id:sub(1, 10), 30000)
    t.eq('version 2\n', h.read('calc.py'))
    t.eq(vim.json.encode(before.items), vim.json.encode(h.request('ctxd/history', {}).items))
    -- Then nothing of this thread is left to undo, and redo brings the restore back.
    h.messages = {}
    vim.cmd('Ctxd undo')
    t.eq(vim.log.levels.WARN, h.wait_message('nothing to undo').level)
    vim.cmd('Ctxd redo')
    h.wait_message('redid the restore of the conversation', 30000)
    t.eq(before.total - 2, h.request('ctxd/history', {}).total)
  end)

  t.it(':Ctxd undo-restore undoes a restore Neovim did not run (or before a restart), from the daemon\'s record', function()
    h.write('calc.py', 'version 1\n')
    local snap = h.request('ctxd/ghost/snapshot', { message = 'v1' })
    h.write('calc.py', 'version 2\n')
    -- Restored by another editor, or by this one before it restarted: nothing of it in memory.
    h.request('ctxd/ghost/restore', { id = snap.id })
    t.eq('version 1\n', h.read('calc.py'))
    for name in pairs(package.loaded) do
      if name == 'ctxd.commands' or name == 'ctxd.timemachine' then
        package.loaded[name] = nil
      end
    end
    local old = client
    vim.cmd('Ctxd restart')
    h.wait_message('restarted', 20000)
    client = t.wait_for(function()
      local c = vim.lsp.get_clients({ name = 'ctxd', bufnr = 0 })[1]
      return c and c.initialized and c.id ~= old.id and c or nil
    end, 'the restarted client', 20000)
    -- A git process holding the index: the undo fails in one line and changes nothing.
    local lock = vim.fs.joinpath(h.workspace, '.git', 'index.lock')
    vim.fn.writefile({}, lock)
    h.messages = {}
    vim.cmd('Ctxd undo-restore')
    local failed = h.wait_message('undo-restore failed', 30000)
    os.remove(lock)
    t.eq(vim.log.levels.ERROR, failed.level)
    t.matches('^ctxd: undo%-restore failed: [^\n]+ %(1002%)$', failed.full)
    t.eq('version 1\n', h.read('calc.py'))
    vim.cmd('Ctxd undo-restore')
    h.wait_message('undid the restore of ' .. snap.id:sub(1, 10), 30000)
    t.eq('version 2\n', h.read('calc.py'))
    h.messages = {}
    vim.cmd('Ctxd undo-restore')
    t.eq(vim.log.levels.WARN, h.wait_message('nothing to undo: the last restore in this workspace was undone already').level)
  end)

  t.it(':Ctxd restore {id} takes the id (4 characters or more); the ids complete', function()
    h.write('calc.py', 'by id\n')
    local snap = h.request('ctxd/ghost/snapshot', { message = 'by id' })
    h.write('calc.py', 'changed since\n')
    local completed = vim.fn.getcompletion('Ctxd restore ', 'cmdline')
    t.eq(snap.id:sub(1, 10), completed[1], 'newest first, as printed: ' .. vim.inspect(completed))
    t.truthy(vim.tbl_contains(vim.fn.getcompletion('Ctxd diff ' .. snap.id:sub(1, 4), 'cmdline'), snap.id:sub(1, 10)))
    local seen = answer_selects({
      function()
        return 1 -- files only
      end,
    })
    vim.cmd('Ctxd restore ' .. snap.id:sub(1, 6))
    h.wait_message('restored ' .. snap.id:sub(1, 10), 30000)
    t.eq(1, #seen, 'no snapshot picker: ' .. vim.inspect(seen))
    t.eq('Restore what?', seen[1].prompt)
    t.eq('by id\n', h.read('calc.py'))
    h.messages = {}
    vim.cmd('Ctxd restore ' .. snap.id:sub(1, 3))
    local short = h.wait_message('restore failed')
    t.contains(('%q is too short for a snapshot id: use 4 or more characters'):format(snap.id:sub(1, 3)), short.full)
    h.messages = {}
    vim.cmd('Ctxd restore 0000000000')
    t.contains('no snapshot 0000000000', h.wait_message('restore failed').full)
  end)

  t.it(':Ctxd restore offers nothing when the files match and the snapshot is not this thread\'s', function()
    local snap = h.request('ctxd/ghost/snapshot', { message = 'elsewhere', thread = 'someone-else' })
    local seen = answer_selects({
      function(items)
        for i, item in ipairs(items) do
          if item.id == snap.id then
            return i
          end
        end
      end,
    })
    vim.cmd('Ctxd restore')
    local message = h.wait_message('nothing to restore', 30000)
    t.eq(vim.log.levels.WARN, message.level)
    t.eq(1, #seen, 'no second question')
  end)

  t.it("a checkpoint an agent's hook takes fires User CtxdGhostChanged", function()
    -- The daemon's hook watcher starts with its session following.
    t.wait_for(function()
      local err, s = require('ctxd.client').request_sync('ctxd/status', {}, nil, 5000)
      return not err and type(s) == 'table' and type(s.sources) == 'table' and #s.sources > 0
    end, 'the daemon to follow sessions', 30000)
    local fired
    local au = vim.api.nvim_create_autocmd('User', {
      pattern = 'CtxdGhostChanged',
      callback = function(ev)
        fired = ev.data
      end,
    })
    local env = { PYTHONPATH = h.repo }
    local install = vim.system({ h.python, '-m', 'ctxd', 'hooks', 'install', '--agent', 'claude', '--scope', 'project' },
      { cwd = h.workspace, env = env, text = true }):wait()
    t.eq(0, install.code, install.stderr)
    local turn = vim.json.encode({ session_id = 's-7', cwd = h.workspace, prompt = 'Rename the app' })
    local hook = vim.system({ h.python, '-m', 'ctxd', 'hook', 'claude', 'UserPromptSubmit' },
      { cwd = h.workspace, env = env, stdin = turn, text = true }):wait()
    t.eq(0, hook.code, hook.stderr)
    t.wait_for(function()
      return fired
    end, 'User CtxdGhostChanged', 20000)
    vim.api.nvim_del_autocmd(au)
    t.eq(h.uri, fired.workspace)
    vim.fn.delete(vim.fs.joinpath(h.workspace, '.claude'), 'rf')
  end)
end)
