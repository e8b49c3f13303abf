"""The fitted numbers of ctxd's token estimator, as data: `ctxd/tokens/fitted.json`, read by
`ctxd/tokens/estimator.py` when it is imported and written here by the fit scripts, each its own
part: `weights` (fit_estimator.py: the byte-class weights), `fast` and `ratios` (fit_fastcount.py:
the C estimator's constants and the families' scales)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent.parent / "ctxd" / "tokens" / "fitted.json"


def dumps(fitted: dict[str, Any]) -> str:
    """The file's text: JSON, each innermost list on one line (a row of weights, a spec)."""
    text = json.dumps(fitted, indent=2, ensure_ascii=True)
    return re.sub(r"\[([^\[\]{}]*)\]", lambda m: "[" + " ".join(m.group(1).split()) + "]", text) + "\n"


def write(part: str, value: Any, path: Path = DATA) -> None:
    """Replace one part of the fitted numbers, keeping the others."""
    fitted = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    fitted[part] = value
    path.write_text(dumps(fitted), encoding="utf-8")
