"""The model-backed strategies: `llm` (a handoff summary) and `remote` (`/responses/compact`).

Both go through the real `openai` client, with its own retries off so that ours (bounded,
cancellable) are the only ones. When the compaction request itself overflows the model's window,
the request goes down a ladder, in both strategies (as OpenCode does): the full history, then the
history with its tool outputs stripped, then only the last turns (halving their number), then the
oldest items dropped one at a time (with their call/output partner, as Codex's `remove_first_item`),
then the one item left cut in half until it fits; the caller learns how many items were not sent
whole. The API key is read from
the environment at call time and never leaves this module except inside the client.

Bounds, whatever the endpoint does: each request is given up after `llm.timeout_seconds` in all
(its connection closed: an answer trickled a byte at a time never times out between two reads),
no request starts once `llm.retry_budget_seconds` have passed since the first (retries and the
ladder's rungs alike), and an answer is read only up to MAX_ANSWER_BYTES (decompressed).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar, cast
from urllib.parse import urlparse

from ctxd.compact.retry import AnswerTooLarge, ContextTooLong, RetryPolicy, call_with_retries
from ctxd.errors import CompactionFailed, InvalidParams
from ctxd.ledger.rules import (
    CALL_TO_OUTPUT,
    TOOL_OUTPUT_TYPES,
    is_real_user_message,
    message_text,
)
from ctxd.ledger.truncation import truncate_text
from ctxd.protocol.items import validate_items

if TYPE_CHECKING:
    import httpx2  # (the `openai` client's HTTP library: only its types are named here)
    import openai  # imported when a compaction first needs it: it takes most of a second

T = TypeVar("T")

OPENAI_HOSTS = ("api.openai.com",)
PLACEHOLDER_KEY = "not-needed"  # local OpenAI-compatible servers ignore the key, the client wants one

Progress = Callable[[str], None]


@dataclass
class Endpoint:
    base_url: str
    model: str
    api: str
    api_key: str
    timeout: float
    policy: RetryPolicy

    def __repr__(self) -> str:  # keep the key out of any log or traceback
        return f"Endpoint(base_url={self.base_url!r}, model={self.model!r}, api={self.api!r})"


def is_openai_host(base_url: str | None) -> bool:
    if not base_url:
        return False
    host = (urlparse(base_url).hostname or "").lower()
    return host in OPENAI_HOSTS


def resolve_endpoint(settings: Any) -> Endpoint:
    """The configured endpoint, or CompactionFailed saying what is missing."""
    llm = settings.llm
    if not llm.base_url:
        raise CompactionFailed("no model endpoint is configured (set llm.base_url)")
    model = llm.model or settings.model
    if not model:
        raise CompactionFailed("no model is configured for compaction (set llm.model)")
    key_env = llm.api_key_env or "OPENAI_API_KEY"
    key = os.environ.get(key_env) or ""
    if not key:
        if is_openai_host(llm.base_url):
            raise CompactionFailed(f"no API key: the environment variable {key_env} is not set")
        key = PLACEHOLDER_KEY
    policy = RetryPolicy(max_retries=int(getattr(llm, "max_retries", 4)),
                         budget_seconds=float(getattr(llm, "retry_budget_seconds", 60.0)))
    return Endpoint(llm.base_url, model, llm.api, key, float(llm.timeout_seconds), policy)


MAX_ANSWER_BYTES = 16 << 20
"""The most of an answer a compaction reads: a summary or a compacted history is far smaller (a
model's whole window is a few MB of text), and a bigger answer would be held whole in memory."""


def make_client(endpoint: Endpoint) -> openai.OpenAI:
    """The `openai` client, its HTTP client reading at most MAX_ANSWER_BYTES of any answer."""
    import openai

    class Bounded(openai.DefaultHttpxClient):  # the SDK's own defaults (limits, redirects)
        def send(self, request: httpx2.Request, *, stream: bool = False, **kwargs: Any) -> httpx2.Response:
            response = super().send(request, stream=True, **kwargs)
            if stream:
                return response
            parts, size = [], 0
            try:
                for part in response.iter_bytes():  # decompressed, in pieces of at most a MiB
                    size += len(part)
                    if size > MAX_ANSWER_BYTES:
                        raise AnswerTooLarge(f"the answer is larger than {MAX_ANSWER_BYTES >> 20} MiB")
                    parts.append(part)
            finally:
                response.close()
            response._content = b"".join(parts)  # what `read()` keeps (httpx2's own attribute)
            return response

    return openai.OpenAI(base_url=endpoint.base_url, api_key=endpoint.api_key, max_retries=0, timeout=endpoint.timeout,
                         http_client=Bounded(timeout=endpoint.timeout))


# --- trimming ------------------------------------------------------------------------------------


OUTPUT_TO_CALL = {output: call for call, output in CALL_TO_OUTPUT.items()}
MAX_HALVINGS = 12


def drop_oldest(items: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Drop the first item and its call/output partner, whichever of the two came first (a strict
    endpoint rejects a call without its output and an output without its call). Returns (rest, dropped)."""
    if not items:
        return items, 0
    first, rest = items[0], items[1:]
    kind = str(first.get("type"))
    partner = CALL_TO_OUTPUT.get(kind) or OUTPUT_TO_CALL.get(kind)
    if partner is None:
        return rest, 1
    kept = [item for item in rest if not (item.get("type") == partner and item.get("call_id") == first.get("call_id"))]
    return kept, 1 + len(rest) - len(kept)


def _stripped(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    from ctxd.compact.offline import (
        mask_tool_outputs,  # offline imports nothing from here
    )

    return mask_tool_outputs(items, keep_recent=0)[0]


def _halved(item: dict[str, Any]) -> dict[str, Any] | None:
    """The item with its longest text cut in half (middle truncation), or None if nothing is left to cut."""
    from ctxd.tokens.approx import approx_text_tokens

    def shorter(text: str) -> str:
        return truncate_text(text, approx_text_tokens(text) // 2)

    for field in ("output", "arguments", "input"):
        value = item.get(field)
        if isinstance(value, str) and len(value) > 16:
            return {**item, field: shorter(value)}
    content = item.get("content")
    if isinstance(content, list):
        texts = [i for i, part in enumerate(content) if isinstance(part, dict) and len(str(part.get("text", ""))) > 16]
        if texts:
            longest = max(texts, key=lambda i: len(content[i]["text"]))
            parts = list(content)
            parts[longest] = {**parts[longest], "text": shorter(parts[longest]["text"])}
            return {**item, "content": parts}
    return None


def request_ladder(history: list[dict[str, Any]]) -> Any:
    """What to send, from most to least complete: yields (items, what was left out)."""
    yield history, None
    stripped = _stripped(history)
    if stripped != history:
        yield stripped, "tool outputs stripped"
    starts = [i for i, item in enumerate(stripped) if is_real_user_message(item)]
    turns = len(starts) // 2
    rest = stripped
    while turns >= 1:
        rest = stripped[starts[-turns]:]
        yield rest, f"only the last {turns} turn{'s' if turns > 1 else ''}"
        turns //= 2
    while len(rest) > 1:
        rest, _ = drop_oldest(rest)
        if rest:
            yield rest, f"only the last {len(rest)} items"
    for _ in range(MAX_HALVINGS):
        if not rest or (halved := _halved(rest[0])) is None:
            return
        rest = [halved]
        yield rest, "the last item shortened"


def with_trimming(history: list[dict[str, Any]], send: Callable[[list[dict[str, Any]]], Any],
                  progress: Progress | None, deadline: float | None = None) -> tuple[Any, int]:
    """Send, going down the request ladder while the endpoint says the request is too long, and
    until `deadline` (time.monotonic): a ladder is as long as the thread's last turn.
    Returns (answer, items of `history` not sent whole)."""
    last_error = ""
    for items, left_out in request_ladder(history):
        if left_out is not None and deadline is not None and time.monotonic() >= deadline:
            raise CompactionFailed("the compaction request does not fit the model's window, and the retry time "
                                   f"budget was spent shortening it: {last_error}")
        if left_out is not None and progress is not None:
            progress(f"request too long for the model ({last_error}); retrying with {left_out}")
        try:
            answer = send(items)
        except ContextTooLong as error:
            last_error = str(error)
            continue
        sent = {id(item) for item in items}
        return answer, sum(1 for item in history if id(item) not in sent)
    raise CompactionFailed(f"the compaction request does not fit the model's window even with one item: {last_error}")


# --- chat completions ----------------------------------------------------------------------------


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "\n".join(part.get("text", "[image]") if isinstance(part, dict) else str(part) for part in output)
    return json.dumps(output)


def to_chat_messages(items: list[dict[str, Any]]) -> list[dict[str, str]]:
    """Responses items as chat messages; tool calls and outputs become text, runs of one role merge."""
    messages: list[dict[str, str]] = []

    def add(role: str, text: str) -> None:
        if not text:
            return
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"] += "\n\n" + text
        else:
            messages.append({"role": role, "content": text})

    for item in items:
        kind = item.get("type")
        if kind == "message":
            role = item.get("role")
            text = message_text(item)
            if isinstance(item.get("content"), list) and any(
                    isinstance(p, dict) and p.get("type") == "input_image" for p in item["content"]):
                text = (text + "\n[image]").strip()
            add("assistant" if role == "assistant" else "system" if role in ("system", "developer") else "user", text)
        elif kind in CALL_TO_OUTPUT:
            body = item.get("arguments") if kind == "function_call" else item.get("input")
            add("assistant", f"[tool call `{item.get('name')}` id={item.get('call_id')}]\n{body}")
        elif kind in TOOL_OUTPUT_TYPES:
            add("user", f"[tool output id={item.get('call_id')}]\n{_output_text(item.get('output'))}")
        elif kind == "reasoning":
            summary = "\n".join(part.get("text", "") for part in item.get("summary") or [] if isinstance(part, dict))
            add("assistant", f"[reasoning]\n{summary}" if summary.strip() else "")
    return messages


_LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # (a JSON `\\udXXX` escape without its pair)


def _summary_or_fail(text: Any) -> str:
    """The summary, a lone surrogate replaced by U+FFFD: such a string cannot be stored or sent."""
    if not isinstance(text, str) or not text.strip():
        raise CompactionFailed("the model's answer held no summary text")
    return _LONE_SURROGATE.sub("\ufffd", text.strip())


def summarize(endpoint: Endpoint, history: list[dict[str, Any]], prompt: str, *,
              cancel: threading.Event, progress: Progress | None) -> tuple[str, int]:
    """Ask the model for a handoff summary of `history`. Returns (summary, trimmed items)."""
    ask = _ask_responses if endpoint.api == "responses" else _ask_chat
    deadline = time.monotonic() + endpoint.policy.budget_seconds

    def send(items: list[dict[str, Any]]) -> str:
        return _guarded(lambda client: ask(client, endpoint.model, items, prompt), endpoint, deadline, cancel, progress)

    if progress is not None:
        progress(f"asking {endpoint.model} for a handoff summary")
    return with_trimming(history, send, progress, deadline)


def _ask_chat(client: openai.OpenAI, model: str, items: list[dict[str, Any]], prompt: str) -> str:
    """The history as chat messages, the instruction as the last user message."""
    messages = to_chat_messages(items) + [{"role": "user", "content": prompt}]
    response = client.chat.completions.create(model=model, messages=cast(Any, messages))  # plain dicts of the wire shape
    try:
        content = response.choices[0].message.content
    except (AttributeError, IndexError, TypeError):
        raise CompactionFailed("the model's answer was not a chat completion") from None
    return _summary_or_fail(content)


def _ask_responses(client: openai.OpenAI, model: str, items: list[dict[str, Any]], prompt: str) -> str:
    """The items as they are, the instruction as one more user message; nothing stored server-side."""
    instruction = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}
    response = client.responses.create(model=model, input=cast(Any, items + [instruction]), store=False)
    return _summary_or_fail(_response_text(response))


def _response_text(response: Any) -> str:
    """The assistant text of a Responses answer (the last message's output_text parts)."""
    try:
        output = response.output
    except AttributeError:
        raise CompactionFailed("the model's answer was not a response object") from None
    if not isinstance(output, list):
        raise CompactionFailed("the model's answer was not a response object")
    texts = []
    for item in output:
        if getattr(item, "type", None) == "message" and getattr(item, "role", None) == "assistant":
            parts = [getattr(part, "text", "") for part in getattr(item, "content", None) or []]
            texts = [text for text in parts if isinstance(text, str)]
    return "\n".join(texts)


# --- remote compaction ---------------------------------------------------------------------------


def compact_remote(endpoint: Endpoint, history: list[dict[str, Any]], instructions: str, *,
                   cancel: threading.Event, progress: Progress | None) -> tuple[list[dict[str, Any]], int]:
    """POST /responses/compact; returns (the output items, trimmed items)."""
    deadline = time.monotonic() + endpoint.policy.budget_seconds

    def send(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
        def call(client: openai.OpenAI) -> list[dict[str, Any]]:
            raw = client.responses.with_raw_response.compact(model=endpoint.model, input=cast(Any, items),
                                                                instructions=instructions)
            return _compacted_items(strict_loads(raw.text))

        return _guarded(call, endpoint, deadline, cancel, progress)

    if progress is not None:
        progress(f"asking {endpoint.model} to compact the thread (/responses/compact)")
    return with_trimming(history, send, progress, deadline)


def _not_strict(text: str) -> Any:
    raise json.JSONDecodeError(f"{text} is not strict JSON", text, 0)


def _finite(text: str) -> float:
    value = float(text)
    if value in (float("inf"), float("-inf")):
        _not_strict(text)
    return value


def strict_loads(text: str) -> Any:
    """An endpoint's JSON, refusing NaN, Infinity and numbers that overflow: stored, they would
    poison the thread (every later reply carrying them could not be sent as strict JSON)."""
    return json.loads(text, parse_constant=_not_strict, parse_float=_finite)


def _compacted_items(body: Any) -> list[dict[str, Any]]:
    """The output items exactly as the endpoint spelled them (not re-serialized by the SDK)."""
    output = body.get("output") if isinstance(body, dict) else None
    if not isinstance(output, list) or not output:
        raise CompactionFailed("the compact endpoint's answer had no output items")
    items = output
    try:
        validate_items(items)
    except InvalidParams as error:
        raise CompactionFailed(f"the compact endpoint returned an unusable item: {error.message}") from None
    if any(item.get("type") == "ghost_snapshot" for item in items):
        raise CompactionFailed("the compact endpoint returned a ghost snapshot")
    problem = _unstorable(items)
    if problem is not None:
        raise CompactionFailed(f"the compact endpoint returned an unusable item: {problem}")
    return items


MAX_ITEM_DEPTH = 120  # about what fits in a client's request (the server refuses deeper than 128)


def _unstorable(items: list[Any]) -> str | None:
    """What in the endpoint's items the store cannot hold or a reply cannot carry, if anything (as
    in a client's request, refused): a lone surrogate, nesting too deep. Walked without recursion."""
    stack: list[tuple[Any, int]] = [(items, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, str):
            if _LONE_SURROGATE.search(value):
                return "a string holds an unpaired UTF-16 surrogate"
        elif isinstance(value, (dict, list)):
            if depth > MAX_ITEM_DEPTH:
                return f"JSON nested deeper than {MAX_ITEM_DEPTH} levels"
            stack.extend((child, depth + 1) for child in ([*value, *value.values()] if isinstance(value, dict) else value))
    return None


def _guarded(call: Callable[[openai.OpenAI], T], endpoint: Endpoint, deadline: float, cancel: threading.Event,
             progress: Progress | None) -> T:
    """One request with our retries, each attempt on a client of its own (closed when the attempt
    is cancelled or overdue, which ends the request under it); a body that does not parse is a
    permanent failure."""
    import openai

    clients: list[openai.OpenAI] = []

    def attempt() -> T:
        client = make_client(endpoint)
        clients.append(client)
        try:
            return call(client)
        except (openai.APIResponseValidationError, json.JSONDecodeError, UnicodeDecodeError) as error:
            raise CompactionFailed(f"the endpoint's answer did not parse ({type(error).__name__})") from None
        finally:
            client.close()

    def stop() -> None:
        for client in clients:
            client.close()

    return call_with_retries(attempt, policy=endpoint.policy, cancel=cancel, progress=progress,
                             secret=endpoint.api_key, on_cancel=stop, attempt_seconds=endpoint.timeout,
                             deadline=deadline)
