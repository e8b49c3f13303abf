"""The storm of `ctxd hooks install | uninstall` for bench/stress.py (issue #36).

install: cycles of random user configurations: Claude Code's JSON (its indentation, CRLF or LF,
  a final line end or none, a BOM, the user's hooks, some in ctxd's events, a status line of the
  user's), Codex's TOML (comments, multi-line strings and arrays, inline tables, the user's hooks
  and MCP servers, CRLF, no final line end, trailing blank lines), dotfiles links (to a file or to
  nothing), a clone's link out of the project, a read-only folder. Each cycle installs, changes
  the files as the agents would (Codex's editor appending tables inside ctxd's block and placing
  `[hooks.state]` after ctxd's hooks, the user adding a hook to ctxd's group, Claude Code
  rewriting its settings), uninstalls, and compares every file with what it should be.

Counts:
- `not_identical`: files not byte for byte what they should be, where that is known (nothing
  changed them but ctxd, or a change whose place in the file does not depend on ctxd's: a table
  appended at the end, Claude Code's own rewrite);
- `lost`: files where anything but ctxd's entries differs (parsed), or a line of the user's is
  gone or changed (every change);
- `left_over`: files still naming ctxd after the uninstall;
- `links_broken`: a link removed or replaced;
- `refusal_wrote`: a refused install (a link out of the project, a read-only folder) that changed
  a file, and `not_refused` when it did not refuse;
- `errors`: an install or uninstall that failed when it should not (its message kept, first 5).
Goal: every count is 0.

Call: `install_storm(root, cycles)` returns the figures; `install_failed(report)` the names of the
goals missed in a stress report holding them under "install".
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

from ctxd.agents import claude
from ctxd.hooks import install as hooks_install

REPO = Path(__file__).resolve().parents[1]
ENV_KEYS = ("HOME", "CODEX_HOME", "CLAUDE_CONFIG_DIR", "XDG_STATE_HOME", "XDG_CONFIG_HOME")


# --- random user configurations --------------------------------------------------------------------


def claude_settings(rng: random.Random) -> dict[str, Any]:
    value: dict[str, Any] = {"$schema": "https://json.schemastore.org/claude-code-settings.json"}
    if rng.random() < 0.7:
        value["permissions"] = {"allow": [f"Bash(npm run t{rng.randrange(9)}:*)"], "deny": []}
    if rng.random() < 0.6:
        hooks: dict[str, Any] = {}
        for event in rng.sample(["PreToolUse", "Stop", "UserPromptSubmit", "SessionStart"], rng.randint(1, 3)):
            hooks[event] = [{"matcher": "Bash", "hooks": [{"type": "command", "command": f"~/bin/{event}.sh"}]}]
        value["hooks"] = hooks
    if rng.random() < 0.4:
        value["statusLine"] = {"type": "command", "command": "echo mine", "padding": rng.randrange(3)}
    if rng.random() < 0.5:
        value["env"] = {"FOO": "é ünï", "N": str(rng.randrange(1000))}
    return value


def claude_state(rng: random.Random) -> dict[str, Any]:
    value: dict[str, Any] = {}
    if rng.random() < 0.6:
        value["mcpServers"] = {f"docs{i}": {"command": "docs-mcp", "args": ["--stdio"]} for i in range(rng.randrange(3))}
    if rng.random() < 0.5:
        value["projects"] = {"/home/me/p": {"allowedTools": [], "history": [{"display": "hi"}]}}
    value["numStartups"] = rng.randrange(100)
    return value


def json_text(rng: random.Random, value: dict[str, Any]) -> str:
    indent: int | str | None = rng.choice([2, 4, "\t", None])
    text = json.dumps(value, indent=indent, ensure_ascii=rng.random() < 0.5)
    if rng.random() < 0.8:
        text += "\n"
    if rng.random() < 0.3:
        text = text.replace("\n", "\r\n")
    if rng.random() < 0.05:
        text = "\ufeff" + text
    return text


ROOT_PIECES = [
    'model = "gpt-5.4"  # the default model',
    'approval_policy = "on-request"',
    'list_{n} = [\n  "a", # a comment\n  [1, 2],\n  "]",\n]',
    'note_{n} = """\nfirst\n[not.a.table]\n"""',
    "raw_{n} = '''\nC:\\path\\[x]\n'''",
    'inline_{n} = {{ a = 1, b = "x # not a comment" }}',
    '# a comment of the user\'s',
    '',
]
TABLE_PIECES = [
    '[features]\nmemories = true',
    '[mcp_servers.docs{n}]\ncommand = "docs-mcp"\nargs = ["--stdio"]',
    '[projects."/home/me/p{n}"]\ntrust_level = "trusted"',
    '[[hooks.PreToolUse]]\nmatcher = "Bash"\n[[hooks.PreToolUse.hooks]]\ntype = "command"\ncommand = "~/bin/guard{n}.sh"',
    '[[hooks.Stop]]\n[[hooks.Stop.hooks]]\ntype = "command"\ncommand = "notify-send done{n}"',
    '[hooks.state."/h/config.toml:stop:{n}:0"]\ntrusted_hash = "sha256:{n}"',
    '[profiles.p{n}]\nmodel = "o4"\n# profile note',
    '[tui]\nnotifications = true',
]


def codex_text(rng: random.Random) -> str:
    while True:
        parts = [p.format(n=n) for n, p in enumerate(rng.sample(ROOT_PIECES, rng.randint(0, 4)))]
        seen = set()
        for n, piece in enumerate(rng.choices(TABLE_PIECES, k=rng.randint(0, 6))):
            if piece in seen and "{n}" not in piece:
                continue
            seen.add(piece)
            parts.append(("\n" if rng.random() < 0.7 else "") + piece.format(n=n))
        text = "\n".join(parts)
        if text and rng.random() < 0.8:
            text += "\n"
        if text and rng.random() < 0.2:
            text += "\n" * rng.randint(1, 2)
        try:
            tomllib.loads(text)
        except tomllib.TOMLDecodeError:
            continue
        if rng.random() < 0.25:
            text = text.replace("\n", "\r\n")
        return text


# --- what the agents do to the files -------------------------------------------------------------


def codex_appends(text: str, table: str) -> str:
    """Codex's editor adding a table: after the file's last statement, before the blank and comment
    lines that end the file (ctxd's block's last line when it is there), LF line ends (Codex
    writes the whole file in LF)."""
    lines = text.replace("\r\n", "\n").split("\n")
    if lines[-1] == "":
        lines.pop()
    end = len(lines)
    while end > 0 and (not lines[end - 1].strip() or lines[end - 1].lstrip().startswith("#")):
        end -= 1
    body, trailer = lines[:end], lines[end:]
    return "\n".join([*body, *([""] if body else []), *table.split("\n"), *trailer]) + "\n"


def ends_with_a_comment(text: str) -> bool:
    """Whether the file's last line that is not blank is a comment (where Codex's new table goes
    differs then: before the user's comment, or after ctxd's block that follows it)."""
    lines = [line for line in text.replace("\r\n", "\n").split("\n") if line.strip()]
    return not lines or lines[-1].lstrip().startswith("#")


def codex_state_after_hooks(text: str, table: str) -> str:
    """Codex's editor adding `[hooks.state]`: after the last `[[hooks.*]]` table of the file."""
    lines = text.replace("\r\n", "\n").split("\n")
    last = max((i for i, line in enumerate(lines) if line.startswith("[[hooks.")), default=-1)
    if last < 0:
        return codex_appends(text, table)
    end = last + 1
    while end < len(lines) and lines[end] and not lines[end].startswith("["):
        end += 1
    return "\n".join(lines[:end] + ["", *table.split("\n")] + lines[end:])


