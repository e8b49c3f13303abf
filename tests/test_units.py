"""Pure-module tests: truncation vectors, projection, throttle, settings, frames."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from ctxd.ledger.projection import Repairs, project, project_indexed, without
from ctxd.ledger.truncation import truncate_text, truncate_tool_output
from ctxd.server.codec import encode_parts
from ctxd.server.events import Throttle
from ctxd.server.transport import SMALL_FRAME_BYTES, Input, LockedWriter, read_frame
from ctxd.settings import load_settings
from ctxd.tokens.approx import IMAGE_BYTES, item_tokens
from tests.helpers import call, output, user

LONG = "this is an example of a long output that should be truncated\nalso some other line"
EMOJI = "😀😀😀😀😀😀😀😀😀😀\nsecond line with text\n"


def test_truncation_matches_codex_vectors() -> None:
    assert truncate_text(LONG, 10) == "this is an example o…11 tokens truncated…also some other line"
    assert truncate_text("abcdef", 0) == "…2 tokens truncated…"
    assert truncate_text("short output", 100) == "short output"
    assert truncate_text(EMOJI, 8) == "😀😀😀😀…8 tokens truncated… line with text\n"
    assert truncate_text(EMOJI, 5) == "😀😀…11 tokens truncated…with text\n"


def test_truncation_never_splits_a_character() -> None:
    text = "日本語のテキスト" * 500 + "🙂" * 333
    for budget in range(0, 200, 7):
        out = truncate_text(text, budget)
        out.encode("utf-8")  # would raise on a lone surrogate or a split sequence
        assert len(out.encode()) <= budget * 4 + len("…99999 tokens truncated…".encode())


def test_tool_output_parts_share_one_budget_and_images_pass() -> None:
    image = {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}
    item = {"type": "function_call_output", "call_id": "c", "output": [
        {"type": "input_text", "text": "a" * 30}, image, {"type": "input_text", "text": "b" * 30}]}
    out = truncate_tool_output(item, 10)
    assert out["output"][0]["text"] == "a" * 30
    assert out["output"][1] == image
    assert "tokens truncated" in out["output"][2]["text"]
    assert truncate_tool_output(user("x" * 1000), 1) == user("x" * 1000)


def test_projection_repairs_pairs_in_place_order() -> None:
    ghost = {"type": "ghost_snapshot", "ghost_commit": {"id": "abc"}}
    items = [user("go"), call("a"), ghost, call("b"), output("b"), output("orphan")]
    projected = project(items)
    assert [i["type"] for i in projected] == ["message", "function_call", "function_call_output",
                                              "function_call", "function_call_output"]
    assert projected[2] == {"type": "function_call_output", "call_id": "a", "output": "aborted"}
    assert items[2] is ghost and len(items) == 6  # the input is not changed


def test_projection_strips_images_for_text_only_models() -> None:
    message = {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "look"}, {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}
    text_only = project([message], ["text"])[0]
    assert all(part["type"] == "input_text" for part in text_only["content"])
    assert project([message])[0] is message


_IMAGE = {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}
_ITEMS = st.one_of(
    st.builds(user, st.sampled_from(["go", "more"])),
    st.just({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "see"}, _IMAGE]}),
    st.builds(lambda kind, cid: {"type": kind, "call_id": cid, "name": "t", "arguments": "{}", "input": "x"},
              st.sampled_from(["function_call", "custom_tool_call"]), st.sampled_from(["a", "b", "c"])),
    st.builds(lambda kind, cid, image: {"type": kind, "call_id": cid, "output": [_IMAGE] if image else "ok"},
              st.sampled_from(["function_call_output", "custom_tool_call_output"]), st.sampled_from(["a", "b", "c"]),
              st.booleans()),
    st.just({"type": "ghost_snapshot", "ghost_commit": {"id": "abc"}}),
    st.just({"type": "reasoning", "summary": [], "encrypted_content": "e"}),
    st.builds(user, st.just("<environment_context>cwd</environment_context>")),  # not a turn boundary
)


@settings(max_examples=400, deadline=None)
@given(st.lists(_ITEMS, max_size=12), st.sampled_from([("text", "image"), ("text",)]))
def test_repairs_say_when_the_projection_only_drops_items_and_which(items, modalities) -> None:
    repairs = Repairs()
    for item in items:
        repairs.add(item)
    projected = project_indexed(items, modalities)
    only_drops = all(isinstance(part, int) for part in projected)
    if repairs.needed(len(items), modalities):
        assert not only_drops or repairs.orphans > 0, "the full projection only when it changes or adds an item"
    else:
        assert without(list(range(len(items))), repairs.dropped()) == projected
    assert repairs.needed(len(items) + 1, modalities), "counts of another list are never trusted"


class CountedItem(dict[str, Any]):
    """An item that counts every read of it in `reads` (a list shared by all items of a test): the
    projection's work per item, counted instead of timed (bench/bench_projection.py times it)."""

    def __init__(self, item: dict[str, Any], reads: list[int]) -> None:
        super().__init__(item)
        self.reads = reads

    def get(self, key: str, default: Any = None) -> Any:
        self.reads[0] += 1
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        self.reads[0] += 1
        return super().__getitem__(key)

    def __eq__(self, other: object) -> bool:
        self.reads[0] += 1
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]


