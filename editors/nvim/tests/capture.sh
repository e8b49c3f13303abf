#!/usr/bin/env bash
# What a user sees, checked: Neovim in a real terminal (tmux) with the plugin, Neovim's own
# vim.notify (the specs replace it) and the real daemon, driven by keystrokes. Each screen is saved
# as text; the run fails (exit 1) when a screen shows a "Press ENTER" prompt, a Lua error or a
# stack trace, or lacks what its scenario must show.
#   editors/nvim/tests/capture.sh [--out DIR] [missing|float|diff|tour ...]   (default: all four)
# Needs tmux (Debian: apt-get install tmux) and nvim 0.11 (pip install -e '.[dev]' brings it).
# Screens go to editors/nvim/test-artifacts/ unless --out says where.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
plugin="$(cd "$here/.." && pwd)"
repo="$(cd "$plugin/../.." && pwd)"
nvim="$(command -v "${NVIM:-nvim}" || true)"
python="${CTXD_PYTHON:-$(command -v python3)}"
out="$plugin/test-artifacts"
if [ "${1:-}" = "--out" ]; then
  out="$2"
  shift 2
fi
scenarios=("$@")
[ "${#scenarios[@]}" -gt 0 ] || scenarios=(missing float diff tour)

command -v tmux >/dev/null || { echo "capture: tmux is not installed (Debian: apt-get install tmux)"; exit 2; }
[ -n "$nvim" ] || { echo "capture: nvim not found (pip install -e '.[dev]' brings Neovim 0.11)"; exit 2; }
mkdir -p "$out"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/ctxd-capture.XXXXXX")"
session="ctxd-capture-$$"
# A tmux server of its own (its own socket): nothing of the user's sessions is touched.
tmux() { command tmux -L "$session" "$@"; }
failures=()
cleanup() { tmux kill-server 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

fail() { failures+=("$1"); echo "  FAIL  $1"; }
keys() { tmux send-keys -t "$session" "$@"; }
screen() { tmux capture-pane -p -t "$session"; }

# Wait until the pane shows `pattern` (grep -E), up to 20 s; false if it never does.
wait_for() {
  local pattern="$1"
  for _ in $(seq 1 200); do
    if screen | grep -Eq -- "$pattern"; then
      return 0
    fi
    sleep 0.1
  done
  return 1
}

# Save the pane as `name`.txt once it shows `pattern` (then a moment for a prompt to follow),
# and check it: no "Press ENTER", no Lua error, no stack trace.
capture() {
  local name="$1" pattern="$2"
  wait_for "$pattern" || fail "$name: never showed /$pattern/"
  sleep 0.5
  screen >"$out/$name.txt"
  echo "saved $out/$name.txt"
  if grep -Eq 'Press ENTER|stack traceback|E5108|Error executing|Error detected|E149' "$out/$name.txt"; then
    fail "$name: a prompt, an error or a stack trace: $(grep -Em1 'Press ENTER|stack traceback|E5108|Error executing|Error detected|E149' "$out/$name.txt")"
  fi
}

# The saved screen `name` shows `pattern` (grep -E), or the check fails with `what`.
expect() {
  grep -Eq -- "$2" "$out/$1.txt" || fail "$1: $3"
}

# A screen's widest run of a float's top border, in cells (0 when there is none).
float_width() {
  python3 - "$out/$1.txt" <<'PY'
import re, sys
widest = 0
for line in open(sys.argv[1], encoding="utf-8"):
    m = re.search(r"╭[^╮]*╮", line)
    if m:
        widest = max(widest, len(m.group(0)))
print(widest)
PY
}

# A fresh workspace (a git repository with two files) under $tmp/$1.
workspace() {
  local ws="$tmp/$1"
  mkdir -p "$ws/src"
  git -C "$ws" init -q
  printf 'def add(a, b):\n    return a + b\n' >"$ws/src/calc.py"
  printf 'this file goes away\n' >"$ws/notes.txt"
  printf '# demo\n' >"$ws/README.md"
  git -C "$ws" add -A
  git -C "$ws" -c user.name=demo -c user.email=demo@example.com commit -qm init
  echo "$ws"
}

# An init.lua for Neovim with the plugin; $1: the setup() options (Lua).
init_lua() {
  cat >"$tmp/init.lua" <<EOF
vim.opt.runtimepath:prepend('$plugin')
vim.cmd.runtime('plugin/ctxd.lua')
vim.o.laststatus = 2
vim.o.statusline = "%f %= %{%v:lua.require'ctxd'.statusline()%} "
require('ctxd').setup($1)
EOF
}

# Start Neovim in tmux, $1 x $2 cells, on file $3, with the environment of ctxd's home in $tmp.
start() {
  tmux kill-session -t "$session" 2>/dev/null || true
  mkdir -p "$tmp"/{config,data,state,cache,home}
  tmux new-session -d -s "$session" -x "$1" -y "$2" \
    "env ${START_ENV:-} HOME=$tmp/home XDG_CONFIG_HOME=$tmp/config XDG_DATA_HOME=$tmp/data XDG_STATE_HOME=$tmp/state XDG_CACHE_HOME=$tmp/cache $nvim --clean -u $tmp/init.lua $3"
}

daemon="{ cmd = { '$python', '-m', 'ctxd' }, cmd_env = { PYTHONPATH = '$repo' }, enable = true }"

# What an agent plugin would do: a thread with a prompt context and a conversation (waits for
# the client first; `:luafile` it).
cat >"$tmp/agent.lua" <<'EOF'
vim.wait(20000, function()
  local c = vim.lsp.get_clients({ name = 'ctxd' })[1]
  return c ~= nil and c.initialized
end, 50)
local api = require('ctxd.api')
local function text(n, seed)
  local s, words = seed, {}
  for i = 1, n do
    s = (s * 1103515245 + 12345) % 2147483648
    words[i] = ('w%x'):format(s % 65536)
  end
  return table.concat(words, ' ')
end
local function user(t) return { type = 'message', role = 'user', content = { { type = 'input_text', text = t } } } end
local function assistant(t) return { type = 'message', role = 'assistant', content = { { type = 'output_text', text = t } } } end
local tools = {}
for _, name in ipairs({ 'shell', 'apply_patch', 'read_file', 'list_dir', 'grep', 'web_search', 'update_plan' }) do
  table.insert(tools, { name = name, kind = 'builtin', schema = { description = text(60, #name) } })
end
for i, name in ipairs({ 'github__create_pull_request_review_with_comments', 'github__list_issues', 'fs__read',
  'fs__write', 'jira__search', 'sentry__events', 'slack__post' }) do
  table.insert(tools, { name = 'mcp__' .. name, kind = 'mcp', schema = { description = text(80 + i * 10, i) } })
end
-- A model ctxd's catalogue does not know: the float says where its window comes from (a long note).
api.set_prompt_context({ model = 'acme-coder-large-2026-preview', baseInstructions = text(1500, 3), tools = tools,
  memoryFiles = { { path = 'AGENTS.md', content = text(400, 4) }, { path = 'docs/STYLE.md', content = text(300, 5) } } },
  { thread = 'refactor-parser' })
api.record({ user('Refactor the parser so errors carry line numbers. ' .. text(2000, 1)), assistant(text(3000, 2)),
  { type = 'function_call', name = 'shell', call_id = 'c1', arguments = '{"cmd":"pytest -q"}' },
  { type = 'function_call_output', call_id = 'c1', output = text(800, 6) },
  { type = 'reasoning', summary = { { type = 'summary_text', text = text(300, 7) } } },
  user('Now the tests'), assistant(text(400, 5)) }, { thread = 'refactor-parser' })
api.set_thread('refactor-parser')
EOF

scenario_missing() {
  echo "== missing: ctxd not on PATH, a file opened in a repository"
  local ws
  ws="$(workspace missing)"
  init_lua "{ enable = true }"
  # A PATH without ctxd (nvim is named by its absolute path).
  if PATH=/usr/bin:/bin command -v ctxd >/dev/null; then
    fail "missing: ctxd is installed in /usr/bin or /bin; this scenario needs a PATH without it"
    return
  fi
  START_ENV="PATH=/usr/bin:/bin" start 100 24 "$ws/src/calc.py"
  capture missing-01-open-a-file 'not installed'
  expect missing-01-open-a-file 'ctx not installed' "the gauge says 'ctx not installed'"
  expect missing-01-open-a-file 'ctxd: the daemon is not installed \(ctxd not found\)' "one line says it"
  keys ':Ctxd usage' Enter
  capture missing-02-a-command 'usage failed'
  expect missing-02-a-command 'usage failed: the daemon is not installed; :checkhealth' "the command names the way out"
  keys ':qa!' Enter
}

scenario_float() {
  echo "== float: :Ctxd usage at 200x50 and at 80x24"
  local ws
  ws="$(workspace float)"
  init_lua "$daemon"
  start 200 50 "$ws/src/calc.py"
  keys ":luafile $tmp/agent.lua" Enter
  capture float-00-gauge 'ctx [0-9]+% · [0-9.]+k/'
  keys ':Ctxd usage' Enter
  capture float-01-200x50 'Autocompact buffer'
  local width
  width="$(float_width float-01-200x50)"
  [ "$width" -gt 0 ] && [ "$width" -le 92 ] || fail "float-01-200x50: the float is $width cells wide (about 90 at most)"
  expect float-01-200x50 "acme-coder-large-2026-preview' is not in" "the long note is there"
  expect float-01-200x50 '╰' "the float's bottom border shows: every row is on screen"
  keys q
  tmux resize-window -t "$session" -x 80 -y 24
  sleep 0.5
  keys ':Ctxd usage' Enter
  capture float-02-80x24 'Autocompact buffer'
  width="$(float_width float-02-80x24)"
  [ "$width" -gt 0 ] && [ "$width" -le 80 ] || fail "float-02-80x24: the float is $width cells wide"
  expect float-02-80x24 '╰' "the float's bottom border shows: every row is on screen"
  expect float-02-80x24 'Free space' "the space rows show"
  keys q ':qa!' Enter
}

scenario_diff() {
  echo "== diff: the quickfix list of :Ctxd diff, :cc and :cnext, a deleted file"
  local ws
  ws="$(workspace diff)"
  init_lua "$daemon"
  start 120 32 "$ws/README.md"
  keys ":luafile $tmp/agent.lua" Enter
  wait_for 'ctx [0-9]+% · ' || fail "diff: the gauge never showed"
  keys ':Ctxd snapshot before the edit' Enter
  capture diff-00-snapshot 'ctxd: snapshot '
  printf 'def add(a, b):\n    return a + b + 0\n' >"$ws/src/calc.py"
  rm "$ws/notes.txt"
  printf 'new\n' >"$ws/added.txt"
  local id
  id="$(grep -Eo 'snapshot [0-9a-f]{10}' "$out/diff-00-snapshot.txt" | head -n1 | cut -d' ' -f2)"
  keys ":Ctxd diff $id" Enter
  capture diff-01-quickfix 'deleted'
  # The list is by path: added.txt, notes.txt (deleted), src/calc.py (modified).
  keys ':cc 1' Enter
  capture diff-02-cc-added '│  new'
  expect diff-02-cc-added '[0-9a-f]{30,}/added.txt' "the entry opens the diff (ctxd://diff/<id>/added.txt), not the plain file"
  keys ':cnext' Enter
  capture diff-03-cnext-deleted 'this file goes away'
  expect diff-03-cnext-deleted 'ctxd://deleted/notes.txt' "the deleted file's working side, its snapshot text beside it"
  keys ':cnext' Enter
  capture diff-04-cnext-modified 'return a \+ b \+ 0'
  expect diff-04-cnext-modified '[0-9a-f]{30,}/src/calc.py' "the entry opens the diff, not the plain file"
  expect diff-04-cnext-modified '^ +return a \+ b +│' "the snapshot's side shows, beside the working file"
  keys ':qa!' Enter
}

scenario_tour() {
  echo "== tour: threads, a followed Codex session, health"
  local ws
  ws="$(workspace tour)"
  init_lua "$daemon"
  start 120 32 "$ws/src/calc.py"
  keys ":luafile $tmp/agent.lua" Enter
  capture tour-01-statusline 'ctx [0-9]+% · [1-9]'
  keys ':Ctxd threads' Enter
  capture tour-02-threads-picker 'Follow the most recently active'
  keys '1' Enter # follow the most recently active thread (agent.lua picked one)
  # A Codex CLI session starts in the workspace (a rollout file as codex-rs writes it), in a later
  # second than the client thread's activity (its times have whole seconds).
  sleep 1.2
  local ts day sid
  ts="$(date -u +%Y-%m-%dT%H:%M:%S.000Z)"
  day="$(date -u +%Y/%m/%d)"
  sid=0199a213-81c0-7800-8aa1-bbab2a035a53
  mkdir -p "$tmp/home/.codex/sessions/$day"
  cat >"$tmp/home/.codex/sessions/$day/rollout-$(date -u +%Y-%m-%dT%H-%M-%S)-$sid.jsonl" <<JSONL
{"timestamp":"$ts","type":"session_meta","payload":{"id":"$sid","timestamp":"$ts","cwd":"$ws","originator":"codex_cli_rs","cli_version":"0.46.0","source":"cli","model_provider":"openai"}}
{"timestamp":"$ts","type":"turn_context","payload":{"cwd":"$ws","approval_policy":"on-request","sandbox_policy":{"type":"workspace-write"},"model":"gpt-5-codex","effort":"medium","summary":"auto"}}
{"timestamp":"$ts","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"Make add() handle None and add a test for it"}]}}
{"timestamp":"$ts","type":"event_msg","payload":{"type":"user_message","message":"Make add() handle None and add a test for it","images":[]}}
{"timestamp":"$ts","type":"event_msg","payload":{"type":"task_started","model_context_window":258400}}
{"timestamp":"$ts","type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Looking at calc.py."}]}}
{"timestamp":"$ts","type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":54700,"cached_input_tokens":0,"output_tokens":300,"reasoning_output_tokens":0,"total_tokens":55000},"last_token_usage":{"input_tokens":54700,"cached_input_tokens":0,"output_tokens":300,"reasoning_output_tokens":0,"total_tokens":55000},"model_context_window":258400}}}
JSONL
  capture tour-03-statusline-follows-codex 'Codex [0-9]+% · [0-9.]+k/258.4k'
  keys ':Ctxd rollback' Enter
  capture tour-04-read-only-refusal 'read-only'
  keys ':Ctxd menu' Enter
  capture tour-05-menu 'Time machine'
  keys Enter # an empty answer cancels
  sleep 0.3
  keys ':checkhealth ctxd' Enter
  capture tour-06-checkhealth 'ctxd: daemon status'
  keys ':qa!' Enter
}

for s in "${scenarios[@]}"; do
  case "$s" in
    missing | float | diff | tour) "scenario_$s" ;;
    *) fail "unknown scenario $s (missing, float, diff, tour)" ;;
  esac
done
tmux kill-server 2>/dev/null || true
if [ "${#failures[@]}" -gt 0 ]; then
  echo "capture: ${#failures[@]} check(s) failed"
  exit 1
fi
echo "capture: every screen clean"
