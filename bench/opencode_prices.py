"""Gemini's and Qwen's rows of ctxd/sessions/prices.json, from the models.dev snapshot inside
OpenCode's binary: for every model Gemini CLI names (its `modelDefinitions`) and every Qwen model
qwen-code offers (its Alibaba presets, and those its tokenLimits names), the price of the vendor's
own provider there (`google`; `alibaba`, DashScope's international endpoint), never a reseller's.
The rules are tests/agent_models.py's `models_dev_rows`, which tests/test_models_catalog.py checks
the table against; the packages are the pinned ones tests/agents.py installs (npm, cached).

    python bench/opencode_prices.py           # print the rows
    python bench/opencode_prices.py --write   # put them into prices.json (other rows kept)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import agent_models, agents  # noqa: E402

PRICES = Path(__file__).resolve().parent.parent / "ctxd" / "sessions" / "prices.json"


def rows() -> dict[str, dict[str, Any]]:
    folders = {"gemini": agents.install(agents.GEMINI).parents[2], "qwen": agents.install(agents.QWEN).parents[2]}
    snapshot = agent_models.opencode_models_dev(agents.install(agents.OPENCODE).parents[2])
    return agent_models.models_dev_rows(snapshot, agent_models.agent_model_names(folders))


def dumps(table: dict[str, Any]) -> str:
    """prices.json's layout: one line per model and per cache lifetime, models in name order."""
    def block(entries: dict[str, Any], indent: str) -> str:
        return ",\n".join(f"{indent}{json.dumps(k)}: {json.dumps(v)}" for k, v in entries.items())

    lines = [f"  {json.dumps(k)}: {json.dumps(v)}," for k, v in table.items()
             if k not in ("cacheLifetimes", "models")]
    lines.append('  "cacheLifetimes": {\n' + block(table["cacheLifetimes"], "    ") + "\n  },")
    lines.append('  "models": {\n' + block(dict(sorted(table["models"].items())), "    ") + "\n  }")
    return "{\n" + "\n".join(lines) + "\n}\n"


def main() -> None:
    new = rows()
    if "--write" not in sys.argv[1:]:
        for name, row in new.items():
            print(json.dumps(name), json.dumps(row))
        return
    table = json.loads(PRICES.read_text(encoding="utf-8"))
    table["models"].update(new)
    PRICES.write_text(dumps(table), encoding="utf-8")
    print(f"{len(new)} rows written to {PRICES}")


if __name__ == "__main__":
    main()
