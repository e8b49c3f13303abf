-- A small describe/it harness for `nvim --headless --clean -l`: no plugin to clone.
--
--   local t = require('harness')
--   t.describe('gauge', function()
--     t.before_each(function() ... end)
--     t.it('shows the percentage', function() t.eq('ctx 1% 1k/128k', text) end)
--   end)
--   t.run()  -- prints one line per test and `N passed, N failed`; exits 1 on any failure
--
-- `before_each`/`after_each` apply to the tests of the describe block they are in and of the
-- blocks nested in it. A test fails when it raises; `t.eq` and friends raise with a diff.

local M = {}

---@class harness.Suite
---@field name string
---@field parent harness.Suite?
---@field before fun()[]
---@field after fun()[]

---@type { name: string, fn: fun(), suite: harness.Suite }[]
local tests = {}
---@type harness.Suite
local root = { name = '', before = {}, after = {} }
local current = root

function M.describe(name, fn)
  local suite = { name = name, parent = current, before = {}, after = {} }
  local saved = current
  current = suite
  fn()
  current = saved
end

function M.it(name, fn)
  table.insert(tests, { name = name, fn = fn, suite = current })
end

function M.before_each(fn)
  table.insert(current.before, fn)
end

function M.after_each(fn)
  table.insert(current.after, fn)
end

local function full_name(test)
  local parts = { test.name }
  local suite = test.suite
  while suite and suite.name ~= '' do
    table.insert(parts, 1, suite.name)
    suite = suite.parent
  end
  return table.concat(parts, ' › ')
end

local function chain(suite)
  local suites = {}
  while suite do
    table.insert(suites, 1, suite)
    suite = suite.parent
  end
  return suites
end

--- Raise unless `actual` equals `expected` (deeply).
function M.eq(expected, actual, what)
  if not vim.deep_equal(expected, actual) then
    error(('%sexpected %s, got %s'):format(what and (what .. ': ') or '', vim.inspect(expected), vim.inspect(actual)), 2)
  end
end

function M.truthy(value, what)
  if not value then
    error(('%sexpected a true value, got %s'):format(what and (what .. ': ') or '', vim.inspect(value)), 2)
  end
  return value
end

--- Raise unless the string `text` contains `needle` (plain).
function M.contains(needle, text, what)
  if type(text) ~= 'string' or not text:find(needle, 1, true) then
    error(('%sexpected %s in %s'):format(what and (what .. ': ') or '', vim.inspect(needle), vim.inspect(text)), 2)
  end
end

--- Raise unless the string `text` matches the Lua pattern.
function M.matches(pattern, text, what)
  if type(text) ~= 'string' or not text:match(pattern) then
    error(('%sexpected a match for %s in %s'):format(what and (what .. ': ') or '', vim.inspect(pattern), vim.inspect(text)), 2)
  end
end

--- Print a note under the running test (e.g. which of two accepted outcomes happened).
function M.note(text)
  io.stdout:write(('        note: %s\n'):format(text))
end

--- Run the event loop until `cond()` is true; raise with `what` after `timeout_ms`.
function M.wait_for(cond, what, timeout_ms)
  local value
  local ok = vim.wait(timeout_ms or 10000, function()
    value = cond()
    return value
  end, 10)
  if not ok then
    error(('timed out waiting for %s'):format(what or 'a condition'), 2)
  end
  return value
end

--- Run every registered test; print results; exit with 1 if any failed (unless `opts.exit == false`).
function M.run(opts)
  opts = opts or {}
  local passed, failed = 0, 0
  for _, test in ipairs(tests) do
    local suites = chain(test.suite)
    local ok, err = true, nil
    for _, suite in ipairs(suites) do
      for _, fn in ipairs(suite.before) do
        if ok then
          ok, err = xpcall(fn, debug.traceback)
        end
      end
    end
    if ok then
      ok, err = xpcall(test.fn, debug.traceback)
    end
    for i = #suites, 1, -1 do
      for _, fn in ipairs(suites[i].after) do
        local after_ok, after_err = xpcall(fn, debug.traceback)
        if ok and not after_ok then
          ok, err = false, after_err
        end
      end
    end
    if ok then
      passed = passed + 1
      io.stdout:write(('  ok    %s\n'):format(full_name(test)))
    else
      failed = failed + 1
      io.stdout:write(('  FAIL  %s\n%s\n'):format(full_name(test), tostring(err):gsub('\n', '\n        ')))
    end
  end
  io.stdout:write(('%d passed, %d failed\n'):format(passed, failed))
  tests = {}
  if opts.exit ~= false then
    os.exit(failed == 0 and 0 or 1)
  end
  return passed, failed
end

return M