def user_hook_in_ctxds_toml_group(text: str) -> str:
    """The user adds a handler of theirs to ctxd's `PreToolUse` group (after ctxd's handler)."""
    lines = text.replace("\r\n", "\n").split("\n")
    for i, line in enumerate(lines):
        if line.startswith("command = ") and "hook codex PreToolUse" in line:
            end = i + 1
            while end < len(lines) and lines[end].startswith("timeout"):
                end += 1
            return "\n".join(lines[:end] + ["[[hooks.PreToolUse.hooks]]", 'type = "command"',
                                            'command = "~/bin/mine.sh"'] + lines[end:])
    return text


# --- one cycle --------------------------------------------------------------------------------------


def run_ctxd(args: list[str], cwd: Path) -> tuple[int, str]:
    """`ctxd hooks …` in this process (its stdout and stderr joined)."""
    out = io.StringIO()
    previous = Path.cwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            code = hooks_install.main(args)
    except Exception as error:  # noqa: BLE001 - counted, never the storm's end
        return 99, f"{type(error).__name__}: {error}"
    finally:
        os.chdir(previous)
    return code, out.getvalue()


def read_only_ctxd(args: list[str], cwd: Path, folder: Path) -> tuple[int, str] | None:
    """`ctxd hooks …` as a process with `folder` read-only (a mode for a user, a read-only bind
    mount for root), or None when this machine cannot make one."""
    command = [sys.executable, "-m", "ctxd", "hooks", *args]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if os.geteuid() != 0:
        folder.chmod(0o555)
        try:
            done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
        finally:
            folder.chmod(0o755)
        return done.returncode, done.stdout + done.stderr
    script = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"'
    if shutil.which("unshare") is None or subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", str(folder), "true"],
                                                         capture_output=True).returncode != 0:
        return None
    done = subprocess.run(["unshare", "-m", "sh", "-c", script, "sh", str(folder), *command], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=120)
    return done.returncode, done.stdout + done.stderr


