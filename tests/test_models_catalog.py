"""The model catalogue and the price table against the agents' own model lists (issue #31), and
the cost of a session: 1-hour cache writes at their rate, parts that add up to the total
everywhere the cost is shown (issue #26)."""

from __future__ import annotations

import json
import random
from importlib import resources

import pytest

from ctxd.agents import claude
from ctxd.agents.claude import ClaudeReader
from ctxd.agents.session import Usage
from ctxd.sessions import overview as sessions_cli
from ctxd.sessions import pricing
from ctxd.tokens import catalog
from tests import agent_models
from tests import agents as agents_module
from tests import session_fixtures as fx

RAW_PRICES = json.loads(resources.files("ctxd.sessions").joinpath("prices.json").read_text(encoding="utf-8"))["models"]


@pytest.fixture(scope="module")
def agents():
    return agent_models.install()


# --- the agents' lists ---------------------------------------------------------------------------


def test_every_claude_code_model_has_its_window_and_price(agents) -> None:
    shipped = agent_models.claude_code_catalog(agents[0])
    tiers = shipped["pricing_tiers"]
    missing, wrong = [], []
    for model in shipped["models"]:
        name = model["id"]
        info = catalog.lookup(name)
        window = int(model.get("context", {}).get("window", 200_000))
        if info is None or name not in RAW_PRICES:
            missing.append(name)
            continue
        if (info.context_window, info.max_output) != (window, model["max_output_tokens"]["default"]):
            wrong.append(f"{name}: window/output {info.context_window}/{info.max_output}, Claude Code "
                         f"{window}/{model['max_output_tokens']['default']}")
        tier, price = tiers[model["pricing"]], RAW_PRICES[name]
        ours = (price["input"], price["output"], price["cacheWrite"], price["cacheWrite1h"], price["cachedInput"])
        theirs = (tier["input"], tier["output"], tier["cache_write_5m"], tier["cache_write_1h"], tier["cache_read"])
        if ours != theirs:
            wrong.append(f"{name}: price {ours}, Claude Code {theirs}")
        # The ids Claude Code sends on each provider map to the same model.
        for provider_id in (model.get("provider_ids") or {}).values():
            if provider_id and catalog.lookup(provider_id) is not info:
                wrong.append(f"{name}: provider id {provider_id} maps to {catalog.lookup(provider_id)}")
    assert not missing, f"models Claude Code {agent_models.CLAUDE_CODE[1]} knows and ctxd does not: {missing}"
    assert not wrong, "\n".join(wrong)


def test_every_codex_model_has_its_window_and_a_price_or_a_reason(agents) -> None:
    missing, wrong = [], []
    for model in agent_models.codex_models(agents[1]):
        name = model["slug"]
        info = catalog.lookup(name)
        if info is None or name not in RAW_PRICES:
            missing.append(name)
            continue
        window = model.get("context_window") or model.get("max_context_window")
        if info.context_window != window:
            wrong.append(f"{name}: window {info.context_window}, Codex {window}")
        if pricing.lookup(name) is None and not RAW_PRICES[name].get("unpriced"):
            wrong.append(f"{name}: neither priced nor said why not")
    assert not missing, f"models Codex {agent_models.CODEX[1]} lists and ctxd does not: {missing}"
    assert not wrong, "\n".join(wrong)


def test_every_gemini_cli_and_qwen_code_model_has_its_vendors_models_dev_price_or_a_reason() -> None:
    """Gemini's and Qwen's rows are those bench/opencode_prices.py writes from OpenCode's models.dev
    snapshot (the vendors' own providers), for every model Gemini CLI and qwen-code name."""
    folders = {"gemini": agents_module.install(agents_module.GEMINI).parents[2],
               "qwen": agents_module.install(agents_module.QWEN).parents[2]}
    names = agent_models.agent_model_names(folders)
    assert {"gemini-2.5-pro", "gemini-2.5-flash"} <= set(names["gemini"])
    assert {"qwen3-coder-plus", "qwen3.7-plus"} <= set(names["qwen"])
    snapshot = agent_models.opencode_models_dev(agents_module.install(agents_module.OPENCODE).parents[2])
    assert snapshot["google"]["name"] == "Google" and "dashscope-intl" in snapshot["alibaba"]["api"]
    rows = agent_models.models_dev_rows(snapshot, names)
    wrong = [f"{name}: ours {RAW_PRICES.get(name)}, models.dev {row}" for name, row in rows.items()
             if RAW_PRICES.get(name) != row]
    assert not wrong, "run python bench/opencode_prices.py --write:\n" + "\n".join(wrong)
    # Their default models are priced, cached input included.
    for name in ("gemini-2.5-pro", "gemini-2.5-flash", "qwen3.7-plus", "qwen3.8-max"):
        price = pricing.lookup(name)
        assert price is not None and price.cached_input is not None, name
    assert pricing.lookup("qwen3-max-2026-01-23") is pricing.lookup("qwen3-max") is not None
    assert pricing.lookup("models/gemini-2.5-pro") is pricing.lookup("gemini-2.5-pro")


def test_every_price_says_where_it_comes_from_and_when_it_was_checked() -> None:
    for name, entry in RAW_PRICES.items():
        assert entry.get("source") and entry.get("checked", "").startswith("20"), name
        assert pricing.lookup(name) is not None or entry.get("unpriced"), name
    for info in catalog.CATALOG.values():
        assert info.source in catalog.SOURCES, info.prefix


