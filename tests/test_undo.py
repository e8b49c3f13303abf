"""Every history operation can be undone and nothing is deleted (protocol v3, issue #26): a
compaction, a rollback and a restore with the conversation each archive what they remove and
return an operation id that `ctxd/undo` takes; summaries carry forward; a rollback says when it
crosses a compaction; a compaction the client names always replaces the history."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.fake_openai import FakeOpenAI
from tests.helpers import assistant, call, output, user
from tests.rpc import Client, RpcError
from tests.test_codex_parity import KEY_ENV, llm_options

COMPACTION_FAILED = 1001


@pytest.fixture
def fake():
    with FakeOpenAI() as server:
        yield server


def turns(start: int, count: int) -> list[dict[str, Any]]:
    """`count` user turns, each with a long tool output (so that a compaction is worth it)."""
    items: list[dict[str, Any]] = []
    for n in range(start, start + count):
        log = "".join(f"tests/test_mod_{n}.py::test_case_{i} PASSED\n" for i in range(120))
        items += [user(f"turn {n}: please fix bug {n} in src/mod_{n}.py"),
                  call(f"c{n}", "shell", json.dumps({"cmd": f"pytest -q tests/test_mod_{n}.py"})),
                  output(f"c{n}", log + f"E   ValueError: bug {n} in src/mod_{n}.py\nexit code: 1"),
                  assistant(f"Decided to fix bug {n} by rewriting src/mod_{n}.py.")]
    return items


class Thread:
    def __init__(self, client: Client, folder: Path, name: str = "t") -> None:
        self.client, self.ws, self.name = client, folder.as_uri(), name

    def call(self, method: str, **params: Any) -> Any:
        return self.client.request(method, {"workspace": self.ws, "thread": self.name, **params})

    def items(self) -> list[dict[str, Any]]:
        return self.call("ctxd/history")["items"]

    def everything(self) -> dict[str, Any]:
        return self.call("ctxd/history", includeArchived=True)


def summary_text(items: list[dict[str, Any]]) -> str:
    return "\n".join(part["text"] for item in items if item.get("role") == "user"
                     for part in item["content"] if part["text"].startswith("[Handoff summary]"))


@pytest.fixture
def thread(daemon_factory: Callable[..., Client], workspace: Path) -> Thread:
    return Thread(daemon_factory([workspace]), workspace)


def test_a_compaction_is_undone_exactly_and_redone(thread: Thread) -> None:
    thread.call("ctxd/record", items=turns(0, 4))
    before = thread.items()
    result = thread.call("ctxd/compact", strategy="offline")
    compacted = thread.items()
    assert compacted != before and isinstance(result["undoId"], int)
    undone = thread.call("ctxd/undo", id=result["undoId"])
    assert thread.items() == before
    assert undone["historyVersion"] > result["historyVersion"] and undone["usage"]["usedTokens"] > result["tokensAfter"]
    thread.call("ctxd/undo", id=undone["undoId"])  # redo
    assert thread.items() == compacted
    history = thread.everything()
    ops = history["operations"]
    assert [op["kind"] for op in ops] == ["compaction", "undo", "undo"]
    assert ops[0]["itemsBefore"] == len(before) and ops[0]["itemsAfter"] == len(compacted)
    assert "undoneBy" not in ops[0] and ops[1]["undoneBy"] == ops[2]["id"]
    # Nothing was deleted: every item recorded is still there, active or archived.
    stored = [{k: v for k, v in item.items() if k not in ("archived", "archivedBy")} for item in history["items"]]
    assert all(item in stored for item in before + compacted)
    # An operation already undone, or one the thread does not have, is refused.
    with pytest.raises(RpcError) as caught:
        thread.call("ctxd/undo", id=undone["undoId"])
    assert caught.value.code == -32602 and "already undone" in caught.value.message
    with pytest.raises(RpcError) as caught:
        thread.call("ctxd/undo", id=999)
    assert caught.value.code == -32602 and "no history operation 999" in caught.value.message


def test_a_rollback_is_undone_and_records_since_stay(thread: Thread) -> None:
    thread.call("ctxd/record", items=turns(0, 3))
    before = thread.items()
    rolled = thread.call("ctxd/rollback", turns=1)
    assert rolled["removedItems"] == 4 and thread.items() == before[:-4]
    thread.call("ctxd/record", items=[user("meanwhile")])
    thread.call("ctxd/undo", id=rolled["undoId"])
    assert thread.items() == before + [user("meanwhile")]
    archived = [item for item in thread.everything()["items"] if item.get("archived")]
    assert archived == []  # all of it is active again


def test_a_second_offline_compaction_never_wipes_the_summary(thread: Thread) -> None:
    thread.call("ctxd/record", items=turns(0, 4))
    first = thread.call("ctxd/compact", strategy="offline")
    compacted = thread.items()
    first_summary = summary_text(compacted)
    assert "src/mod_0.py" in first_summary
    # Right after: nothing a compaction could make smaller. Refused, and nothing changes.
    with pytest.raises(RpcError) as caught:
        thread.call("ctxd/compact", strategy="offline")
    assert caught.value.code == COMPACTION_FAILED and caught.value.message.startswith("nothing worth compacting")
    assert thread.items() == compacted
    # After more work: the new summary still says everything the first one did.
    thread.call("ctxd/record", items=turns(4, 4))
    second = thread.call("ctxd/compact", strategy="offline")
    assert "(nothing to carry over)" not in second["summary"] and second["undoId"] != first["undoId"]
    later = summary_text(thread.items())
    for line in first_summary.splitlines()[1:]:
        fact = line.strip().removeprefix("- ").split(" ×")[0]
        if fact and not fact.startswith(("## ", "(+")) and not fact.startswith("[Handoff"):
            assert fact in later, fact


def test_an_llm_summary_carries_the_earlier_one_forward(daemon_factory, workspace: Path, fake: FakeOpenAI) -> None:
    thread = Thread(daemon_factory([workspace], llm_options(fake, api="chat"), env=KEY_ENV), workspace)
    thread.call("ctxd/record", items=turns(0, 3))
    thread.call("ctxd/compact", strategy="offline")
    first = summary_text(thread.items()).split("\n", 4)[-1]
    fake.summary = "Only the newest part: mod_3 is next."
    thread.call("ctxd/record", items=turns(3, 2))
    thread.call("ctxd/compact", strategy="llm")
    later = summary_text(thread.items())
    assert "Only the newest part" in later and first in later


def test_a_rollback_past_a_compaction_says_so_first_and_can_be_undone(thread: Thread) -> None:
    thread.call("ctxd/record", items=turns(0, 4))
    compaction = thread.call("ctxd/compact", strategy="offline")
    compacted = thread.items()
    preview = thread.call("ctxd/rollback", turns=3, dryRun=True)
    assert preview["crossesCompaction"] is True and preview["dryRun"] is True
    assert thread.items() == compacted  # a dry run changes nothing
    rolled = thread.call("ctxd/rollback", turns=3)
    assert rolled["crossesCompaction"] is True and rolled["removedItems"] == preview["removedItems"]
    assert rolled["usage"]["usedTokens"] == preview["tokensAfter"] == rolled["tokensAfter"]
    assert thread.items() == turns(0, 1)  # the turn before the compaction: what the user asked for
    history = thread.everything()
    assert history["compactions"][0]["undoneBy"] == rolled["undoId"]
    assert [op["kind"] for op in history["operations"]] == ["compaction", "rollback"]
    thread.call("ctxd/undo", id=rolled["undoId"])
    assert thread.items() == compacted
    history = thread.everything()
    assert "undoneBy" not in history["compactions"][0] and history["compactions"][0]["id"] == compaction["undoId"]
    # A turn taken after the compaction is rolled back without crossing it.
    thread.call("ctxd/record", items=turns(9, 1))
    assert thread.call("ctxd/rollback", turns=1, dryRun=True)["crossesCompaction"] is False


def test_a_named_llm_compaction_of_a_short_thread_replaces_it(daemon_factory, workspace: Path,
                                                              fake: FakeOpenAI) -> None:
    thread = Thread(daemon_factory([workspace], llm_options(fake, api="chat"), env=KEY_ENV), workspace)
    thread.call("ctxd/record", items=[user("hi"), assistant("hello")])
    result = thread.call("ctxd/compact", strategy="llm")
    assert result["strategy"] == "llm" and len(fake.requests) == 1
    items = thread.items()
    assert items[0] == user("hi") and summary_text(items).endswith(fake.summary)


@pytest.mark.parametrize("strategy", ["auto", "offline"])
def test_an_unnamed_compaction_of_a_short_thread_is_refused_before_any_request(daemon_factory, workspace: Path,
                                                                               fake: FakeOpenAI, strategy) -> None:
    thread = Thread(daemon_factory([workspace], llm_options(fake, api="chat"), env=KEY_ENV), workspace)
    thread.call("ctxd/record", items=[user("hi"), assistant("hello")])
    with pytest.raises(RpcError) as caught:
        thread.call("ctxd/compact", strategy=strategy)
    assert caught.value.code == COMPACTION_FAILED and caught.value.message.startswith("nothing worth compacting")
    assert fake.requests == []  # nothing was paid for
    assert thread.items() == [user("hi"), assistant("hello")]


def test_client_threads_get_a_title(daemon_factory, workspace: Path) -> None:
    thread = Thread(daemon_factory([workspace]), workspace)
    thread.call("ctxd/record", items=[user("<environment_context>cwd</environment_context>"), assistant("hi")])
    assert {t["thread"]: t for t in thread.call("ctxd/threads")["threads"]}["t"]["title"] is None
    thread.call("ctxd/record", items=[user("Please   make the CSV importer skip blank lines " + "x" * 100)])
    thread.call("ctxd/record", items=[user("and then the tests")])
    title = {t["thread"]: t for t in thread.call("ctxd/threads")["threads"]}["t"]["title"]
    assert title.startswith("Please make the CSV importer skip blank lines x") and len(title) == 80
    assert title.endswith("…")


def test_client_threads_get_a_cost(daemon_factory, workspace: Path) -> None:
    thread = Thread(daemon_factory([workspace]), workspace)
    thread.call("ctxd/setPromptContext", model="gpt-5")
    thread.call("ctxd/record", items=[user("hi")])
    assert "cost" not in thread.call("ctxd/usage")  # no usage reported yet
    usage = {"inputTokens": 1_000_000, "cachedInputTokens": 400_000, "outputTokens": 100_000, "totalTokens": 1_100_000}
    thread.call("ctxd/reportTokenUsage", usage=usage)
    cost = thread.call("ctxd/usage")["cost"]
    assert cost["priced"] is True and cost["input"] > 0 and cost["cachedInput"] > 0 and cost["output"] > 0
    assert cost["total"] == pytest.approx(cost["input"] + cost["cachedInput"] + cost["output"] + cost.get("cacheWrite", 0))
    thread.call("ctxd/reportTokenUsage", usage=usage)  # it adds up
    assert thread.call("ctxd/usage")["cost"]["total"] == pytest.approx(2 * cost["total"])


def test_restore_with_the_conversation_is_undone_by_its_undo_id_files_and_all(thread: Thread, workspace: Path) -> None:
    (workspace / "notes.txt").write_text("before\n")
    thread.call("ctxd/record", items=[user("add a feature")])
    snap = thread.call("ctxd/ghost/snapshot")
    thread.call("ctxd/record", items=[assistant("added feature.py"), user("thanks")])
    (workspace / "feature.py").write_text("work\n")
    before = thread.items()
    restored = thread.call("ctxd/ghost/restore", id=snap["id"], conversation=True)
    assert restored["removedItems"] == 2 and isinstance(restored["operationId"], int)
    assert thread.items() == before[:2] and not (workspace / "feature.py").exists()
    archived = [item for item in thread.everything()["items"] if item.get("archived")]
    assert [{k: v for k, v in item.items() if k not in ("archived", "archivedBy")} for item in archived] == before[2:]  # kept, not deleted
    # Restoring the restore's undoId with the conversation puts back both.
    back = thread.call("ctxd/ghost/restore", id=restored["undoId"], conversation=True)
    assert (workspace / "feature.py").read_text() == "work\n" and thread.items() == before
    # ... and that one is undone the same way (a redo).
    thread.call("ctxd/ghost/restore", id=back["undoId"], conversation=True)
    assert thread.items() == before[:2] and not (workspace / "feature.py").exists()
    kinds = [op["kind"] for op in thread.everything()["operations"]]
    assert kinds == ["restore", "undo", "undo"]


def test_restore_to_a_snapshot_before_a_compaction_brings_the_conversation_back(thread: Thread) -> None:
    thread.call("ctxd/record", items=turns(0, 1))
    snap = thread.call("ctxd/ghost/snapshot")
    as_of_snapshot = thread.items()
    thread.call("ctxd/record", items=turns(1, 4))
    thread.call("ctxd/compact", strategy="offline")
    compacted = thread.items()
    restored = thread.call("ctxd/ghost/restore", id=snap["id"], conversation=True)
    assert thread.items() == as_of_snapshot  # the conversation as it was then, not the compacted one
    assert restored["removedItems"] == len(compacted)
    thread.call("ctxd/undo", id=restored["operationId"])
    assert thread.items() == compacted


# --- undo of an older operation (issue #36): exact, or refused naming what to undo first ------------


def refusal(thread: Thread, method: str = "ctxd/undo", **params: Any) -> str:
    """The message of a refused request, having checked that it changed nothing."""
    before = thread.everything()
    with pytest.raises(RpcError) as caught:
        thread.call(method, **params)
    assert caught.value.code == -32602
    assert thread.everything() == before
    return caught.value.message


def test_an_older_compaction_is_not_undone_under_a_newer_one(thread: Thread) -> None:
    # Compact, compact, undo the first: the first compaction's turns came back beside the second
    # summary, which already stands for them (each user turn active twice).
    thread.call("ctxd/record", items=turns(0, 3))
    first = thread.call("ctxd/compact", strategy="offline")["undoId"]
    thread.call("ctxd/record", items=turns(3, 3))
    second = thread.call("ctxd/compact", strategy="offline")["undoId"]
    message = refusal(thread, id=first)
    assert message.startswith(f"operation {first} (a compaction, 12 → ")
    assert f"operation {second} (a compaction, " in message and "summarised the history" in message
    assert message.endswith(f"Undo operation {second} first, then operation {first}. Nothing was changed.")
    thread.call("ctxd/undo", id=second)
    thread.call("ctxd/undo", id=first)  # now it can: every turn once, no summary
    assert thread.items() == turns(0, 6)


def test_a_compaction_is_not_undone_under_a_restore_to_before_it(thread: Thread) -> None:
    # Compact, restore the conversation to before it, undo the compaction: what the restore took out
    # came back (the turns after the snapshot), the restore silently half undone.
    thread.call("ctxd/record", items=turns(0, 2))
    snap = thread.call("ctxd/ghost/snapshot")
    thread.call("ctxd/record", items=turns(2, 3))
    everything = thread.items()
    compaction = thread.call("ctxd/compact", strategy="offline")["undoId"]
    compacted = thread.items()
    restore = thread.call("ctxd/ghost/restore", id=snap["id"], conversation=True)["operationId"]
    message = refusal(thread, id=compaction)
    assert f"operation {restore} (a restore with the conversation, " in message
    assert message.endswith(f"Undo operation {restore} first, then operation {compaction}. Nothing was changed.")
    thread.call("ctxd/undo", id=restore)
    assert thread.items() == compacted
    thread.call("ctxd/undo", id=compaction)
    assert thread.items() == everything


def test_a_compaction_crossed_by_a_rollback_is_undone_through_it_and_a_chain_of_redos_keeps_count(thread: Thread) -> None:
    thread.call("ctxd/record", items=turns(0, 4))
    compaction = thread.call("ctxd/compact", strategy="offline")["undoId"]
    compacted = thread.items()
    rollback = thread.call("ctxd/rollback", turns=3)
    assert rollback["crossesCompaction"] is True
    rolled = thread.items()
    message = refusal(thread, id=compaction)
    assert "already undone" in message and f"operation {rollback['undoId']}" in message
    undo = thread.call("ctxd/undo", id=rollback["undoId"])["undoId"]
    assert thread.items() == compacted
    redo = thread.call("ctxd/undo", id=undo)["undoId"]
    assert thread.items() == rolled
    again = thread.call("ctxd/undo", id=redo)["undoId"]
    assert thread.items() == compacted
    # The compaction is in effect again (the redo of the rollback is undone): its record says so,
    # and undoing it works. It said "already undone" before: only two levels of undos were followed.
    marks = {op["id"]: op.get("undoneBy") for op in thread.everything()["operations"]}
    assert marks == {compaction: None, rollback["undoId"]: undo, undo: None, redo: again, again: None}
    thread.call("ctxd/undo", id=compaction)
    assert thread.items() == turns(0, 4)


def test_an_older_rollback_is_not_undone_under_a_later_one_that_cut_before_it(thread: Thread) -> None:
    thread.call("ctxd/record", items=turns(0, 4))
    last = thread.call("ctxd/rollback", turns=1)["undoId"]
    before_last = thread.call("ctxd/rollback", turns=1)["undoId"]
    # Undoing the first would bring turn 3 back without turn 2, after the later rollback's cut.
    message = refusal(thread, id=last)
    assert f"operation {before_last} (a rollback, 12 → 8 items) came after it and dropped turns" in message
    thread.call("ctxd/undo", id=before_last)
    thread.call("ctxd/undo", id=last)
    assert thread.items() == turns(0, 4)


def test_an_older_compaction_is_undone_under_a_later_rollback_of_what_came_since(thread: Thread) -> None:
    # What the rule allows: nothing since touched what the compaction changed, and the rollback cut
    # after it. The compacted turns come back, what the rollback dropped stays dropped.
    thread.call("ctxd/record", items=turns(0, 3))
    compaction = thread.call("ctxd/compact", strategy="offline")["undoId"]
    thread.call("ctxd/record", items=turns(3, 2))
    rollback = thread.call("ctxd/rollback", turns=1)["undoId"]
    undo = thread.call("ctxd/undo", id=compaction)["undoId"]
    assert thread.items() == turns(0, 4)
    thread.call("ctxd/undo", id=rollback)
    assert thread.items() == turns(0, 5)
    thread.call("ctxd/undo", id=undo)  # the redo is exact too: the compaction's items and both later turns
    assert summary_text(thread.items()) and thread.items()[-8:] == turns(3, 2)


def test_a_refused_undo_by_restore_leaves_the_files_alone(thread: Thread, workspace: Path) -> None:
    notes = workspace / "notes.txt"
    notes.write_text("one\n")
    thread.call("ctxd/record", items=turns(0, 1))
    snap = thread.call("ctxd/ghost/snapshot")
    notes.write_text("two\n")
    thread.call("ctxd/record", items=turns(1, 3))
    restored = thread.call("ctxd/ghost/restore", id=snap["id"], conversation=True)
    assert notes.read_text() == "one\n"
    thread.call("ctxd/record", items=turns(4, 3))
    compaction = thread.call("ctxd/compact", strategy="offline")["undoId"]
    notes.write_text("three\n")
    # Restoring the restore's safety snapshot would undo it under the compaction: refused before a
    # file is written (it wrote "two" back, then undid the conversation's restore anyway).
    message = refusal(thread, "ctxd/ghost/restore", id=restored["undoId"], conversation=True)
    assert message.endswith(f"Undo operation {compaction} first, then operation {restored['operationId']}. "
                            "Nothing was changed.")
    assert notes.read_text() == "three\n"
