-- Followed agent sessions against the real daemon (protocol 2): a Codex CLI session that starts
-- in the workspace becomes a thread; the gauge follows it with the source's label; the picker shows
-- its title; its conversation is the agent's, so :Ctxd restore offers its files only.
-- The session file is written as Codex CLI writes it (codex-rs/protocol: RolloutLine), under
-- $HOME/.codex (run.sh points HOME into the spec's temp folder).
local t = require('harness')
local h = require('helpers')

local client ---@type vim.lsp.Client
local written ---@type string? the rollout file of the session
local SESSION = '0199a213-81c0-7800-8aa1-bbab2a035a53'

local function now()
  return os.date('!%Y-%m-%dT%H:%M:%S.000Z')
end

--- Write (or extend) a Codex rollout file for a session working in the workspace.
local function write_codex_session(records)
  local day = os.date('!%Y/%m/%d')
  local dir = vim.fs.joinpath(vim.env.HOME, '.codex', 'sessions', day)
  vim.fn.mkdir(dir, 'p')
  local path = vim.fs.joinpath(dir, ('rollout-%s-%s.jsonl'):format(os.date('!%Y-%m-%dT%H-%M-%S'), SESSION))
  local lines = vim.tbl_map(vim.json.encode, records)
  vim.fn.writefile(lines, path)
  written = path
  return path
end

local function codex_records(text, used, window)
  local ts = now()
  return {
    { timestamp = ts, type = 'session_meta', payload = {
      id = SESSION, timestamp = ts, cwd = h.workspace, originator = 'codex_cli_rs', cli_version = '0.46.0',
      source = 'cli', model_provider = 'openai' } },
    { timestamp = ts, type = 'turn_context', payload = {
      cwd = h.workspace, approval_policy = 'on-request', sandbox_policy = { type = 'workspace-write' },
      model = 'gpt-5-codex', effort = 'medium', summary = 'auto' } },
    { timestamp = ts, type = 'response_item', payload = {
      type = 'message', role = 'user', content = { { type = 'input_text', text = text } } } },
    { timestamp = ts, type = 'event_msg', payload = { type = 'user_message', message = text, images = {} } },
    { timestamp = ts, type = 'event_msg', payload = { type = 'task_started', model_context_window = window } },
    { timestamp = ts, type = 'response_item', payload = {
      type = 'message', role = 'assistant', content = { { type = 'output_text', text = 'Looking at it.' } } } },
    { timestamp = ts, type = 'event_msg', payload = { type = 'token_count', info = {
      total_token_usage = { input_tokens = used - 300, cached_input_tokens = 0, output_tokens = 300,
        reasoning_output_tokens = 0, total_tokens = used },
      last_token_usage = { input_tokens = used - 300, cached_input_tokens = 0, output_tokens = 300,
        reasoning_output_tokens = 0, total_tokens = used },
      model_context_window = window } } },
  }
end

t.describe('followed sessions (protocol 2)', function()
  t.before_each(function()
    h.capture_notify()
    if not client or client:is_stopped() then
      client = h.start()
    end
  end)

  t.it('the gauge follows a Codex session that starts in the workspace, labelled Codex', function()
    require('ctxd.config').options.thread = nil
    require('ctxd.threads').reset()
    local changed = false
    vim.api.nvim_create_autocmd('User', {
      pattern = 'CtxdThreadsChanged',
      once = true,
      callback = function()
        changed = true
      end,
    })
    write_codex_session(codex_records('Fix the flaky test in calc.py', 55000, 128000))
    t.wait_for(function()
      return changed
    end, 'ctxd/threadsChanged', 20000)
    local gauge = t.wait_for(function()
      local g = require('ctxd').gauge()
      return g and g.text:match('^Codex ') and g or nil
    end, 'the gauge to show the Codex session', 20000)
    t.eq('codex:' .. SESSION, gauge.snapshot.thread)
    local info = require('ctxd.threads').info(h.uri, gauge.snapshot.thread)
    t.eq('codex', info.source)
    t.eq(true, info.readOnly)
    -- The figures are the ones the daemon lists for the thread.
    local listed = info.usage
    t.eq(('Codex %d%% · %s/%s'):format(
      math.floor(listed.percent + 0.5),
      require('ctxd.status').format_tokens(listed.usedTokens),
      require('ctxd.status').format_tokens(listed.contextWindow)
    ), gauge.text)
    t.eq(128000, listed.contextWindow)
  end)

  t.it(':Ctxd threads shows the session with its source and title', function()
    local rows
    local saved = vim.ui.select
    vim.ui.select = function(items, opts, on_choice)
      rows = vim.tbl_map(opts.format_item, items)
      vim.ui.select = saved
      on_choice(nil, nil)
    end
    vim.cmd('Ctxd threads')
    t.wait_for(function()
      return rows
    end, 'the picker')
    t.contains('(now Codex "Fix the flaky test in calc.py")', rows[1])
    -- Its cost so far, from the usage Codex reported (gpt-5-codex is priced).
    t.matches('^● Codex +%d+%% +[%d%.]+k/128k  Fix the flaky test in calc%.py +%d+[smhd]  %$%d+%.%d%d  %(read%-only%)$', rows[2])
  end)

  t.it(':Ctxd compact on a followed session says its agent compacts it, and sends nothing', function()
    local codex = 'codex:' .. SESSION
    require('ctxd.threads').pick(h.uri, codex)
    local before = h.request('ctxd/history', { thread = codex, includeArchived = true })
    vim.cmd('Ctxd compact')
    h.wait_message('this Codex session is read-only: use its Esc Esc (backtrack) or /compact; files: :Ctxd restore')
    for _, m in ipairs(h.messages) do
      t.eq(nil, m.msg:find('failed', 1, true), m.msg)
    end
    local after = h.request('ctxd/history', { thread = codex, includeArchived = true })
    t.eq(before.historyVersion, after.historyVersion)
    t.eq(0, #(after.compactions or {}))
  end)

  t.it('rollback, undo, redo and compact of a followed session: one sentence, what works instead, nothing asked', function()
    local codex = 'codex:' .. SESSION
    require('ctxd.threads').pick(h.uri, codex)
    local before = h.request('ctxd/history', { thread = codex, includeArchived = true })
    local sent = {}
    local request = require('ctxd.client').request
    require('ctxd.client').request = function(method, ...)
      table.insert(sent, method)
      return request(method, ...)
    end
    local sentence = 'this Codex session is read-only: use its Esc Esc (backtrack) or /compact; files: :Ctxd restore'
    for _, command in ipairs({ 'rollback', 'rollback 3', 'undo', 'redo', 'compact' }) do
      h.messages = {}
      vim.cmd('Ctxd ' .. command)
      local said = h.wait_message('read-only')
      t.eq('ctxd: ' .. sentence, said.full, command)
      t.eq(vim.log.levels.WARN, said.level)
    end
    require('ctxd.client').request = request
    t.eq({}, sent, 'the daemon was not asked')
    local after = h.request('ctxd/history', { thread = codex, includeArchived = true })
    t.eq(before.historyVersion, after.historyVersion)
  end)

  t.it('the float shows the cost with parts that add up, and what the agent decides', function()
    local codex = 'codex:' .. SESSION
    local result = h.request('ctxd/usage', { thread = codex })
    local text = table.concat(vim.tbl_map(function(l)
      return l.text
    end, require('ctxd.ui.view').render_breakdown(result)), '\n')
    local total, parts = text:match('cost %$(%d+%.%d%d) = (.-)\n')
    t.truthy(total, text)
    local sum = 0
    for cents in parts:gmatch('%$(%d+%.%d%d)') do
      sum = sum + math.floor(tonumber(cents) * 100 + 0.5)
    end
    t.eq(math.floor(tonumber(total) * 100 + 0.5), sum, text)
    t.contains('cache write $', text)
    t.contains("the agent's own figures: window: the rollout's model_context_window", text)
  end)

  t.it(':Ctxd restore never offers a followed session\'s conversation', function()
    local codex = 'codex:' .. SESSION
    require('ctxd.threads').pick(h.uri, codex)
    h.write('calc.py', 'v1\n')
    local snap = h.request('ctxd/ghost/snapshot', { message = 'before', thread = codex })
    h.write('calc.py', 'v2\n')
    local offered
    local saved = vim.ui.select
    vim.ui.select = function(items, opts, on_choice)
      if opts.prompt == 'Restore snapshot' then
        for i, item in ipairs(items) do
          if item.id == snap.id then
            return on_choice(item, i)
          end
        end
      end
      offered = vim.tbl_map(opts.format_item, items)
      vim.ui.select = saved
      on_choice(nil, nil)
    end
    vim.cmd('Ctxd restore')
    t.wait_for(function()
      return offered
    end, 'the choices', 20000)
    t.eq(1, #offered, vim.inspect(offered))
    t.matches('^Files only', offered[1])
    t.eq('v2\n', h.read('calc.py'))
  end)

  t.it(':checkhealth ctxd names the kinds of record an agent wrote that ctxd does not read', function()
    vim.fn.writefile({ vim.json.encode({ timestamp = now(), type = 'hologram_record', payload = {} }) }, written, 'a')
    t.wait_for(function()
      for _, src in ipairs(h.request('ctxd/status', {}).sources) do
        if src.agent == 'codex' and src.unread and #src.unread > 0 then
          return true
        end
      end
    end, 'ctxd/status to count the unread record', 20000)
    vim.cmd('silent checkhealth ctxd')
    local text = table.concat(h.lines(0), '\n')
    vim.cmd('bwipeout!')
    t.contains('Codex 0.46.0 wrote 1 kind of record ctxd does not read: hologram_record', text)
  end)

  t.it('a year-old session the daemon reads again does not take the gauge from the thread in use', function()
    local threads = require('ctxd.threads')
    require('ctxd.config').options.thread = nil
    threads.reset()
    threads.pick(h.uri, nil)
    -- The user's own thread is the one in use: it follows it.
    h.request('ctxd/record', { thread = 'mine', items = { h.user('the work of today ' .. h.text(50)) } })
    t.wait_for(function()
      return threads.current(h.uri) == 'mine'
    end, 'the gauge to follow the thread in use', 20000)
    -- Every thread the gauge shows from here on, as each usage change arrives.
    local shown = {}
    local unsubscribe = require('ctxd.status').subscribe(function()
      shown[threads.current(h.uri)] = true
    end)
    -- A session from a year ago appears on disk (a restored backup, a synced folder).
    local old = '0188b2c4-1111-7000-8000-00000000a0a0'
    local when = os.time() - 366 * 86400
    local ts = os.date('!%Y-%m-%dT%H:%M:%S.000Z', when)
    local records = codex_records('An old question from last year', 90000, 128000)
    for _, r in ipairs(records) do
      r.timestamp = ts
      if r.payload.timestamp then
        r.payload.timestamp = ts
      end
      if r.payload.id then
        r.payload.id = old
      end
    end
    local dir = vim.fs.joinpath(vim.env.HOME, '.codex', 'sessions', os.date('!%Y/%m/%d', when))
    vim.fn.mkdir(dir, 'p')
    vim.fn.writefile(vim.tbl_map(vim.json.encode, records),
      vim.fs.joinpath(dir, ('rollout-%s-%s.jsonl'):format(os.date('!%Y-%m-%dT%H-%M-%S', when), old)))
    -- The daemon reads it and reports its usage...
    t.wait_for(function()
      return require('ctxd.status').get({ workspace = h.uri, thread = 'codex:' .. old })
    end, 'the usage of the old session', 20000)
    -- ...and the gauge never leaves the thread in use, before or after the threads are read again.
    local listed = false
    require('ctxd.lsp').load_threads(client, h.uri, function()
      listed = true
    end)
    t.wait_for(function()
      return listed
    end, 'ctxd/threads')
    vim.wait(300)
    unsubscribe()
    t.eq({ mine = true }, shown)
    t.eq('mine', threads.current(h.uri))
    t.eq('mine', require('ctxd').gauge().snapshot.thread)
  end)
  t.it("a new session's gauge shows no window until the daemon knows the session's own (never /128k, then /258.4k)", function()
    local threads = require('ctxd.threads')
    require('ctxd.config').options.thread = nil
    threads.reset()
    threads.pick(h.uri, nil)
    local id = '0199b000-0000-7000-8000-00000000beef'
    -- Codex's times have whole milliseconds: start it in a later second than the thread in use.
    vim.wait(1100)
    local ts = now()
    local dir = vim.fs.joinpath(vim.env.HOME, '.codex', 'sessions', os.date('!%Y/%m/%d'))
    vim.fn.mkdir(dir, 'p')
    local path = vim.fs.joinpath(dir, ('rollout-%s-%s.jsonl'):format(os.date('!%Y-%m-%dT%H-%M-%S'), id))
    -- The first records of a session: who, where, the first prompt; no model, no window yet.
    local records = codex_records('Start a new feature', 20000, 258400)
    local first = { records[1], records[3], records[4] }
    first[1].payload.id, first[1].timestamp = id, ts
    vim.fn.writefile(vim.tbl_map(vim.json.encode, first), path)
    local shown = {}
    local unsubscribe = require('ctxd.status').subscribe(function()
      local g = require('ctxd').gauge()
      if g and g.snapshot and g.snapshot.thread == 'codex:' .. id then
        table.insert(shown, g.text)
      end
    end)
    local early = t.wait_for(function()
      local g = require('ctxd').gauge()
      return g and g.snapshot and g.snapshot.thread == 'codex:' .. id and g or nil
    end, 'the gauge to follow the new session', 20000)
    t.matches('^Codex [%d%.]+k?$', early.text, 'no window before the model is known')
    -- Then the turn's context (the model) and Codex's own count with the session's window.
    local rest = { records[2], records[5], records[6], records[7] }
    vim.fn.writefile(vim.tbl_map(vim.json.encode, rest), path, 'a')
    t.wait_for(function()
      local g = require('ctxd').gauge()
      return g and g.text:find('/258.4k', 1, true)
    end, 'the session\'s own window (shown: ' .. vim.inspect(shown) .. ')', 20000)
    unsubscribe()
    for _, text in ipairs(shown) do
      t.eq(nil, text:find('/128k', 1, true), vim.inspect(shown))
    end
  end)
end)