# --- ids as the agents write them ---------------------------------------------------------------


def test_ids_as_the_agents_write_them_and_unknown_ones() -> None:
    assert catalog.lookup("claude-sonnet-4-5-20250929").prefix == "claude-sonnet-4-5"
    assert catalog.lookup("us.anthropic.claude-opus-4-1-20250805-v1:0").prefix == "claude-opus-4-1"
    assert catalog.lookup("claude-sonnet-4-5@20250929").prefix == "claude-sonnet-4-5"
    assert catalog.lookup("anthropic/claude-opus-4-6").prefix == "claude-opus-4-6"
    assert catalog.lookup("openai.gpt-5.6-sol").prefix == "gpt-5.6-sol"
    assert catalog.context_window_for("claude-opus-4-7") == 1_000_000
    assert catalog.context_window_for("claude-sonnet-4-5[1m]") == 1_000_000  # Claude Code's 1M tag
    # Unknown is unknown: no family guess from a prefix.
    for unknown in ("claude-opus-9", "claude", "gpt-7-omega", "claude-sonnet-4-5-experimental"):
        assert catalog.lookup(unknown) is None and catalog.context_window_for(unknown) is None, unknown
        assert pricing.lookup(unknown) is None
    assert pricing.lookup("claude-opus-5-5-20261101") is pricing.lookup("claude-opus-5-5") is not None


def test_claude_codes_window_for_a_model_it_does_not_know() -> None:
    agent = claude.compact_limits("claude-opus-9")
    assert (agent.window, agent.limit) == (200_000, 167_000) and "does not recognise" in agent.window_source


# --- the cost -----------------------------------------------------------------------------------


def test_one_hour_cache_writes_cost_twice_the_input() -> None:
    usage = {"claude-opus-4-7": Usage(cache_write=1_000_000, cache_write_1h=600_000)}
    cost = pricing.cost(usage)
    assert cost["cacheWrite"] == pytest.approx(0.4 * 6.25 + 0.6 * 10.0)  # 5-minute at 1.25x, 1-hour at 2x
    assert cost["cacheWrite1h"] == pytest.approx(6.0)
    assert cost["total"] == pytest.approx(cost["cacheWrite"])


def test_the_reader_keeps_the_one_hour_part_of_the_cache_writes(tmp_path) -> None:
    usage = {**fx.claude_usage(10, 5_000, 1_000, 50), "cache_creation": {"ephemeral_5m_input_tokens": 1_000,
                                                                          "ephemeral_1h_input_tokens": 4_000}}
    lines = [fx.claude_user("Hi", "u1", None, "/w", "2025-10-03T11:00:00.000Z"),
             *fx.claude_assistant([{"type": "text", "text": "Hello"}], "m1", "a1", "u1", "/w",
                                  "2025-10-03T11:00:01.000Z", usage)]
    reader = ClaudeReader(str(fx.write_jsonl(tmp_path / "s.jsonl", lines)))
    reader.read()
    [spent] = reader.session.cumulative.values()
    assert (spent.cache_write, spent.cache_write_1h) == (5_000, 4_000)


def test_the_parts_add_up_to_the_total_as_shown() -> None:
    generator = random.Random(26)
    models = ["claude-sonnet-4-5", "claude-opus-4-7", "claude-haiku-5-5", "gpt-6.1-sol"]
    for _ in range(300):
        usage = {}
        for model in generator.sample(models, 2):
            written = generator.randrange(0, 3_000_000)
            usage[model] = Usage(input=generator.randrange(0, 50_000), cached_input=generator.randrange(0, 9_000_000),
                                 cache_write=written if model.startswith("claude") else 0,
                                 cache_write_1h=generator.randrange(0, written + 1) if model.startswith("claude") else 0,
                                 output=generator.randrange(0, 300_000))
        cost = pricing.cost(usage)
        assert cost["input"] + cost["cachedInput"] + cost["cacheWrite"] + cost["output"] == pytest.approx(
            cost["total"], abs=1e-9)
        shown = pricing.cents(cost)
        assert sum(shown[k] for k in pricing.PARTS) == shown["total"] == round(cost["total"] * 100)


def test_ctxd_sessions_shows_the_parts_that_make_the_total() -> None:
    # The session: $0.0006 input, $3.90 cache reads, $0.78 cache writes, $0.64 output.
    cost = {"currency": "USD", "input": 0.0006, "cachedInput": 3.9, "cacheWrite": 0.7794, "output": 0.64,
            "total": 5.32, "priced": True}
    row = {"agent": "claude", "title": "t", "model": "claude-sonnet-4-5", "percent": 10.0, "usedTokens": 20_000,
           "contextWindow": 200_000, "cost": cost, "lastActivity": None}
    table = sessions_cli.render([row])
    assert "$5.32 = in $0.00 + cache read $3.90 + cache write $0.78 + out $0.64" in table


def test_claude_codes_autocompact_percent_from_its_settings(tmp_path) -> None:
    (tmp_path / "settings.json").write_text('{"env": {"CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": "50"}}')
    pct = claude.pct_override(tmp_path)
    assert pct == 50.0
    # Half of the effective window (200,000 - 20,000), below the default 167,000.
    assert claude.compact_limits("claude-sonnet-4-5-20250929", pct).limit == 90_000
    (tmp_path / "settings.json").write_text('{"env": {"CLAUDE_AUTOCOMPACT_PCT_OVERRIDE": "lots"}}')
    assert claude.pct_override(tmp_path) is None
