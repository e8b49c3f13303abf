#!/usr/bin/env bash
# Captures what a user sees: Neovim in a real terminal (tmux, 120x32) with the plugin and the real
# daemon, driven by keystrokes; each screen is saved as text under editors/nvim/test-artifacts/.
#   editors/nvim/tests/capture.sh            (needs tmux; nvim 0.11 from pip install -e '.[dev]')
# A capture is for looking at, not a test: the specs in tests/spec assert the same behaviour.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
plugin="$(cd "$here/.." && pwd)"
repo="$(cd "$plugin/../.." && pwd)"
nvim="${NVIM:-nvim}"
python="${CTXD_PYTHON:-$(command -v python3)}"
out="$plugin/test-artifacts"
mkdir -p "$out"
tmp="$(mktemp -d "${TMPDIR:-/tmp}/ctxd-capture.XXXXXX")"
session="ctxd-capture-$$"
cleanup() { tmux kill-session -t "$session" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

mkdir -p "$tmp"/{config,data,state,cache,home,ws/src}
ws="$tmp/ws"
git -C "$ws" init -q
printf 'def add(a, b):\n    return a + b\n' >"$ws/src/calc.py"
printf '# demo\n' >"$ws/README.md"
git -C "$ws" add -A
git -C "$ws" -c user.name=demo -c user.email=demo@example.com commit -qm init

cat >"$tmp/init.lua" <<EOF
vim.opt.runtimepath:prepend('$plugin')
vim.cmd.runtime('plugin/ctxd.lua')
vim.o.laststatus = 2
vim.o.statusline = "%f %= %{%v:lua.require'ctxd'.statusline()%} "
require('ctxd').setup({ cmd = { '$python', '-m', 'ctxd' }, cmd_env = { PYTHONPATH = '$repo' }, enable = true })
EOF

# What an agent plugin would do: a conversation in two threads, with a prompt context.
cat >"$tmp/agent.lua" <<'EOF'
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
api.set_prompt_context({ model = 'gpt-5', baseInstructions = text(1500, 3),
  tools = { { name = 'shell', kind = 'builtin', schema = { type = 'object' } },
            { name = 'mcp__github__create_pull_request_review_with_comments', kind = 'mcp', schema = { description = text(300, 9) } } } },
  { thread = 'refactor-parser' })
api.record({ user('Refactor the parser so errors carry line numbers. ' .. text(2000, 1)), assistant(text(3000, 2)) }, { thread = 'refactor-parser' })
api.record({ user('Fix the flaky test in calc'), assistant(text(400, 5)) }, { thread = 'fix-flaky-test' })
EOF

tmux new-session -d -s "$session" -x 120 -y 32 \
  "env HOME=$tmp/home XDG_CONFIG_HOME=$tmp/config XDG_DATA_HOME=$tmp/data XDG_STATE_HOME=$tmp/state XDG_CACHE_HOME=$tmp/cache $nvim --clean -u $tmp/init.lua $ws/src/calc.py"

keys() { tmux send-keys -t "$session" "$@"; }
# Wait until the pane shows `pattern` (a grep -E regex), then save it as `name`.
capture() {
  local name="$1" pattern="$2"
  for _ in $(seq 1 150); do
    if tmux capture-pane -p -t "$session" | grep -Eq -- "$pattern"; then
      sleep 0.3
      tmux capture-pane -p -t "$session" >"$out/$name.txt"
      echo "saved $out/$name.txt"
      return 0
    fi
    sleep 0.1
  done
  tmux capture-pane -p -t "$session" >"$out/$name.txt"
  echo "did not see /$pattern/ in $name (saved what was there)" >&2
}

capture 01-started 'ctx [0-9]+% · '
keys ":luafile $tmp/agent.lua" Enter
capture 02-statusline-follows-latest-thread 'ctx [0-9]+% · [1-9]'
keys ':Ctxd usage' Enter
capture 03-usage-float 'Autocompact buffer'
keys q
keys ':Ctxd threads' Enter
capture 04-threads-picker 'Follow the most recently active'
keys '2' Enter
capture 05-picked-thread 'ctxd: following'
# A Codex CLI session starts in the workspace (a rollout file as codex-rs writes it). Its times
# have whole seconds: start it in a later second than the client threads' activity.
sleep 1.2
ts="$(date -u +%Y-%m-%dT%H:%M:%S.000Z)"
day="$(date -u +%Y/%m/%d)"
sid=0199a213-81c0-7800-8aa1-bbab2a035a53
mkdir -p "$tmp/home/.codex/sessions/$day"
cat >"$tmp/home/.codex/sessions/$day/rollout-$(date -u +%Y-%m-%dT%H-%M-%S)-$sid.jsonl" <<JSONL
{"timestamp":"$ts","type":"session_meta","payload":{"id":"$sid","timestamp":"$ts","cwd":"$ws","originator":"codex_cli_rs","cli_version":"0.46.0","source":"cli","model_provider":"openai"}}
{"timestamp":"$ts","type":"turn_context","payload":{"cwd":"$ws","approval_policy":"on-request","sandbox_policy":{"type":"workspace-write"},"model":"gpt-5-codex","effort":"medium","summary":"auto"}}
{"timestamp":"$ts","type":"response_item","payload":{"type":"message","role":"user","content":[{"type":"input_text","text":"Make add() handle None and add a test for it"}]}}
{"timestamp":"$ts","type":"event_msg","payload":{"type":"user_message","message":"Make add() handle None and add a test for it","images":[]}}
{"timestamp":"$ts","type":"event_msg","payload":{"type":"task_started","model_context_window":128000}}
{"timestamp":"$ts","type":"response_item","payload":{"type":"message","role":"assistant","content":[{"type":"output_text","text":"Looking at calc.py."}]}}
{"timestamp":"$ts","type":"event_msg","payload":{"type":"token_count","info":{"total_token_usage":{"input_tokens":54700,"cached_input_tokens":0,"output_tokens":300,"reasoning_output_tokens":0,"total_tokens":55000},"last_token_usage":{"input_tokens":54700,"cached_input_tokens":0,"output_tokens":300,"reasoning_output_tokens":0,"total_tokens":55000},"model_context_window":128000}}}
JSONL
sleep 3 # the daemon follows a new session within a second; the picker below is a static prompt
keys ':Ctxd threads' Enter
capture 06a-threads-with-codex 'Codex'
keys '1' Enter
capture 06b-statusline-follows-codex 'Codex [0-9]+% · '
keys ':Ctxd snapshot before the edit' Enter
capture 06-snapshot 'ctxd: snapshot '
keys ":!printf 'def add(a, b):\\n    return a + b + 0\\n' > $ws/src/calc.py" Enter
sleep 0.5
keys Enter ':edit!' Enter
keys ':Ctxd diff' Enter
capture 07-diff-pick-snapshot 'Changes since snapshot'
keys '1' Enter
capture 08-diff-quickfix 'modified'
keys Enter
capture 09-diff-view 'ctxd://snapshot'
keys ':tabclose' Enter ':cclose' Enter
keys ':checkhealth ctxd' Enter
capture 10-checkhealth 'ctxd: state directory'
keys ':qa!' Enter
