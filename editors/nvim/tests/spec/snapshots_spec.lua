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

  t.it(':Ctxd diff lists the changed files, <CR> opens the diff against the snapshot', function()
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
    local rows = {}
    for _, item in ipairs(qf.items) do
      rows[vim.fn.fnamemodify(vim.api.nvim_buf_get_name(item.bufnr), ':t')] = item.text
    end
    t.eq({ ['calc.py'] = 'modified', ['gone.txt'] = 'deleted', ['new.txt'] = 'added' }, rows)
    t.eq('qf', vim.bo.filetype, 'the quickfix window is open and current')
    -- <CR> on calc.py: a new tab, the snapshot's text on the left, the working file on the right.
    for i, item in ipairs(qf.items) do
      if item.text == 'modified' then
        vim.api.nvim_win_set_cursor(0, { i, 0 })
      end
    end
    local tabs = #vim.api.nvim_list_tabpages()
    vim.api.nvim_feedkeys(vim.keycode('<CR>'), 'x', false)
    t.wait_for(function()
      return #vim.api.nvim_list_tabpages() == tabs + 1
    end, 'the diff tab')
    local wins = vim.api.nvim_tabpage_list_wins(0)
    t.eq(2, #wins)
    local left, right = vim.api.nvim_win_get_buf(wins[1]), vim.api.nvim_win_get_buf(wins[2])
    t.eq(('ctxd://snapshot/%s/calc.py'):format(snap.id:sub(1, 10)), vim.api.nvim_buf_get_name(left))
    t.eq({ 'def add(a, b):', '    return a + b' }, h.lines(left))
    t.eq(false, vim.bo[left].modifiable)
    t.eq('python', vim.bo[left].filetype)
    t.eq(vim.fs.joinpath(h.workspace, 'calc.py'), vim.api.nvim_buf_get_name(right))
    t.eq(true, vim.wo[wins[1]].diff and vim.wo[wins[2]].diff)
    vim.cmd.tabclose()
    -- A deleted file: the snapshot's text against nothing.
    require('ctxd.ui').open_file_diff({ workspace = h.uri }, snap.id, 'gone.txt')
    t.wait_for(function()
      return #vim.api.nvim_list_tabpages() == tabs + 1
    end, 'the diff tab of the deleted file')
    wins = vim.api.nvim_tabpage_list_wins(0)
    t.eq({ 'this file goes away' }, h.lines(vim.api.nvim_win_get_buf(wins[1])))
    t.eq({ '' }, h.lines(vim.api.nvim_win_get_buf(wins[2])))
    vim.cmd.tabclose()
    vim.cmd.cclose()
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