def snapshot(paths: list[Path]) -> dict[Path, tuple[str, bytes | str | None]]:
    state: dict[Path, tuple[str, bytes | str | None]] = {}
    for path in paths:
        if path.is_symlink():
            state[path] = ("link", os.readlink(path))
        elif path.is_file():
            state[path] = ("file", path.read_bytes())
        else:
            state[path] = ("none", None)
    return state


def semantic(path: Path, data: bytes) -> Any:
    text = data.decode("utf-8").removeprefix("\ufeff")
    return tomllib.loads(text) if path.suffix == ".toml" else (json.loads(text) if text.strip() else {})


def only_lines_removed(left: bytes, before: bytes) -> bool:
    rest = iter(before.decode().replace("\r\n", "\n").splitlines())
    return all(any(line == other for other in rest) for line in left.decode().replace("\r\n", "\n").splitlines()
               if line.strip())


def cycle(base: Path, rng: random.Random, figures: dict[str, Any], read_only: bool) -> None:
    home, project, dotfiles = base / "home", base / "proj", base / "dotfiles"
    for folder in (home, project, dotfiles):
        folder.mkdir(parents=True)
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    os.environ.update({"HOME": str(home), "XDG_STATE_HOME": str(base / "state"),
                       "XDG_CONFIG_HOME": str(home / ".config")})
    os.environ.pop("CODEX_HOME", None)
    os.environ.pop("CLAUDE_CONFIG_DIR", None)
    scope = "project" if rng.random() < 0.3 else "user"
    agents = rng.choice([["claude"], ["codex"], ["claude", "codex"]])
    if scope == "project":
        settings, mcp, codex = project / ".claude" / "settings.json", project / ".mcp.json", project / ".codex" / "config.toml"
    else:
        settings, mcp, codex = home / ".claude" / "settings.json", home / ".claude.json", home / ".codex" / "config.toml"
    files = [settings, mcp, codex]
    for path in files:
        path.parent.mkdir(parents=True, exist_ok=True)
    written: dict[Path, str] = {}
    if rng.random() < 0.8:
        written[settings] = json_text(rng, claude_settings(rng))
    if rng.random() < 0.7:
        written[mcp] = json_text(rng, claude_state(rng))
    if rng.random() < 0.8:
        written[codex] = codex_text(rng)
    refused = False
    kind = rng.random()
    if scope == "user" and kind < 0.15:  # dotfiles: ~/.codex/config.toml a link, to a file or to nothing
        target = dotfiles / "codex.toml"
        codex.unlink(missing_ok=True)
        codex.symlink_to(target)
        if codex in written and rng.random() < 0.5:
            target.write_text(written.pop(codex))
        else:
            written.pop(codex, None)
        files.append(target)
    elif scope == "project" and kind < 0.2:  # a clone's link out of the project
        planted = rng.choice([settings, mcp, codex])
        outside = dotfiles / ("user" + planted.suffix)
        outside.write_text(written.pop(planted, "{}\n" if planted.suffix == ".json" else 'model = "o3"\n'))
        planted.symlink_to(outside)
        files.append(outside)
        refused = (planted == codex and "codex" in agents) or (planted != codex and "claude" in agents)
    for path, text in written.items():
        path.write_bytes(text.encode())
    first = snapshot(files)
    read_only_folder = Path(os.path.realpath(codex)).parent if "codex" in agents and read_only else None
    if read_only_folder is not None:
        got = read_only_ctxd(["install", "--agent", "all" if len(agents) == 2 else agents[0], "--scope", scope],
                             project, read_only_folder)
        if got is None:
            figures["read_only_unavailable"] += 1
        else:
            figures["read_only_cycles"] += 1
            refused = True
            code, out = got
            _check_refusal(code, out, first, files, figures)
            return
    args = ["--agent", "all" if len(agents) == 2 else agents[0], "--scope", scope]
    code, out = run_ctxd(["install", *args], project)
    if refused:
        _check_refusal(code, out, first, files, figures)
        return
    if code != 0:
        _error(figures, f"install: {out.strip()[-300:]}")
        return
    if rng.random() < 0.2:  # a second install changes nothing
        installed = snapshot(files)
        code, out = run_ctxd(["install", *args], project)
        if code != 0 or snapshot(files) != installed:
            _error(figures, f"second install changed files: {out.strip()[-300:]}")
    expected = {p: state for p, state in first.items()}
    exact = {p: True for p in files}
    real_codex = Path(os.path.realpath(codex))
    change = rng.choice(["none", "append", "state", "user_hook", "claude_rewrite", "claude_user_hook"])
    if change in ("append", "state", "user_hook") and "codex" in agents and real_codex.exists():
        text = real_codex.read_text()
        original = first[real_codex][1] if first[real_codex][0] == "file" else None
        before = original.decode() if isinstance(original, bytes) else ""
        if change == "append":
            table = f'[mcp_servers.mydocs{rng.randrange(99)}]\ncommand = "echo"\nargs = ["hello"]'
            real_codex.write_text(codex_appends(text, table))
            expected[real_codex] = ("file", codex_appends(before, table).encode())
            exact[real_codex] = not ends_with_a_comment(before)
        elif change == "state":
            real_codex.write_text(codex_state_after_hooks(text, '[hooks.state."/h/k:pre_tool_use:0:0"]\n'
                                                                 'trusted_hash = "sha256:1"'))
            exact[real_codex] = False
        else:
            real_codex.write_text(user_hook_in_ctxds_toml_group(text))
            exact[real_codex] = False
    elif change in ("claude_rewrite", "claude_user_hook") and "claude" in agents:
        path = Path(os.path.realpath(settings))
        value = json.loads(path.read_text().removeprefix("\ufeff"))
        if change == "claude_rewrite":
            value["model"] = "opus"
            before = first[path][1]
            original = semantic(path, before) if isinstance(before, bytes) else {}
            original["model"] = "opus"
            expected[path] = ("file", (json.dumps(original, indent=2, ensure_ascii=False) + "\n").encode())
        else:
            group = next(g for g in value["hooks"]["PreToolUse"] if "ctxd" in json.dumps(g))
            group["hooks"].append({"type": "command", "command": "~/bin/mine.sh"})
            exact[path] = False
        path.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n")  # as Claude Code writes it
    else:
        change = "none"
    figures["changes"][change] += 1
    after_change = snapshot(files)
    code, out = run_ctxd(["uninstall", *args], project)
    if code != 0:
        _error(figures, f"uninstall after {change}: {out.strip()[-300:]}")
        return
    last = snapshot(files)
    for path in files:
        figures["files_checked"] += 1
        kind_now, now = last[path]
        kind_wanted, wanted = expected[path]
        if kind_wanted == "link" or first[path][0] == "link":
            if (kind_now, now) != first[path]:
                figures["links_broken"] += 1
            continue
        if isinstance(now, bytes) and b"ctxd" in now:
            figures["left_over"] += 1
        if exact[path] and (kind_now, now) != (kind_wanted, wanted):
            figures["not_identical"] += 1
            if len(figures["examples"]) < 5:
                figures["examples"].append(f"{change}: {path.name}: {wanted!r:.200} became {now!r:.200}")
        if not exact[path]:
            changed = after_change[path][1]
            if not isinstance(now, bytes) or not isinstance(changed, bytes):
                figures["lost"] += 1
            elif path.suffix == ".toml" and (semantic(path, now) != _without_ctxd_toml(changed)
                                             or not only_lines_removed(now, changed)):
                figures["lost"] += 1
            elif path.suffix == ".json" and semantic(path, now) != _without_ctxd_json(semantic(path, changed)):
                figures["lost"] += 1
        elif isinstance(now, bytes) and isinstance(wanted, bytes) and semantic(path, now) != semantic(path, wanted):
            figures["lost"] += 1


