"""Modules that threads of one process would otherwise import at the same moment, imported first.

Two threads importing modules that import each other can meet in Python's import locks: it then
raises `_DeadlockError` in one of them. A CI run failed a request so: the owner's first pydantic
validator imported `importlib.metadata` (then `importlib.abc`) while its warm-up imported
`ctxd.compact` (`importlib.resources`). A tokenizer's load thread imports them too, beside a
`ctxd usage` that builds its report. Stdlib only: cheap to import."""

from __future__ import annotations

import importlib

SHARED_MODULES = ("importlib.abc", "importlib.resources", "importlib.metadata")


def import_shared_modules() -> None:
    """Import SHARED_MODULES in this thread, before another starts (about 15 ms once; then a
    lookup each)."""
    for name in SHARED_MODULES:
        importlib.import_module(name)
