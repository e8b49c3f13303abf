-- The plugin against the real daemon: attach, the gauge fed by ctxd/usageChanged, tiers, the
-- usage float, and the effect of each :Ctxd subcommand on the daemon's state.
local t = require('harness')
local h = require('helpers')

local client ---@type vim.lsp.Client

--- Wait for the gauge of the current thread to reach a history version and usage.
local function gauge_after(pred, what)
  h.wait_usage(pred, what)
  return require('ctxd').gauge()
end

--- Answer the next vim.ui.select with the choice `pick` returns the index of; what was asked is kept.
---@param pick fun(items: table[]): integer?
local function answer_select(pick)
  local saved, asked = vim.ui.select, {}
  vim.ui.select = function(items, opts, on_choice)
    vim.ui.select = saved
    asked.prompt = opts.prompt
    asked.rows = vim.tbl_map(opts.format_item, items)
    local index = pick(items)
    on_choice(index and items[index] or nil, index)
  end
  return asked
end

t.describe('daemon', function()
  t.before_each(function()
    h.capture_notify()
    if not client or client:is_stopped() then
      client = h.start()
    end
    h.fresh_thread()
  end)

  t.it('attaches and initializes with protocol version 4', function()
    local info = require('ctxd.client').server_info(client)
    t.eq(4, info.protocolVersion, vim.inspect(info))
    t.truthy(vim.tbl_contains(info.methods, 'ctxd/record'))
    t.eq({ h.uri }, require('ctxd.client').folders(client))
    t.eq('ctxd', client.server_info.name)
  end)

  t.it('the generated method names are the ones the daemon announces', function()
    local info = require('ctxd.client').server_info(client)
    local protocol = require('ctxd.protocol')
    local known = {}
    for _, method in pairs(protocol.methods) do
      known[method] = true
    end
    local missing = vim.tbl_filter(function(method)
      return not known[method]
    end, info.methods)
    t.eq({}, missing)
    t.eq(info.protocolVersion, protocol.PROTOCOL_VERSION)
  end)

  t.it('does not attach outside a git repository', function()
    local outside = vim.fn.tempname() .. '.md'
    vim.fn.writefile({ 'x' }, outside)
    vim.cmd.edit(outside)
    local buf = vim.api.nvim_get_current_buf()
    -- A client would be started from a vim.schedule() callback: let the queue run first.
    local flushed = false
    vim.schedule(function()
      flushed = true
    end)
    t.wait_for(function()
      return flushed
    end, 'the scheduled callbacks')
    t.eq(0, #vim.lsp.get_clients({ name = 'ctxd', bufnr = buf }))
    t.eq(1, #vim.lsp.get_clients({ name = 'ctxd' }))
    vim.cmd.buffer(vim.fn.bufnr(vim.fs.joinpath(h.workspace, 'README.md')))
  end)

  t.it('shows the gauge after records', function()
    local api = require('ctxd.api')
    local done
    api.record({ h.user(h.text(2000)), h.assistant('ok') }, function(err, result)
      done = { err = err, result = result }
    end)
    t.wait_for(function()
      return done
    end, 'the record answer')
    t.eq(nil, done.err)
    local version = done.result.historyVersion
    local gauge = gauge_after(function(s)
      return s.historyVersion == version
    end, 'usageChanged for the records')
    local s = gauge.snapshot
    t.truthy(s.usedTokens > 1000, 'usedTokens ' .. s.usedTokens)
    t.eq(('ctx %d%% · %s/128k'):format(math.floor(s.percent + 0.5), require('ctxd.status').format_tokens(s.usedTokens)), gauge.text)
    t.eq('ok', gauge.tier)
    t.matches('^%%#CtxdOk#ctx %d+%%%% · [%d%.]+k/128k%%%*$', require('ctxd').statusline({ click = false }))
  end)

  t.it('shows reported usage and the tiers', function()
    local api = require('ctxd.api')
    local function report(total)
      api.report_token_usage({ inputTokens = total - 100, outputTokens = 100, totalTokens = total })
      return gauge_after(function(s)
        return s.usedTokens == total
      end, ('the gauge to show %d tokens'):format(total))
    end
    local gauge = report(50000)
    t.eq('ctx 39% · 50k/128k', gauge.text)
    t.eq('ok', gauge.tier)
    gauge = report(95000) -- over 80% of the auto-compact limit (0.9 of 128k)
    t.eq('ctx 74% · 95k/128k', gauge.text)
    t.eq('warn', gauge.tier)
    t.eq('%#CtxdWarn#ctx 74%% · 95k/128k%*', require('ctxd').statusline({ click = false }))
    gauge = report(120000)
    t.eq('compact', gauge.tier)
    t.eq("%@v:lua.require'ctxd.menu'.click@%#CtxdCompact#ctx 94%% · 120k/128k%*%X", require('ctxd').statusline())
  end)

  t.it('tells API subscribers and fires User CtxdUsageChanged', function()
    local seen, events = {}, {}
    local unsubscribe = require('ctxd.api').subscribe(function(s)
      table.insert(seen, s)
    end)
    local autocmd = vim.api.nvim_create_autocmd('User', {
      pattern = 'CtxdUsageChanged',
      callback = function(ev)
        table.insert(events, ev.data)
      end,
    })
    local thread = require('ctxd.config').options.thread
    h.request('ctxd/record', { items = { h.user('hello') } })
    t.wait_for(function()
      return #seen > 0 and #events > 0
    end, 'a subscriber call and an event')
    unsubscribe()
    vim.api.nvim_del_autocmd(autocmd)
    t.eq(thread, seen[#seen].thread)
    t.eq(h.uri, events[#events].workspace)
  end)

  t.it('gives agent plugins the projection and the prompt context', function()
    h.request('ctxd/record', { items = { h.user('question'), h.assistant('answer') } })
    local projection = h.request('ctxd/prompt', {})
    t.eq(2, #projection.items)
    t.eq('question', projection.items[1].content[1].text)
    local usage = h.request('ctxd/setPromptContext', { baseInstructions = h.text(1000, 3) })
    t.truthy(usage.usedTokens > 500, vim.inspect(usage))
    local threads = h.request('ctxd/threads', {})
    local names = vim.tbl_map(function(th)
      return th.thread
    end, threads.threads)
    t.truthy(vim.tbl_contains(names, require('ctxd.config').options.thread), vim.inspect(names))
  end)

  t.it('hands the daemon errors to API callbacks', function()
    local api = require('ctxd.api')
    local results = {}
    api.record({ { type = 'message', role = 'user' } }, function(err)
      results.bad_item = err
    end)
    api.usage({ workspace = 'file:///not/open' }, function(err)
      results.bad_workspace = err
    end)
    t.wait_for(function()
      return results.bad_item and results.bad_workspace
    end, 'both errors')
    t.eq(-32602, results.bad_item.code)
    t.contains('no ctxd client has the workspace file:///not/open', results.bad_workspace.message)
    t.eq(0, h.request('ctxd/history', {}).total, 'nothing recorded')
  end)

  t.it('follows the thread an agent plugin switches to', function()
    local api = require('ctxd.api')
    h.request('ctxd/record', { items = { h.user(h.text(3000)) } }, nil)
    local busy = require('ctxd.config').options.thread
    local other = h.fresh_thread()
    h.request('ctxd/record', { items = { h.user('short') } })
    h.wait_usage(function(s)
      return s.thread == other
    end)
    local small = require('ctxd').gauge().snapshot.usedTokens
    local done
    api.set_thread(busy, function(err)
      done = { err = err }
    end)
    t.wait_for(function()
      return done
    end, 'set_thread')
    t.eq(busy, require('ctxd.config').options.thread)
    t.truthy(require('ctxd').gauge().snapshot.usedTokens > small + 1000)
  end)

  t.it(':Ctxd usage opens the breakdown float', function()
    h.request('ctxd/setPromptContext', { baseInstructions = h.text(2000, 5) })
    h.request('ctxd/record', { items = { h.user(h.text(3000)) } })
    vim.cmd('Ctxd usage')
    local win = t.wait_for(function()
      local w = vim.api.nvim_get_current_win()
      return vim.api.nvim_win_get_config(w).relative ~= '' and w or nil
    end, 'the float')
    local buf = vim.api.nvim_win_get_buf(win)
    local lines = h.lines(buf)
    t.eq({ { (' ctxd · ctx %s '):format(require('ctxd.config').options.thread) } }, vim.api.nvim_win_get_config(win).title)
    t.eq('Context usage', lines[1])
    t.eq(50, vim.fn.strchars(vim.trim(lines[2])), 'bar width')
    t.contains('/128k tokens', lines[3])
    local text = table.concat(lines, '\n')
    t.contains('System prompt', text)
    t.contains('Free space', text)
    t.contains('Autocompact buffer', text)
    t.contains('estimated', text)
    -- The open float follows the thread's usage.
    local before = lines[3]
    h.request('ctxd/record', { items = { h.assistant(h.text(3000, 11)) } })
    t.wait_for(function()
      return h.lines(buf)[3] ~= before
    end, 'the float to follow the usage')
    vim.api.nvim_feedkeys('q', 'x', false)
    t.eq(false, vim.api.nvim_win_is_valid(win))
  end)

  t.it(':Ctxd rollback asks first, drops turns, and :Ctxd undo puts them back', function()
    h.request('ctxd/record', { items = { h.user('one'), h.assistant('1'), h.user('two'), h.assistant('2') } })
    local asked = answer_select(function()
      return 2 -- Cancel
    end)
    vim.cmd('Ctxd rollback')
    t.wait_for(function()
      return asked.prompt
    end, 'the question')
    t.eq('Roll back?', asked.prompt)
    t.contains('2 items removed', asked.rows[1])
    t.eq(4, h.request('ctxd/history', {}).total) -- cancelled: nothing changed
    answer_select(function()
      return 1
    end)
    vim.cmd('Ctxd rollback')
    h.wait_message('rolled back 1 turn')
    local history = h.request('ctxd/history', {})
    t.eq(2, history.total)
    t.eq('one', history.items[1].content[1].text)
    vim.cmd('Ctxd undo')
    h.wait_message('undid the rollback')
    t.eq(4, h.request('ctxd/history', {}).total)
    vim.cmd('Ctxd rollback 0')
    h.wait_message('positive number of turns')
  end)

  t.it(':Ctxd rollback is bounded by the thread\'s turns, and counts tokens as the gauge does', function()
    h.request('ctxd/record', { items = { h.user('first ' .. h.text(3000)), h.assistant('1'), h.user('second'),
      h.assistant('2'), h.user('third'), h.assistant('3') } })
    local asked = answer_select(function()
      return 2 -- Cancel
    end)
    vim.cmd('Ctxd rollback')
    t.wait_for(function()
      return asked.rows
    end, 'the question')
    t.matches('^Roll back 1 turn: 2 items removed, [%d%.]+k tokens after$', asked.rows[1])
    asked = answer_select(function()
      return 1
    end)
    vim.cmd('Ctxd rollback 999')
    h.wait_message('rolled back 3 turns', 30000)
    t.matches('^Roll back all 3 turns of the thread %(you asked for 999%): 6 items removed, %d+ tokens after$', asked.rows[1])
    t.eq(0, h.request('ctxd/history', {}).total)
    vim.cmd('Ctxd undo')
    h.wait_message('undid the rollback')
    t.eq(6, h.request('ctxd/history', {}).total)
  end)

  t.it(':Ctxd rollback says when it goes back past a compaction', function()
    local items = {}
    for n = 1, 4 do
      vim.list_extend(items, { h.user('turn ' .. n), h.assistant(h.text(3000, n)) })
    end
    h.request('ctxd/record', { items = items })
    h.request('ctxd/compact', { strategy = 'offline' })
    local asked = answer_select(function()
      return 1
    end)
    vim.cmd('Ctxd rollback')
    h.wait_message('rolled back 1 turn')
    t.eq('Roll back past a compaction?', asked.prompt)
    t.contains('back past a compaction', asked.rows[1])
    t.eq(6, h.request('ctxd/history', {}).total) -- the three turns before the compaction's last
    vim.cmd('Ctxd undo')
    h.wait_message('undid the rollback')
    t.eq('compaction', h.request('ctxd/history', { includeArchived = true }).operations[1].kind)
  end)

  t.it(':Ctxd redo says in one line which operation to undo first when a later one stands in the way', function()
    local items = {}
    for n = 1, 4 do
      vim.list_extend(items, { h.user('turn ' .. n), h.assistant(h.text(3000, n)) })
    end
    h.request('ctxd/record', { items = items })
    h.request('ctxd/compact', { strategy = 'offline' })
    vim.cmd('Ctxd undo')
    h.wait_message('undid the compaction')
    local undo = h.request('ctxd/history', { includeArchived = true }).operations[2].id
    -- A turn the undo brought back is rolled back: redoing the compaction now would put back a
    -- summary of it. The daemon refuses (issue #36) and the message says what to do.
    local rollback = h.request('ctxd/rollback', { turns = 1 }).undoId
    vim.cmd('Ctxd redo')
    local message = h.wait_message('redo failed', 30000)
    t.eq(vim.log.levels.ERROR, message.level)
    t.matches(('^ctxd: redo failed: operation %d %%(an undo, [^\n]+%%) of thread [^\n]+ cannot be undone while a later '
      .. 'operation is in effect: operation %d %%(a rollback, [^\n]+ Undo operation %d first, then operation %d%%. '
      .. 'Nothing was changed%%. %%(%%-32602%%)$'):format(undo, rollback, rollback, undo), message.full)
    t.eq(6, h.request('ctxd/history', {}).total) -- unchanged: three turns of two items
  end)

  t.it(':Ctxd log lists the ledger', function()
    h.request('ctxd/record', { items = { h.user('first question'), h.assistant('first answer') } })
    vim.cmd('Ctxd log')
    local buf = t.wait_for(function()
      local b = vim.api.nvim_get_current_buf()
      return vim.bo[b].filetype == 'ctxd-log' and b or nil
    end, 'the log buffer')
    local text = table.concat(h.lines(buf), '\n')
    t.contains('2 items', text)
    t.contains('user: first question', text)
    t.contains('assistant: first answer', text)
    vim.cmd('close')
  end)

  t.it(':Ctxd compact offline compacts the ledger, with progress', function()
    local words = {}
    for i = 1, 6 do
      table.insert(words, h.user(('question %d '):format(i) .. h.text(400, i)))
      table.insert(words, h.assistant(('answer %d '):format(i) .. h.text(400, 100 + i)))
    end
    h.request('ctxd/record', { items = words })
    local progress = {}
    local autocmd = vim.api.nvim_create_autocmd('LspProgress', {
      callback = function(ev)
        table.insert(progress, ev.data.params.value.kind)
      end,
    })
    vim.cmd('Ctxd compact offline')
    -- The command's own result (a warning of an earlier test's compaction may still be said now).
    local message = t.wait_for(function()
      for _, m in ipairs(h.messages) do
        if m.full:match('^ctxd: compacted [%d%.]+k? %->') then
          return m
        end
      end
    end, 'the compaction result', 30000)
    t.eq(vim.log.levels.INFO, message.level, vim.inspect(h.messages))
    t.wait_for(function()
      return progress[#progress] == 'end'
    end, 'the end of $/progress (got ' .. vim.inspect(progress) .. ')', 3000)
    vim.api.nvim_del_autocmd(autocmd)
    t.matches('compacted [%d%.]+k? %-> [%d%.]+k? tokens %(offline%)', message.full)
    t.truthy(h.request('ctxd/history', {}).total < 12)
    t.eq('begin', progress[1])
    -- One message for it: the daemon's own warning about this thread is not said as well.
    vim.wait(300)
    local thread = require('ctxd.config').options.thread
    for _, m in ipairs(h.messages) do
      t.eq(nil, m.full:find(("compacted thread '%s'"):format(thread), 1, true), vim.inspect(h.messages))
    end
  end)

  t.it('api.compact hands a failed compaction to the callback', function()
    local done
    require('ctxd.api').compact({ strategy = 'offline' }, function(err, result)
      done = { err = err, result = result }
    end)
    t.wait_for(function()
      return done
    end, 'the compact answer', 30000)
    t.truthy(done.err, 'an empty thread cannot be compacted')
    t.eq(h.compact_failed_code(client), done.err.code, vim.inspect(done.err))
  end)

  t.it(':Ctxd compact reports the daemon error and leaves the ledger', function()
    h.request('ctxd/setPromptContext', { baseInstructions = 'x' })
    vim.cmd('Ctxd compact offline')
    local message = h.wait_message('compact failed', 30000)
    t.eq(vim.log.levels.ERROR, message.level)
    t.matches('^ctxd: compact failed: .+ %([%d-]+%)$', message.full)
    t.eq(('(%d)'):format(h.compact_failed_code(client)), message.full:match('%([%d-]+%)$'))
    t.eq(0, h.request('ctxd/history', {}).total)
  end)

  t.it(':Ctxd compact refuses an unknown strategy', function()
    vim.cmd('Ctxd compact everything')
    h.wait_message('unknown strategy "everything"')
  end)

  t.it(':Ctxd snapshot, then :Ctxd restore of files only', function()
    h.write('tracked.txt', 'before\n')
    h.git({ 'add', 'tracked.txt' })
    h.git({ '-c', 'user.name=t', '-c', 'user.email=t@e', 'commit', '-qm', 'tracked' })
    h.write('tracked.txt', 'snapshotted\n')
    h.request('ctxd/record', { items = { h.user('before the snapshot') } })
    local progress = {}
    local autocmd = vim.api.nvim_create_autocmd('LspProgress', {
      callback = function(ev)
        table.insert(progress, ev.data.params.value.kind)
      end,
    })
    vim.cmd('Ctxd snapshot first one')
    local message = t.wait_for(function()
      for _, m in ipairs(h.messages) do
        if m.msg:find('snapshot') then
          return m
        end
      end
    end, 'the snapshot result', 30000)
    t.eq(vim.log.levels.INFO, message.level, message.msg)
    t.matches('^ctxd: snapshot %x+: %d+ files', message.msg)
    t.wait_for(function()
      return progress[#progress] == 'end'
    end, 'the end of $/progress (got ' .. vim.inspect(progress) .. ')', 3000)
    vim.api.nvim_del_autocmd(autocmd)
    t.eq('begin', progress[1])
    local list = h.request('ctxd/ghost/list', {})
    t.eq('first one', list.snapshots[1].message)
    local history = h.request('ctxd/history', {})
    t.eq('ghost_snapshot', history.items[#history.items].type)

    -- A second snapshot, then changes; restore the first (offered second: newest first).
    h.request('ctxd/record', { items = { h.user('after the snapshot') } })
    h.write('tracked.txt', 'changed\n')
    h.messages = {}
    vim.cmd('Ctxd snapshot second')
    h.wait_message('ctxd: snapshot ', 30000)
    t.eq(2, #h.request('ctxd/ghost/list', {}).snapshots)
    h.write('tracked.txt', 'changed again\n')
    h.write('new.txt', 'new\n')
    local offered
    local saved = vim.ui.select
    vim.ui.select = function(items, opts, on_choice)
      if opts.prompt == 'Restore snapshot' then
        offered = vim.tbl_map(opts.format_item, items)
        on_choice(items[2], 2)
      else
        -- files only
        for i, item in ipairs(items) do
          if item.conversation == false then
            return on_choice(item, i)
          end
        end
        on_choice(nil, nil)
      end
    end
    h.messages = {}
    vim.cmd('Ctxd restore')
    h.wait_message('restored', 30000)
    vim.ui.select = saved
    t.contains('second', offered[1])
    t.contains('first one', offered[2])
    t.eq('snapshotted\n', h.read('tracked.txt'))
    t.eq(nil, h.read('new.txt'))
    t.contains('after the snapshot', vim.inspect(h.request('ctxd/history', {}).items), 'files only keeps the ledger')
  end)

  t.it(':Ctxd restore of files and conversation rolls the thread back', function()
    h.request('ctxd/record', { items = { h.user('kept') } })
    local snap = h.request('ctxd/ghost/snapshot', { message = 'conv' })
    h.request('ctxd/record', { items = { h.user('dropped') } })
    local saved = vim.ui.select
    vim.ui.select = function(items, opts, on_choice)
      if opts.prompt == 'Restore snapshot' then
        on_choice(items[1], 1)
      else
        -- files and conversation (the only choice when a preview says the files already match)
        for i, item in ipairs(items) do
          if item.conversation == true then
            return on_choice(item, i)
          end
        end
        on_choice(nil, nil)
      end
    end
    vim.cmd('Ctxd restore')
    h.wait_message('ledger items dropped', 30000)
    vim.ui.select = saved
    local text = vim.inspect(h.request('ctxd/history', {}).items)
    t.contains('kept', text)
    t.eq(nil, text:find('dropped', 1, true), 'the later turn is gone')
    t.truthy(snap.id)
  end)

  t.it(':Ctxd restore offers the conversation only for a snapshot of this thread', function()
    h.request('ctxd/ghost/snapshot', { message = 'elsewhere', thread = 'someone-else' })
    h.write('tracked.txt', 'after elsewhere\n')
    local offered = {}
    local saved = vim.ui.select
    vim.ui.select = function(items, opts, on_choice)
      if opts.prompt == 'Restore snapshot' then
        t.eq('elsewhere', items[1].message, 'newest first')
        t.eq(nil, opts.format_item(items[1]):find('this thread', 1, true))
        on_choice(items[1], 1)
      else
        offered = vim.tbl_map(opts.format_item, items)
        on_choice(nil, nil)
      end
    end
    vim.cmd('Ctxd restore')
    t.wait_for(function()
      return #offered > 0
    end, 'the choices')
    vim.ui.select = saved
    t.eq(1, #offered, vim.inspect(offered))
    t.matches('^Files only', offered[1])
    t.eq('after elsewhere\n', h.read('tracked.txt'), 'nothing restored when the choice is cancelled')
  end)

  t.it(':Ctxd threads picks the thread the gauge follows; activity elsewhere does not move it', function()
    require('ctxd.config').options.thread = nil
    require('ctxd.threads').reset()
    h.request('ctxd/record', { items = { h.user(h.text(3000)) } }, nil)
    h.request('ctxd/record', { items = { h.user('small') }, thread = 'small-one' })
    -- Following: the most recent activity is small-one.
    h.wait_usage(function(s)
      return s.thread == 'small-one'
    end, 'the gauge to follow small-one')
    local big
    local rows, follow_row
    local saved = vim.ui.select
    vim.ui.select = function(items, opts, on_choice)
      t.eq('ctxd thread', opts.prompt)
      t.eq(true, items[1].follow)
      follow_row = opts.format_item(items[1])
      rows = {}
      local pick
      for i = 2, #items do
        rows[items[i].thread] = opts.format_item(items[i])
        if items[i].thread ~= 'small-one' and not pick then
          pick = items[i]
        end
      end
      big = pick.thread
      on_choice(pick, 2)
    end
    vim.cmd('Ctxd threads')
    h.wait_message('following ctx ')
    vim.ui.select = saved
    t.contains('Follow the most recently active thread', follow_row)
    t.truthy(rows['small-one'], vim.inspect(rows))
    -- A client thread's title is its first user message (protocol 3).
    t.matches('^● ctx +%d+%% +[%d%.]+k?/128k  small +%d+s$', rows['small-one'], 'the current thread, marked')
    -- Rows are aligned: the token column ends at the same display column.
    local ends = {}
    for _, row in pairs(rows) do
      local _, e = row:find('/128k')
      table.insert(ends, vim.fn.strdisplaywidth(row:sub(1, e)))
    end
    t.eq(ends[1], ends[#ends], vim.inspect(rows))
    t.eq(big, require('ctxd.threads').current(h.uri))
    local gauge = t.wait_for(function()
      return require('ctxd').gauge()
    end, 'the gauge of the picked thread')
    t.eq(big, gauge.snapshot.thread)
    t.truthy(gauge.snapshot.usedTokens > 1000, vim.inspect(gauge.snapshot))
    -- Picked: a record into another thread does not move the gauge.
    local result = h.request('ctxd/record', { items = { h.user('more') }, thread = 'small-one' })
    h.wait_usage(function()
      local s = require('ctxd.status').get({ workspace = h.uri, thread = 'small-one' })
      return s and s.historyVersion == result.historyVersion
    end, 'the usage of small-one')
    t.eq(big, require('ctxd').gauge().snapshot.thread)
    -- Back to following: the most recent activity wins again.
    vim.ui.select = function(items, _, on_choice)
      on_choice(items[1], 1)
    end
    h.messages = {}
    vim.cmd('Ctxd threads')
    h.wait_message('following the most recently active thread')
    vim.ui.select = saved
    t.eq('small-one', require('ctxd.threads').current(h.uri))
    h.request('ctxd/record', { items = { h.user('now here') } , thread = big })
    h.wait_usage(function(s)
      return s.thread == big
    end, 'the gauge to follow the new activity')
  end)

  t.it('a file outside every workspace folder shows no numbers and gets no commands', function()
    h.request('ctxd/record', { items = { h.user('numbers exist') } })
    h.wait_usage(function()
      return true
    end, 'numbers for the workspace')
    local outside = vim.fn.tempname() .. '.txt'
    vim.fn.writefile({ 'x' }, outside)
    vim.cmd.edit(outside)
    t.eq(nil, require('ctxd').gauge())
    t.eq('', require('ctxd').statusline())
    vim.cmd('Ctxd usage')
    local message = h.wait_message('outside every ctxd workspace folder')
    t.eq(vim.log.levels.ERROR, message.level)
    -- A scratch buffer has no numbers either.
    vim.cmd.enew()
    t.eq('', require('ctxd').statusline())
    vim.cmd.buffer(vim.fn.bufnr(vim.fs.joinpath(h.workspace, 'README.md')))
    t.truthy(require('ctxd').gauge(), 'the workspace file shows its numbers again')
  end)

  t.it('an automatic compaction gives one warning', function()
    local items = {}
    for i = 1, 8 do
      table.insert(items, h.user(('question %d '):format(i) .. h.text(400, i)))
      table.insert(items, h.assistant(('answer %d '):format(i) .. h.text(400, 50 + i)))
    end
    h.request('ctxd/setPromptContext', { contextWindow = 1000000 })
    local recorded = h.request('ctxd/record', { items = items })
    -- The auto-compact limit (90% of the window) at 80% of the thread, whichever estimator counts
    -- it (the C extension's or the byte classes'): one offline compaction brings it under.
    h.request('ctxd/setPromptContext', { contextWindow = math.ceil(recorded.usage.usedTokens * 0.8 / 0.9) })
    h.messages = {}
    h.request('ctxd/prompt', {})
    local message = h.wait_message('compacted', 30000)
    t.eq(vim.log.levels.WARN, message.level)
    t.matches('^ctxd: compacted thread', message.msg)
    -- Let any second message arrive before counting.
    local flushed = false
    h.request('ctxd/history', {})
    vim.schedule(function()
      flushed = true
    end)
    t.wait_for(function()
      return flushed
    end)
    local about = vim.tbl_filter(function(m)
      return m.msg:find('compact', 1, true) ~= nil
    end, h.messages)
    t.eq(1, #about, vim.inspect(h.messages))
  end)

  t.it('tells the daemon whether the workspace is trusted', function()
    local lsp = require('ctxd.lsp')
    local params = { initializationOptions = { ctxd = { contextWindow = 1 } } }
    lsp.before_init(params, { root_dir = h.workspace })
    t.eq(false, params.initializationOptions.ctxd.trusted, 'no .ctxd.toml, nothing in the trust database')
    t.eq(1, params.initializationOptions.ctxd.contextWindow)
    h.write('.ctxd.toml', 'model = "gpt-5"\n')
    vim.cmd.edit(vim.fs.joinpath(h.workspace, '.ctxd.toml'))
    t.truthy(vim.secure.trust({ action = 'allow', bufnr = 0 }))
    lsp.before_init(params, { root_dir = h.workspace })
    t.eq(true, params.initializationOptions.ctxd.trusted, 'trusted with :trust')
    h.write('.ctxd.toml', 'model = "gpt-4.1"\n')
    lsp.before_init(params, { root_dir = h.workspace })
    t.eq(false, params.initializationOptions.ctxd.trusted, 'changed since it was trusted')
    require('ctxd.config').options.trusted = true
    lsp.before_init(params, { root_dir = h.workspace })
    t.eq(true, params.initializationOptions.ctxd.trusted, 'the trusted option wins')
    require('ctxd.config').options.trusted = function(root)
      return root == '/elsewhere'
    end
    lsp.before_init(params, { root_dir = h.workspace })
    t.eq(false, params.initializationOptions.ctxd.trusted, 'the trusted function decides')
    require('ctxd.config').options.trusted = nil
    vim.cmd('bwipeout!')
    os.remove(vim.fs.joinpath(h.workspace, '.ctxd.toml'))
  end)

  t.it(':checkhealth ctxd reports the daemon, client, protocol and state dir, offline', function()
    -- A model with a known encoding makes the daemon load it (from the default install: no network).
    h.request('ctxd/setPromptContext', { model = 'gpt-5' })
    h.request('ctxd/record', { items = { h.user(h.text(200)) } })
    t.wait_for(function()
      for _, tok in ipairs(h.request('ctxd/status', {}).tokenizers) do
        if tok.name == 'o200k_base' and tok.status == 'exact' then
          return true
        end
      end
    end, 'o200k_base to load', 30000)
    vim.cmd.buffer(vim.fn.bufnr(vim.fs.joinpath(h.workspace, 'README.md')))
    vim.cmd('silent checkhealth ctxd')
    local text = table.concat(h.lines(0), '\n')
    vim.cmd('bwipeout!')
    t.matches('executable: %S+', text)
    t.contains('version: ctxd ', text)
    t.matches('attached to 1 buffer, including %S*README%.md', text)
    t.matches('protocol version 4, %d+ methods', text)
    t.contains(vim.fs.joinpath(vim.env.XDG_STATE_HOME, 'ctxd'), text)
    t.eq(nil, text:find('ERROR', 1, true), text)
    -- The plugin never loads tiktoken itself (that would download the encoding): the tokenizer
    -- state is the daemon's own, from ctxd/status.
    t.eq(nil, text:find('tiktoken', 1, true), text)
    t.truthy(require('ctxd.client').supports(client, 'ctxd/status'))
    t.contains('workspace not trusted', text)
    t.contains('tokenizer o200k_base: exact (token counts are exact)', text)
    -- No .ctxd.toml, no bad option: nothing to fix (trust_spec.lua shows a problem and its fix).
    t.contains('no settings problems', text)
  end)

  t.it(':Ctxd restart starts a new daemon on the same buffers; the gauge keeps its figures, dimmed, meanwhile', function()
    h.request('ctxd/record', { items = { h.user(h.text(500)) } })
    local before = gauge_after(function(s)
      return s.usedTokens > 100
    end, 'figures before the restart')
    local old = client
    vim.cmd('Ctxd restart')
    -- Until the new daemon sends its own: the same text, in the stale group, never blank.
    local seen = {}
    local function look()
      local g = require('ctxd').gauge()
      table.insert(seen, g and (g.text .. ' ' .. g.group) or 'blank')
      return g
    end
    local kept = look()
    t.truthy(kept, 'the gauge is not blank right after :Ctxd restart')
    t.eq(before.text, kept.text)
    t.eq('CtxdStale', kept.group)
    t.contains('%#CtxdStale#', require('ctxd').statusline())
    client = t.wait_for(function()
      look()
      local c = vim.lsp.get_clients({ name = 'ctxd', bufnr = 0 })[1]
      return c and c.initialized and c.id ~= old.id and c or nil
    end, 'a new client', 20000)
    h.wait_message('restarted', 20000)
    t.truthy(old:is_stopped())
    t.wait_for(function()
      local g = look()
      return g and not g.stale and g.group == 'CtxdOk'
    end, 'the new daemon\'s figures')
    t.eq(false, vim.tbl_contains(seen, 'blank'), vim.inspect(seen))
    local result = h.request('ctxd/record', { items = { h.user('after restart') } })
    h.wait_usage(function(s)
      return s.historyVersion == result.historyVersion
    end, 'the gauge after the restart')
  end)
end)
