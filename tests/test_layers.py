"""What each package of `ctxd` may import, checked from the source (the README's "How the code is
organised" says the same in words). A new import across packages fails here until this table says
it is meant. The entries (`ENTRIES`: the daemon and owner, `ctxd mcp`, the hooks, the status line,
the command line, the ACP proxy) sit at the top, side by side: none imports another (only `entry`
and `cli` dispatch to them), and nothing below imports one. What they share sits below them: the
on-disk layout (`places`), the way to the owner (`ownerlink`), the hooks' marks and input
(`marks`, `hookio`), the agents (`agents`: one module each, and the registry)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ctxd"

ENTRIES = {"server", "mcp", "hooks", "statusline", "cli", "acp"}
"""The entry packages: what a process starts in (`entry` and `cli` choose which)."""

# package -> the other ctxd packages (or top-level modules) it may import. `ctxd` is the package's
# own `__init__` (the version).
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "leanjson": set(),  # JSON without the json package's imports: the hooks' way to the owner
    "redact": {"leanjson"},
    "terminal": set(),
    "isotime": set(),  # ISO times read one way (stdlib)
    "heap": set(),  # glibc's mallopt: the daemon and the session readers' workers
    "imports": set(),  # what threads would import at once, imported first (stdlib)
    "safefile": set(),
    "places": {"safefile"},  # the on-disk layout: every hook and status line imports it (stdlib, bounded reads)
    "ownerlink": {"leanjson", "places"},  # the way to the owner: hooks, the status line and `ctxd mcp` import it on every call
    "acplink": {"ownerlink", "safefile"},  # which ACP session `ctxd mcp` serves behind `ctxd acp` (its private folder)
    "acpspool": {"acplink", "ownerlink"},  # a proxy's records until the owner stored them (written by one, read by the other)
    "marks": {"places", "safefile"},  # what the hooks remember between runs
    "hookio": {"leanjson", "marks", "places", "redact", "terminal"},  # the hooks' and the status line's input and log
    # What a hook does (its plan), run by the owner for the hooks it is handed, or by a hook alone.
    "hookplan": {"agents", "ghost", "hookio", "marks", "places", "protocol", "redact", "settings"},
    "logs": {"redact"},  # bounded reads of planted files (hooks, settings, sessions, ghost)
    "tokens": {"imports", "isotime", "safefile"},  # the estimator's tables the daemon kept, read bounded and never through a link
    "protocol": {"errors"},
    "ledger": {"errors", "places", "protocol", "redact", "safefile", "tokens"},  # places: the database's path
    # One module per agent and the registry (ctxd/agents): below everything that asks about agents.
    "agents": {"errors", "isotime", "ledger", "places", "protocol", "redact", "safefile", "tokens"},  # ledger: the item rules
    "settings": {"agents", "places", "protocol", "redact", "safefile", "tokens"},  # agents: `sources.<agent>`
    "usage": {"agents", "isotime", "ledger", "places", "protocol", "safefile", "settings", "terminal", "tokens"},
    # Above both: a workspace's threads (ledger) and their gauge (usage).
    "workspace": {"agents", "errors", "ghost", "isotime", "ledger", "places", "protocol", "redact", "safefile",
                  "settings", "tokens", "usage"},  # ghost: checkpoints; places: a private state dir
    "compact": {"errors", "ledger", "protocol", "redact", "settings", "tokens", "workspace"},
    "ghost": {"errors", "isotime", "ledger", "places", "protocol", "redact", "safefile", "settings"},  # protocol: a checkpoint's turn
    # and tool (types); places: a private state dir for the key and the plain folders' stores
    "sessions": {"agents", "errors", "ghost", "heap", "isotime", "ledger", "marks", "places", "protocol", "redact",
                 "safefile", "settings", "terminal", "tokens", "workspace"},  # marks: a hooked session's checkpoints are its hooks'
    "status": {"ctxd", "ledger", "protocol", "tokens", "workspace"},
    # The entries.
    "server": {"acpspool", "compact", "ctxd", "errors", "ghost", "heap", "hookio", "imports", "hookplan", "ledger", "logs", "ownerlink", "places", "protocol",
               "redact",
               "sessions", "settings", "status", "tokens", "workspace"},
    "mcp": {"acplink", "agents", "ctxd", "isotime", "leanjson", "ownerlink", "places"},  # `ctxd mcp` answers before anything else is imported
    "hooks": {"agents", "errors", "ghost", "hookio", "hookplan", "marks", "ownerlink", "places", "protocol", "redact",
              "safefile", "settings", "terminal"},  # protocol: a checkpoint's turn and tool (types)
    "statusline": {"agents", "hookio", "places", "safefile", "tokens"},  # tokens: the prompt cache's lifetimes
    # The ACP proxy: it reaches the owner (ownerlink), finds a session's workspace (places),
    # checkpoints alone when no owner answers (ghost, settings), keeps keys out of its log (logs),
    # names a session's thread as the owner does (protocol: its thread names, without pydantic).
    "acp": {"acplink", "acpspool", "ctxd", "ghost", "logs", "ownerlink", "places", "protocol", "settings"},
    "cli": {"ctxd", "hooks", "logs", "redact", "safefile", "server", "sessions", "usage"},
    "entry": {"acp", "cli", "hooks", "mcp", "statusline"},  # the commands an agent runs often start without `cli`
    "__main__": {"entry"},
    "launch": {"entry"},  # what the agents' configuration runs (`places.ctxd_command`): `__main__` by path
}
FOREIGN_WIRE = {"pygls", "lsprotocol", "cattrs"}  # the stack issue #12 replaced: nothing may come back to it


def _imports() -> dict[str, dict[str, set[str]]]:
    """package -> imported ctxd package -> the files that import it; plus `<wire>` for pygls & co."""
    found: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        package = relative.parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] if node.module != "ctxd" else [f"ctxd.{a.name}" for a in node.names]
            else:
                continue  # relative imports stay inside their package
            for name in names:
                top, _, rest = name.partition(".")
                if top in FOREIGN_WIRE:
                    found[package]["<wire>"].add(str(relative))
                elif top == "ctxd":
                    target = rest.partition(".")[0] or "ctxd"
                    if target == "__version__":
                        target = "ctxd"
                    if target != package:
                        found[package][target].add(str(relative))
    return found


def test_every_package_imports_only_what_its_layer_allows() -> None:
    wrong = {f"{package} -> {target} ({', '.join(sorted(files))})"
             for package, targets in _imports().items() for target, files in targets.items()
             if target not in ALLOWED.get(package, set())}
    assert not wrong, "imports across layers that ALLOWED does not list:\n" + "\n".join(sorted(wrong))


def test_the_table_names_every_package() -> None:
    packages = {p.name.removesuffix(".py") for p in PACKAGE.iterdir()
                if (p.is_dir() and (p / "__init__.py").exists()) or (p.suffix == ".py" and p.name != "__init__.py")}
    assert packages == set(ALLOWED), f"packages without a row, or rows without a package: {packages ^ set(ALLOWED)}"


def test_no_entry_imports_another_and_nothing_below_imports_one() -> None:
    """The entries are siblings at the top (issue #37): `entry` and `cli` dispatch to them; no
    entry imports another, and no package below imports any of them."""
    for package, targets in ALLOWED.items():
        entries = targets & ENTRIES
        if package in {"entry", "cli", "__main__"}:
            continue
        assert not entries, f"{package} may import the entries {sorted(entries)}"
    for package, targets in _imports().items():
        if package not in {"entry", "cli", "__main__"}:
            assert not set(targets) & ENTRIES, f"{package} imports {sorted(set(targets) & ENTRIES)}"


def test_the_agents_never_import_what_asks_about_them() -> None:
    """An agent's module (ctxd/agents) is asked by the follower, the workspaces, the daemon and
    the entries; it never imports them (it would not be one module a new agent adds)."""
    above = {"sessions", "workspace", "usage", "compact", "status", "settings", *ENTRIES}
    assert not ALLOWED["agents"] & above
    assert not set(_imports().get("agents", {})) & above


def test_the_domain_never_imports_the_wire() -> None:
    imports = _imports()
    for package in ALLOWED:
        if package not in {"server", "cli", "__main__"}:
            assert "server" not in imports.get(package, {}), f"{package} imports ctxd.server"


def _loop(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of `graph` (package -> packages it imports), as the packages along it, or None."""
    done: set[str] = set()

    def visit(node: str, path: list[str]) -> list[str] | None:
        if node in path:
            return path[path.index(node):] + [node]
        if node in done:
            return None
        for target in sorted(graph.get(node, set())):
            found = visit(target, path + [node])
            if found is not None:
                return found
        done.add(node)
        return None

    for start in sorted(graph):
        found = visit(start, [])
        if found is not None:
            return found
    return None


def test_no_package_imports_back_what_imports_it() -> None:
    """Layers, not a web: neither the table nor the source has a loop (issue #28: the ledger's
    workspace imported the usage view, which imports the ledger)."""
    table = _loop(ALLOWED)
    assert table is None, "ALLOWED has a loop: " + " -> ".join(table)
    actual = _loop({package: set(targets) - {"<wire>"} for package, targets in _imports().items()})
    assert actual is None, "the packages import each other in a loop: " + " -> ".join(actual)


def test_the_loop_check_finds_a_loop() -> None:
    assert _loop({"ledger": {"usage"}, "usage": {"ledger", "settings"}, "settings": set()}) == ["ledger", "usage", "ledger"]
    assert _loop({"workspace": {"ledger", "usage"}, "usage": {"ledger"}, "ledger": set()}) is None


def test_each_error_is_defined_once() -> None:
    """The errors with their codes live in ctxd/errors.py alone (issue #28: StoreUnavailable had a
    second class in the store); other modules raise those, never a class of the same name."""
    defined = {node.name for node in ast.parse((PACKAGE / "errors.py").read_text(encoding="utf-8")).body
               if isinstance(node, ast.ClassDef)}
    again = sorted(f"{node.name} ({path.relative_to(PACKAGE)})" for path in PACKAGE.rglob("*.py")
                   if path.name != "errors.py" or path.parent != PACKAGE
                   for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                   if isinstance(node, ast.ClassDef) and node.name in defined)
    assert not again, "error classes defined again outside ctxd/errors.py: " + ", ".join(again)
