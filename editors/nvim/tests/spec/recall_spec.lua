-- `:Ctxd recall {query}` against the real daemon: a thread whose early turns a compaction replaced
-- is searched; the hits fill the quickfix list (or vim.ui.select); choosing one opens the stored
-- item read-only and says whether a compaction replaced it.
local t = require('harness')
local h = require('helpers')

local client ---@type vim.lsp.Client

--- A thread of six turns, the first holding a fact, compacted offline so that turn is archived.
--- Returns the thread's name.
local function compacted_thread()
  local thread = h.fresh_thread()
  local items = {
    h.user('which test keeps failing on the build machine? ' .. h.text(300, 1)),
    h.assistant('The flaky one is test_payment_retry: it waits on port 8443, which the proxy holds. ' .. h.text(300, 2)),
  }
  for i = 2, 6 do
    table.insert(items, h.user(('question %d '):format(i) .. h.text(300, 10 + i)))
    table.insert(items, h.assistant(('answer %d '):format(i) .. h.text(300, 20 + i)))
  end
  h.request('ctxd/record', { items = items })
  h.request('ctxd/compact', { strategy = 'offline' })
  -- The fact's item is out of the active history now (a test of the set-up, not of the plugin).
  local history = h.request('ctxd/history', { includeArchived = true })
  local archived = vim.tbl_filter(function(item)
    return item.archived and vim.json.encode(item):find('test_payment_retry', 1, true) ~= nil
  end, history.items)
  t.eq(1, #archived, 'the compaction archived the fact')
  return thread
end

--- Wait for the buffer named `ctxd://item/...` of the current window to be filled.
local function item_lines()
  return t.wait_for(function()
    local buf = vim.api.nvim_get_current_buf()
    local lines = h.lines(buf)
    return vim.startswith(vim.api.nvim_buf_get_name(buf), 'ctxd://item/') and #lines > 2 and lines or nil
  end, 'the item buffer (messages ' .. vim.inspect(h.messages) .. ')', 20000)
end

t.describe(':Ctxd recall', function()
  t.before_each(function()
    h.capture_notify()
    if not client or client:is_stopped() then
      client = h.start()
    end
    require('ctxd.config').options.recall.picker = 'quickfix'
    vim.cmd('silent! cclose')
    vim.cmd.buffer(vim.fn.bufnr(vim.fs.joinpath(h.workspace, 'README.md')))
    vim.cmd('silent! only')
  end)

  t.it('lists the hits of compacted turns in the quickfix list; <CR> opens the item read-only, saying a compaction replaced it', function()
    compacted_thread()
    vim.cmd('Ctxd recall flaky payment test')
    local qf = t.wait_for(function()
      local list = vim.fn.getqflist({ title = 0, items = 0 })
      return list.title == 'ctxd recall flaky payment test' and #list.items > 0 and list
    end, 'the quickfix list (messages ' .. vim.inspect(h.messages) .. ')')
    local first = qf.items[1]
    t.eq('ctx #2', first.module)
    t.matches('^assistant message · turn 1 · no longer in context: The flaky one is test_payment_retry', first.text)
    h.wait_message('matches for "flaky payment test"; <CR> opens one')
    t.eq('qf', vim.bo.filetype, 'the quickfix window is open')
    vim.api.nvim_feedkeys(vim.keycode('<CR>'), 'x', false)
    local lines = item_lines()
    t.eq('ctxd item ctx #2 · assistant message', lines[1])
    t.eq('replaced by a compaction: the model no longer sees it; ctxd keeps it', lines[2])
    t.contains('The flaky one is test_payment_retry: it waits on port 8443', table.concat(lines, '\n'))
    t.eq(false, vim.bo.modifiable)
    t.eq(true, vim.bo.readonly)
    t.eq('nofile', vim.bo.buftype)
    local said = h.wait_message('item ctx #2: replaced by a compaction')
    t.eq(vim.log.levels.INFO, said.level)
  end)

  t.it('an item still in the active history says so', function()
    compacted_thread()
    vim.cmd('Ctxd recall question 6')
    local qf = t.wait_for(function()
      local list = vim.fn.getqflist({ title = 0, items = 0 })
      return list.title == 'ctxd recall question 6' and #list.items > 0 and list
    end, 'the quickfix list')
    local active
    for i, item in ipairs(qf.items) do
      if not item.text:find('no longer in context', 1, true) then
        active = active or i
      end
    end
    t.truthy(active, 'an active hit: ' .. vim.inspect(qf.items))
    vim.cmd('cc ' .. active)
    local lines = item_lines()
    t.eq('in the active history: the model still sees it', lines[2])
    h.wait_message(': in the active history')
  end)

  t.it("a tool's coloured output is listed and opened as text, without its terminal escapes", function()
    h.fresh_thread()
    h.request('ctxd/record', { items = {
      h.user('run the platypus tests'),
      { type = 'function_call', name = 'shell', call_id = 'c1', arguments = '{"cmd":"pytest"}' },
      { type = 'function_call_output', call_id = 'c1',
        output = '\27[2m============\27[0m \27[1;31mFAILED\27[0m test_platypus.py::test_bill \27]8;;file:///x\27\\link\27]8;;\27\\ \27[32mpassed\27[0m\r\n' },
    } })
    vim.cmd('Ctxd recall platypus FAILED')
    local qf = t.wait_for(function()
      local list = vim.fn.getqflist({ title = 0, items = 0 })
      return list.title == 'ctxd recall platypus FAILED' and #list.items > 0 and list
    end, 'the quickfix list')
    local hit
    for i, item in ipairs(qf.items) do
      if item.text:find('tool output', 1, true) then
        hit = hit or i
      end
    end
    t.truthy(hit, vim.inspect(qf.items))
    local text = qf.items[hit].text
    t.eq(nil, text:find('\27', 1, true), text)
    t.eq(nil, text:find('[2m', 1, true), text)
    t.contains('FAILED test_platypus.py::test_bill link passed', text)
    vim.cmd('cc ' .. hit)
    local lines = item_lines()
    local body = table.concat(lines, '\n')
    t.eq(nil, body:find('[\27\r]'), body)
    t.contains('============ FAILED test_platypus.py::test_bill link passed', body)
  end)

  t.it("the gauge's menu reaches recall and the time machine (a click on the gauge opens it)", function()
    compacted_thread()
    -- The statusline's gauge carries the click that opens the menu.
    t.contains("%@v:lua.require'ctxd.menu'.click@", require('ctxd').statusline())
    local menus = {}
    local saved_select, saved_input = vim.ui.select, vim.ui.input
    vim.ui.select = function(items, opts, on_choice)
      table.insert(menus, { kind = opts.kind, prompt = opts.prompt, rows = vim.tbl_map(opts.format_item, items) })
      if opts.kind == 'ctxd.menu' then
        for i, item in ipairs(items) do
          if vim.startswith(item.label, 'Recall') then
            return on_choice(item, i)
          end
        end
      end
      on_choice(nil, nil)
    end
    vim.ui.input = function(opts, on_confirm)
      t.eq('Search the history for: ', opts.prompt)
      on_confirm('flaky payment test')
    end
    require('ctxd.menu').click()
    local qf = t.wait_for(function()
      local list = vim.fn.getqflist({ title = 0, items = 0 })
      return list.title == 'ctxd recall flaky payment test' and #list.items > 0 and list
    end, 'the recall the menu ran')
    vim.ui.select, vim.ui.input = saved_select, saved_input
    t.matches('^ctxd · ctx test%-%d+$', menus[1].prompt)
    local rows = table.concat(menus[1].rows, '\n')
    for _, row in ipairs({ 'Usage breakdown', 'Recall: search the whole history', 'Time machine: restore files from a checkpoint',
      'Time machine: what changed since a checkpoint', 'Time machine: undo the last restore',
      'Time machine: undo the last compaction, rollback or restore', 'Time machine: roll back the last turn',
      "Hooks: install ctxd's hooks", 'Restart the daemon' }) do
      t.contains(row, rows)
    end
    t.matches('no longer in context', qf.items[1].text)
    vim.cmd('cclose')
  end)

  t.it('an item a rollback dropped says so', function()
    h.fresh_thread()
    h.request('ctxd/record', { items = {
      h.user('first question ' .. h.text(50, 3)), h.assistant('first answer ' .. h.text(50, 4)),
      h.user('rename the quokka module please'), h.assistant('renamed quokka to wombat'),
    } })
    h.request('ctxd/rollback', { turns = 1 })
    vim.cmd('Ctxd recall quokka wombat')
    t.wait_for(function()
      local list = vim.fn.getqflist({ title = 0, items = 0 })
      return list.title == 'ctxd recall quokka wombat' and #list.items > 0
    end, 'the quickfix list')
    vim.cmd('cc 1')
    local lines = item_lines()
    t.eq('dropped by a rollback: the model no longer sees it; ctxd keeps it', lines[2])
  end)

  t.it('with recall.picker = "select", the hits go to vim.ui.select and the choice opens', function()
    compacted_thread()
    require('ctxd.config').options.recall.picker = 'select'
    local rows
    local saved = vim.ui.select
    vim.ui.select = function(items, opts, on_choice)
      vim.ui.select = saved
      rows = vim.tbl_map(opts.format_item, items)
      t.eq('ctxd.recall', opts.kind)
      on_choice(items[1], 1)
    end
    vim.cmd('Ctxd recall port 8443')
    local lines = item_lines()
    t.matches('^ctx #2  assistant message · turn 1 · no longer in context: ', rows[1])
    t.eq('replaced by a compaction: the model no longer sees it; ctxd keeps it', lines[2])
  end)

  t.it('with recall.scope = "workspace", hits in other threads name their thread and open there', function()
    compacted_thread()
    local here = h.fresh_thread()
    h.request('ctxd/record', { items = { h.user('nothing about that here') } })
    require('ctxd.config').options.recall.scope = 'workspace'
    vim.cmd('Ctxd recall flaky payment')
    local qf = t.wait_for(function()
      local list = vim.fn.getqflist({ title = 0, items = 0 })
      return list.title == 'ctxd recall flaky payment' and #list.items > 0 and list
    end, 'the quickfix list')
    require('ctxd.config').options.recall.scope = 'thread'
    -- Each test's thread holds the fact: the best hit is one of them, named.
    local named = qf.items[1].module:match('^ctx (test%-%d+) #2$')
    t.truthy(named and named ~= here, qf.items[1].module)
    vim.cmd('cc 1')
    local lines = item_lines()
    t.contains('test_payment_retry', table.concat(lines, '\n'))
    t.eq('replaced by a compaction: the model no longer sees it; ctxd keeps it', lines[2])
  end)

  t.it('agent plugins get api.recall and api.item', function()
    local thread = compacted_thread()
    local api = require('ctxd.api')
    local got
    api.recall('flaky payment', { limit = 3 }, function(err, result)
      got = { err = err, result = result }
    end)
    t.wait_for(function()
      return got
    end, 'the recall answer')
    t.eq(nil, got.err)
    local hit = got.result.results[1]
    t.eq({ thread, 2, true }, { hit.thread, hit.seq, hit.archived })
    got = nil
    api.item(hit.seq, { thread = thread }, function(err, result)
      got = { err = err, result = result }
    end)
    t.wait_for(function()
      return got
    end, 'the item answer')
    t.eq(nil, got.err)
    t.eq(true, got.result.archived)
    t.contains('test_payment_retry', got.result.item.content[1].text)
  end)

  t.it('says when nothing matches, and what it needs when given no words', function()
    h.fresh_thread()
    h.request('ctxd/record', { items = { h.user('hello there') } })
    vim.fn.setqflist({}, ' ', { title = 'before' })
    vim.cmd('Ctxd recall zebra')
    local said = h.wait_message('no match for "zebra"')
    t.eq(vim.log.levels.WARN, said.level)
    t.eq('before', vim.fn.getqflist({ title = 0 }).title, 'the quickfix list is left alone')
    h.messages = {}
    vim.cmd('Ctxd recall')
    t.eq(vim.log.levels.ERROR, h.wait_message('recall takes words to search for').level)
  end)

  t.it('a daemon error is one line', function()
    h.fresh_thread()
    vim.cmd('Ctxd recall ' .. ('x'):rep(10001))
    local said = h.wait_message('recall failed: ')
    t.eq(vim.log.levels.ERROR, said.level)
    t.contains('(-32602)', said.full)
  end)
end)