class CountedId(str):
    """A call id that counts how often it is hashed or compared: a projection that matched calls to
    outputs by searching a list of ids, not a set, would compare each with every other."""

    reads: list[int]

    def __eq__(self, other: object) -> bool:
        self.reads[0] += 1
        return str.__eq__(self, other)

    def __hash__(self) -> int:
        self.reads[0] += 1
        return str.__hash__(self)


def counted_id(name: str, reads: list[int]) -> CountedId:
    value = CountedId(name)
    value.reads = reads
    return value


def projection_reads(n: int) -> int:
    """Reads of items and call ids by `project` over `n` turns, every other call without an output
    (so the full projection runs, synthesizing outputs) and a user message and reasoning every
    tenth turn."""
    reads = [0]
    items: list[dict[str, Any]] = []
    for i in range(n):
        if i % 10 == 0:
            items += [user(f"turn {i}"), {"type": "reasoning", "summary": [], "encrypted_content": "x"}]
        call_id = counted_id(f"c{i}", reads)
        items += [call(call_id), output(call_id)] if i % 2 else [call(call_id)]
    counted = [CountedItem(item, reads) for item in items]
    projected = project(counted)
    assert len(projected) == 2 * n + n // 10 + 1  # finished turns' reasoning out, the missing outputs in
    return reads[0]


def test_projection_is_linear() -> None:
    """Each item and call id is read a bounded number of times, whatever their number: 8x the items,
    8x the reads (a projection that searched a list for each call's output would read 64x)."""
    small = projection_reads(2000)
    assert small <= 10 * 2000
    assert projection_reads(16000) <= 8 * small + 100


def test_item_token_rules() -> None:
    assert item_tokens({"type": "ghost_snapshot", "ghost_commit": {"id": "x"}}) == 0
    reasoning = {"type": "reasoning", "summary": [], "encrypted_content": "A" * 4000}
    assert item_tokens(reasoning) == (4000 * 3 // 4 - 650 + 3) // 4
    image = {"type": "message", "role": "user", "content": [{"type": "input_image", "image_url": "data:" + "A" * 100000}]}
    assert item_tokens(image) < (IMAGE_BYTES + 200) // 4


def test_throttle_sends_at_most_once_per_interval_and_the_last_value() -> None:
    now = [0.0]
    timers: list[tuple[float, object]] = []
    sent: list[int] = []
    throttle = Throttle(lambda _k, v: sent.append(v), 0.1, schedule=lambda d, fn: timers.append((now[0] + d, fn)),
                        clock=lambda: now[0])
    for value in range(10):
        throttle.offer("k", value)
        now[0] += 0.01
    assert sent == [0]
    due, fn = timers.pop()
    now[0] = due
    fn()  # type: ignore[operator]
    assert sent == [0, 9]


def test_settings_layers_and_bad_values(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "cfg"))
    (tmp_path / "cfg" / "ctxd").mkdir(parents=True)
    (tmp_path / "cfg" / "ctxd" / "config.toml").write_text('model = "gpt-4o"\ntool_output_token_limit = 500\n')
    (tmp_path / ".ctxd.toml").write_text('tool_output_token_limit = 700\nauto_compact_ratio = "lots"\n[llm]\nmodel = "m"\n')
    problems: list = []
    settings = load_settings(tmp_path, {"trusted": True, "contextWindow": 1000, "llm": {"baseUrl": "http://127.0.0.1:1/v1"}},
                             problems)
    assert settings.model == "gpt-4o" and settings.tool_output_token_limit == 700
    assert settings.context_window == 1000 and settings.auto_compact_limit() == 900
    assert settings.llm.base_url == "http://127.0.0.1:1/v1" and settings.llm.model == "m"
    assert any("auto_compact_ratio" in p.message for p in problems)


