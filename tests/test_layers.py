"""What each package of `ctxd` may import, checked from the source (the README's "How the code is
organised" says the same in words). A new import across packages fails here until this table says
it is meant: the wire (`server`) sits on top, the domain never reaches up to it."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "ctxd"

# package -> the other ctxd packages (or top-level modules) it may import. `ctxd` is the package's
# own `__init__` (the version).
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "redact": set(),
    "terminal": set(),
    "safefile": set(),
    "ownerlink": set(),  # the way to the owner: hooks, the status line and `ctxd mcp` import it on every call
    "acplink": {"ownerlink"},  # which ACP session `ctxd mcp` serves behind `ctxd acp` (its private folder)
    "logs": {"redact"},  # bounded reads of planted files (hooks, settings, sessions, ghost)
    "tokens": set(),
    "protocol": {"errors"},
    "settings": {"protocol", "redact", "safefile", "tokens"},  # protocol: the shape of a problem (type only)
    "ledger": {"errors", "protocol", "redact", "safefile", "settings", "tokens"},
    "usage": {"hooks", "ledger", "protocol", "safefile", "settings", "terminal", "tokens"},  # hooks: the enclosing workspace (hooks.locate)
    # Above both: a workspace's threads (ledger) and their gauge (usage).
    "workspace": {"errors", "ghost", "ledger", "protocol", "redact", "safefile", "settings", "tokens", "usage"},  # ghost: checkpoints
    "compact": {"errors", "ledger", "protocol", "redact", "settings", "tokens", "workspace"},
    "ghost": {"errors", "ledger", "redact", "safefile", "settings"},
    "sessions": {"errors", "ghost", "hooks", "ledger", "protocol", "redact", "safefile", "settings", "terminal", "tokens", "workspace"},  # hooks: a hooked session's marks
    "hooks": {"errors", "ghost", "ownerlink", "redact", "safefile", "settings", "terminal", "tokens"},  # tokens: the prompt cache's lifetimes (statusline); redact, terminal: what the hooks log and store
    "status": {"ctxd", "ledger", "protocol", "tokens", "workspace"},
    "server": {"compact", "ctxd", "errors", "ghost", "ledger", "logs", "ownerlink", "protocol", "redact", "safefile", "sessions", "settings", "status", "tokens", "workspace"},
    "cli": {"acp", "agentmcp", "ctxd", "hooks", "logs", "redact", "safefile", "server", "sessions", "usage"},
    "entry": {"acp", "agentmcp", "cli", "hooks"},  # agentmcp: `ctxd mcp` answers before anything else is imported
    "agentmcp": {"acplink", "ctxd", "hooks", "ownerlink", "settings"},  # hooks: the enclosing workspace (hooks.locate)
    # The ACP proxy, an entry of its own beside the server, the hooks and `ctxd mcp`: it reaches the
    # owner (ownerlink), finds a session's workspace (hooks.locate), checkpoints alone when no owner
    # answers (ghost, settings), keeps keys out of its log (logs).
    "acp": {"acplink", "ctxd", "ghost", "hooks", "logs", "ownerlink", "settings"},
    "__main__": {"entry"},
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
