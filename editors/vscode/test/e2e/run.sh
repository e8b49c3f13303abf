#!/usr/bin/env bash
# End-to-end check of the VS Code extension in a real VS Code (code-server 4.100.3 = VS Code
# 1.100.3, the last release for Node 20), driven by Debian's headless Chromium through
# puppeteer-core: the status-bar gauge must show the usage the daemon reported after a stand-in
# agent extension recorded a conversation through ctxd's API, and a click must open the breakdown;
# then the Snapshots tree's actions (Show Changes, Restore Files, Undo Restore, Delete, and Restore Files
# and Conversation after a later turn the agent records) on a real file and the thread's history,
# and the Compactions tree after a window reload (see check.js for every screen).
# Screenshots go to editors/vscode/test-artifacts/ (gitignored).
#
# Installs what it needs: apt (chromium, ripgrep, libkrb5-dev; as root) and npm (code-server and
# puppeteer-core into $CTXD_E2E_CACHE, default ~/.cache/ctxd-e2e). code-server's postinstall
# downloads ripgrep from GitHub; its download cache is seeded with Debian's rg instead.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
EXT="$(cd "$HERE/../.." && pwd)"
REPO="$(cd "$EXT/../.." && pwd)"
CACHE="${CTXD_E2E_CACHE:-$HOME/.cache/ctxd-e2e}"
CODE_SERVER_VERSION=4.100.3
PUPPETEER_VERSION=24.10.0
RIPGREP_PKG_VERSION=1.15.11     # @vscode/ripgrep in code-server 4.100.3
RIPGREP_RELEASE=v13.0.0-10      # the prebuilt it would download
ARTIFACTS="$EXT/test-artifacts"

log() { echo "[e2e] $*"; }

# shellcheck source=sandbox.sh
. "$HERE/sandbox.sh"

# --- the daemon's interpreter, as an absolute path ---------------------------------------------
# code-server rebuilds the extension host's PATH from a login shell (pyenv shims first, an
# activated venv gone), so a bare `python3` in the setting may have no ctxd. Take the interpreter
# that runs this script's environment (the venv .ci/run activated) and check it can run ctxd.
PYTHON="$("${CTXD_TEST_PYTHON:-python3}" -c 'import sys; print(sys.executable)')"
if ! PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}" "$PYTHON" -m ctxd --version >/dev/null; then
  echo "[e2e] $PYTHON cannot run ctxd: activate the venv that has it installed, or set CTXD_TEST_PYTHON" >&2
  exit 1
fi
log "daemon: $PYTHON -m ctxd"

trap '[[ "${KEEP:-0}" == 1 ]] || rm -rf "$WORK"' EXIT

# --- system packages --------------------------------------------------------------------------
need=()
command -v chromium >/dev/null || need+=(chromium)
command -v rg >/dev/null || need+=(ripgrep)
command -v git >/dev/null || need+=(git)
dpkg -s libkrb5-dev >/dev/null 2>&1 || need+=(libkrb5-dev)
if ((${#need[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "[e2e] missing ${need[*]} and not root: install them with apt-get" >&2
    exit 1
  fi
  log "apt-get install ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# --- code-server and puppeteer-core ---------------------------------------------------------------
CODE_SERVER="$CACHE/node_modules/.bin/code-server"
if ! "$CODE_SERVER" --version 2>/dev/null | grep -q "^$CODE_SERVER_VERSION " ||
   [[ ! -d "$CACHE/node_modules/puppeteer-core" ]]; then
  case "$(uname -m)" in
    x86_64) rg_target=x86_64-unknown-linux-musl ;;
    aarch64) rg_target=aarch64-unknown-linux-musl ;;
    *) echo "[e2e] no ripgrep target for $(uname -m)" >&2; exit 1 ;;
  esac
  rg_cache="$(node -p 'require("os").tmpdir()')/vscode-ripgrep-cache-$RIPGREP_PKG_VERSION"
  mkdir -p "$rg_cache"
  rg_stage="$(mktemp -d)"
  cp "$(command -v rg)" "$rg_stage/rg"
  tar czf "$rg_cache/ripgrep-$RIPGREP_RELEASE-$rg_target.tar.gz" -C "$rg_stage" rg
  rm -rf "$rg_stage"
  # A postinstall (node-gyp) has been seen to fail once and pass on the next try: three tries,
  # each from an empty folder so a half-built module is never reused.
  for try in 1 2 3; do
    log "npm install code-server@$CODE_SERVER_VERSION puppeteer-core@$PUPPETEER_VERSION into $CACHE (try $try)"
    rm -rf "$CACHE/node_modules" "$CACHE/package.json" "$CACHE/package-lock.json"
    mkdir -p "$CACHE"
    if npm_config_unsafe_perm=true npm_config_yes=true \
      npm install --no-save --no-audit --no-fund --loglevel=error --prefix "$CACHE" \
      "code-server@$CODE_SERVER_VERSION" "puppeteer-core@$PUPPETEER_VERSION" >"$CACHE/npm-install.log" 2>&1 &&
      "$CODE_SERVER" --version >/dev/null 2>&1; then
      break
    fi
    tail -30 "$CACHE/npm-install.log" >&2
    if ((try == 3)); then
      echo "[e2e] npm install of code-server failed three times" >&2
      exit 1
    fi
    sleep $((try * 5))
  done