def _without_ctxd_toml(data: bytes) -> Any:
    from ctxd.agents.config.codex_toml import tidy, without_ours

    return tidy(without_ours(tomllib.loads(data.decode().removeprefix("\ufeff"))))


def _without_ctxd_json(value: Any) -> Any:
    return claude.mcp_remove(claude.settings_remove(value))


def _check_refusal(code: int, out: str, first: dict[Path, Any], files: list[Path], figures: dict[str, Any]) -> None:
    figures["refused_cycles"] += 1
    if code != 1 or "Traceback" in out:
        figures["not_refused"] += 1
        if len(figures["examples"]) < 5:
            figures["examples"].append(f"not refused ({code}): {out.strip()[-200:]}")
    if snapshot(files) != first:
        figures["refusal_wrote"] += 1


def _error(figures: dict[str, Any], message: str) -> None:
    figures["errors"] += 1
    if len(figures["error_messages"]) < 5:
        figures["error_messages"].append(message)


def install_storm(root: Path, cycles: int) -> dict[str, Any]:
    figures: dict[str, Any] = {
        "cycles": 0, "files_checked": 0, "not_identical": 0, "lost": 0, "left_over": 0, "links_broken": 0,
        "refused_cycles": 0, "refusal_wrote": 0, "not_refused": 0, "read_only_cycles": 0,
        "read_only_unavailable": 0, "errors": 0, "error_messages": [], "examples": [],
        "changes": {k: 0 for k in ("none", "append", "state", "user_hook", "claude_rewrite", "claude_user_hook")},
    }
    saved = {k: os.environ.get(k) for k in ENV_KEYS}
    rng = random.Random(36)
    started = time.perf_counter()
    try:
        for n in range(cycles):
            cycle(root / f"c{n}", rng, figures, read_only=n % 10 == 9)
            figures["cycles"] += 1
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    figures["ms_per_cycle"] = round((time.perf_counter() - started) * 1000 / max(1, cycles), 1)
    return figures


def install_failed(report: dict[str, Any]) -> list[str]:
    figures = report.get("install")
    if not figures:
        return []
    bad = [k for k in ("not_identical", "lost", "left_over", "links_broken", "refusal_wrote", "not_refused", "errors")
           if figures[k]]
    return [f"install ({', '.join(bad)})"] if bad else []


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory(prefix="ctxd-install-storm-") as tmp:
        result = install_storm(Path(tmp), int(sys.argv[1]) if len(sys.argv) > 1 else 200)
    print(json.dumps(result, indent=2))
    failed = install_failed({"install": result})
    print("FAILED: " + ", ".join(failed) if failed else "all goals met")
    raise SystemExit(1 if failed else 0)