def test_lanes_keep_each_threads_order_and_cap_a_workspace() -> None:
    """Requests of one (workspace, thread) run one at a time in arrival order; at most
    `per_group` threads of one workspace hold a worker at once; other workspaces are not held up;
    a waiting thread gets its turn while a busy one still has work queued."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from ctxd.server.lanes import Lanes

    executor = ThreadPoolExecutor(max_workers=8)
    lanes = Lanes(executor, per_group=2)
    lock = threading.Lock()
    ran: list[tuple[str, str, int]] = []
    running: dict[str, int] = {}
    peak: dict[str, int] = {}
    gate = threading.Event()

    def job(group: str, lane: str, n: int) -> None:
        with lock:
            running[group] = running.get(group, 0) + 1
            peak[group] = max(peak.get(group, 0), running[group])
        if group == "ws1":
            gate.wait(5)  # ws1's lanes stay busy until ws2 has run
        with lock:
            ran.append((group, lane, n))
            running[group] -= 1

    for n in range(20):
        for lane in ("a", "b", "c"):
            lanes.submit(("ws1", lane), lambda lane=lane, n=n: job("ws1", lane, n))
    done = threading.Event()
    lanes.submit(("ws2", "x"), lambda: (job("ws2", "x", 0), done.set()))
    assert done.wait(5), "another workspace waited for a busy one"
    assert lanes.busy(("ws1", "c"))  # queued behind the two busy lanes of its workspace
    gate.set()
    executor.shutdown(wait=True)
    assert peak["ws1"] == 2, peak
    for lane in ("a", "b", "c"):
        assert [n for _, name, n in ran if name == lane] == list(range(20)), lane
    first_c = next(i for i, (_, name, _) in enumerate(ran) if name == "c")
    assert first_c < len(ran) - 20, "thread c waited until a and b had run everything"
    assert not any(lanes.busy(("ws1", lane)) for lane in "abc")


def test_closed_lanes_start_nothing_more() -> None:
    """When the client leaves, the job running finishes and the ones queued behind it never start."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    from ctxd.server.lanes import Lanes

    executor = ThreadPoolExecutor(max_workers=2)
    lanes = Lanes(executor, per_group=1)
    started, release, ran = threading.Event(), threading.Event(), []
    lanes.submit(("ws", "a"), lambda: (started.set(), release.wait(5), ran.append("first")))
    for n in range(5):
        lanes.submit(("ws", "a" if n % 2 else "b"), lambda n=n: ran.append(n))
    assert started.wait(5)
    lanes.close()
    lanes.submit(("ws", "c"), lambda: ran.append("after close"))
    release.set()
    executor.shutdown(wait=True)
    assert ran == ["first"]


class _Pipe:
    """A raw, unbuffered stream (stdout under `python -u`) that takes at most `most` bytes a write."""

    def __init__(self, most: int) -> None:
        self.most, self.writes = most, []  # type: ignore[var-annotated]

    def write(self, data: memoryview) -> int:
        self.writes.append(bytes(data[:self.most]))
        return len(self.writes[-1])

    def flush(self) -> None:
        pass


def test_a_small_frame_is_one_write_and_a_short_write_loses_nothing() -> None:
    message = {"jsonrpc": "2.0", "id": 7, "result": {"usage": {"usedTokens": 12, "note": "é" * 40}}}
    whole = _Pipe(most=1 << 30)
    LockedWriter(whole).write_message(encode_parts(message))  # type: ignore[arg-type]
    assert len(whole.writes) == 1  # a header alone would wake the client for nothing
    short = _Pipe(most=7)
    LockedWriter(short).write_message(encode_parts(message))  # type: ignore[arg-type]
    assert b"".join(short.writes) == whole.writes[0]
    big = _Pipe(most=1 << 30)
    LockedWriter(big).write_message([b"[", b"1" * SMALL_FRAME_BYTES, b"]"])  # type: ignore[arg-type]
    assert len(big.writes) == 4  # the header and each part: a large body is never copied whole
    assert read_frame(Input(io.BytesIO(whole.writes[0] + b"".join(big.writes)))) == b"".join(encode_parts(message))