fi
"$CODE_SERVER" --version | head -1

# --- the extension, the stand-in agent, the compiled gauge functions ---------------------------
cd "$EXT"
[[ -d node_modules ]] || npm ci --no-audit --no-fund
VSIX="$EXT/ctxd-0.1.0.vsix"
[[ -f "$VSIX" ]] || npx @vscode/vsce package >/dev/null
npx tsc -p tsconfig.test.json
AGENT_VSIX="$WORK/ctxd-e2e-agent.vsix"
(cd "$HERE/agent" && npx --prefix "$EXT" vsce package --skip-license --allow-missing-repository -o "$AGENT_VSIX" >/dev/null)

# --- one workspace, the daemon's state, one code-server session per scenario ----------------------
WS="$WORK/workspace"; STATE="$XDG_STATE_HOME"; EXTENSIONS="$WORK/extensions"
mkdir -p "$WS" "$STATE" "$EXTENSIONS"
git -C "$WS" init -q
printf 'print("hello")\n' > "$WS/main.py"
git -C "$WS" add main.py
git -C "$WS" -c user.name=e2e -c user.email=e2e@example.invalid commit -q -m init
"$CODE_SERVER" --config "$WORK/config.yaml" --user-data-dir "$WORK/install" --extensions-dir "$EXTENSIONS" --install-extension "$VSIX" >/dev/null
"$CODE_SERVER" --config "$WORK/config.yaml" --user-data-dir "$WORK/install" --extensions-dir "$EXTENSIONS" --install-extension "$AGENT_VSIX" >/dev/null
"$CODE_SERVER" --config "$WORK/config.yaml" --user-data-dir "$WORK/install" --extensions-dir "$EXTENSIONS" --list-extensions --show-versions

export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"

# The agents' homes are the check's own: the Claude Code session ctxd follows (the real Claude Code
# 2.1.332 transcript of tests/fixtures/agents, its folder made this workspace) and the settings
# "Install Agent Hooks" writes, never the user's ~/.claude or ~/.codex.
AGENT_HOME="$WORK/home"
CLAUDE_PROJECT="$AGENT_HOME/.claude/projects/$(printf '%s' "$WS" | sed 's/[^A-Za-z0-9]/-/g')"
mkdir -p "$CLAUDE_PROJECT" "$AGENT_HOME/.codex"
sed "s#/home/user/app#$WS#g" "$REPO/tests/fixtures/agents/claude-2.1.332.jsonl" > "$CLAUDE_PROJECT/2009bcc5-85ba-431c-b4e2-481f4e482c80.jsonl"
trap cleanup EXIT
CS_PID=""
stop_session() {
  [[ -n "$CS_PID" ]] || return 0
  kill -TERM -- "-$CS_PID" 2>/dev/null || true
  for _ in $(seq 1 20); do kill -0 -- "-$CS_PID" 2>/dev/null || break; sleep 0.25; done
  kill -KILL -- "-$CS_PID" 2>/dev/null || true
  CS_PID=""
}
cleanup() {
  stop_session
  if [[ "${KEEP:-0}" != 1 ]]; then rm -rf "$WORK"; fi
}

# session MODE DAEMON_COMMAND_JSON: a fresh profile whose ctxd.daemon.command is the given JSON
# array, code-server in its own process group (so stopping it stops the extension host and the
# daemon too), and check.js in that MODE.
session() {
  local mode="$1" command="$2" user_data="$WORK/user-data-$1" port status=0
  # CTXD_E2E_ONLY=main (or crash, missing): run that session only, while working on it.
  [[ -z "${CTXD_E2E_ONLY:-}" || "$CTXD_E2E_ONLY" == "$mode" ]] || { log "[$mode] skipped (CTXD_E2E_ONLY=$CTXD_E2E_ONLY)"; return 0; }
  mkdir -p "$user_data/User"
  cat > "$user_data/User/settings.json" <<JSON
{
  "ctxd.daemon.command": $command,
  "ctxd.contextWindow": 128000,
  "workbench.startupEditor": "none",
  "window.autoDetectColorScheme": true,
  "workbench.preferredLightColorTheme": "Default Light Modern",
  "workbench.preferredDarkColorTheme": "Default Dark Modern",
  "workbench.tips.enabled": false,
  "workbench.enableExperiments": false,
  "security.workspace.trust.enabled": false,
  "telemetry.telemetryLevel": "off",
  "update.mode": "none",
  "extensions.autoUpdate": false,
  "extensions.autoCheckUpdates": false
}
JSON
  port="$(node -e 'const s=require("net").createServer().listen(0,"127.0.0.1",()=>{console.log(s.address().port);s.close()})')"
  rm -rf "$WS/.ctxd-e2e"
  setsid env HOME="$AGENT_HOME" CLAUDE_CONFIG_DIR="$AGENT_HOME/.claude" CODEX_HOME="$AGENT_HOME/.codex" "$CODE_SERVER" --config "$WORK/config.yaml" --user-data-dir "$user_data" --extensions-dir "$EXTENSIONS" \
    --bind-addr "127.0.0.1:$port" --auth none --disable-telemetry --disable-update-check \
    --disable-workspace-trust --disable-getting-started-override "$WS" >"$WORK/code-server-$mode.log" 2>&1 &
  CS_PID=$!
  for _ in $(seq 1 120); do
    curl -fsS -o /dev/null "http://127.0.0.1:$port/healthz" 2>/dev/null && break
    kill -0 "$CS_PID" 2>/dev/null || { cat "$WORK/code-server-$mode.log"; return 1; }
    sleep 0.5
  done
  log "[$mode] code-server on 127.0.0.1:$port"
  CTXD_E2E_AGENT_HOME="$AGENT_HOME" CTXD_E2E_MODE="$mode" CTXD_E2E_URL="http://127.0.0.1:$port/?folder=$WS" CTXD_E2E_WORKSPACE="$WS" CTXD_E2E_PYTHON="$PYTHON" CTXD_E2E_USER_DATA="$user_data" \
    CTXD_E2E_ARTIFACTS="$ARTIFACTS" CHROMIUM="$(command -v chromium)" NODE_PATH="$CACHE/node_modules" \
    node "$HERE/check.js" || status=$?
  if ((status)); then
    log "code-server log:"; tail -50 "$WORK/code-server-$mode.log"
    log "extension host logs:"; find "$user_data/logs" -name '*.log' \( -path '*exthost*' -o -name '*ctxd*' \) -exec tail -30 {} + 2>/dev/null || true
  fi
  stop_session
  return $status
}

# The real daemon, killed five seconds after it starts (it is serving by then): the client restarts
# it four times, then stops.
CRASHING="import os, runpy, sys, threading; ('--stdio' in sys.argv) and threading.Timer(5.0, lambda: os._exit(1)).start(); sys.argv = ['ctxd'] + sys.argv[1:]; runpy.run_module('ctxd', run_name='__main__')"
session main "[\"$PYTHON\", \"-m\", \"ctxd\"]"
session crash "[\"$PYTHON\", \"-c\", \"$CRASHING\"]"
# -I -S: this Python cannot import ctxd (no site-packages, no PYTHONPATH).
session missing "[\"$PYTHON\", \"-I\", \"-S\", \"-m\", \"ctxd\"]"
log "all sessions passed; screenshots in $ARTIFACTS"
