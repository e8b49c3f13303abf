"""A heavy user's history of agent sessions (issue #38), built from real-shaped records, seeded.

One project (`workspace`) with 2,000 Claude Code sessions and 1,000 Codex rollouts over 90 days,
about 1.67 GB in all at full size, and 50 other projects with 203 sessions between them. `scale`
multiplies every count and size (1/3 for the quick run).

Every session is made of the records the real agents wrote (tests/fixtures/agents: Claude Code
2.1.332's transcript and its subagent's, Codex 0.171's rollout), repeated turn after turn with
fresh ids, times, usage that grows as a conversation's does, and tool outputs long enough for
the sizes real sessions have (lognormal, a few tens of KB to tens of MB). Some Claude sessions
were compacted by Claude Code (its `compact_boundary` and summary), some have a subagent's file,
and some started with a slash command (`/init`) rather than a prompt.

Built once per (scale, seed) into a cache folder and reused: `build()` returns at once when the
folder is complete.
"""

from __future__ import annotations

import json
import math
import random
import re
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures" / "agents"
VERSION = 6  # bump when what is built changes: a cached history of another version is built again

FULL_CLAUDE, FULL_CODEX = 2_000, 1_000
FULL_BYTES = 1_670_000_000  # the project's sessions at full size
OTHER_PROJECTS, OTHER_SESSIONS = 50, 203
DAYS = 90
END = datetime(2026, 11, 30, 18, 0, tzinfo=UTC)  # the newest session's day

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")
_SLOT = re.compile("\x00(\\w+)\x00")
FIXTURE_CWD = "/home/user/app"


@dataclass
class History:
    root: Path
    codex_home: Path
    claude_home: Path
    workspace: Path
    sessions: int  # in the workspace
    workspace_bytes: int
    other_sessions: int
    total_bytes: int
    newest: str  # the thread of the workspace's newest session


def _compact(record: dict[str, Any]) -> str:
    return json.dumps(record, separators=(",", ":"), ensure_ascii=False)


def _text(rng: random.Random, size: int) -> str:
    """Source-like text of about `size` characters (what tool outputs and files hold)."""
    words = ["def", "return", "self", "value", "import", "class", "for", "in", "if", "else", "None", "items",
             "config", "path", "result", "error", "test", "assert", "len", "range", "print", "data", "json"]
    lines = []
    total = 0
    n = rng.randrange(1000)
    while total < size:
        line = f"{'    ' * (n % 3)}{' '.join(rng.choice(words) for _ in range(3 + n % 7))}  # {n}"
        lines.append(line)
        total += len(line) + 1
        n += 1
    return "\n".join(lines)


class _Template:
    """One fixture file as text with slots: ids, times, the folder and the usage are filled per copy."""

    def __init__(self, path: Path, session_key: str) -> None:
        records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        self.records = records
        self.session_key = session_key
        stamps = sorted({s for r in records for s in _STAMP.findall(json.dumps(r))})
        self.t0 = _parse(stamps[0])
        self.span = (_parse(stamps[-1]) - self.t0).total_seconds()


def _parse(stamp: str) -> datetime:
    return datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


def _iso(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


class _Ids:
    """Fresh uuids per copy, derived from the seed: the same history every build."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def uuid(self) -> str:
        h = f"{self.rng.getrandbits(128):032x}"
        return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-8{h[17:20]}-{h[20:32]}"


def _claude_lines(template: _Template, rng: random.Random, ids: _Ids, session: str, cwd: str, start: datetime,
                  copies: int, output: int, compact_at: int | None, slash: bool) -> tuple[list[str], datetime]:
    """A Claude Code transcript: the fixture's two turns `copies` times over, chained."""
    lines: list[str] = []
    parent_last: str | None = None
    context = 4_000
    moment = last = start
    for k in range(copies):
        uuid_map: dict[str, str] = {}
        offset = moment - template.t0
        first_message = True
        if compact_at is not None and k == compact_at:
            boundary = ids.uuid()
            lines.append(_compact({
                "parentUuid": None, "logicalParentUuid": parent_last, "isSidechain": False, "userType": "external",
                "cwd": cwd, "sessionId": session, "version": "2.1.332", "gitBranch": "main", "type": "system",
                "subtype": "compact_boundary", "content": "Conversation compacted", "isMeta": False,
                "timestamp": _iso(moment), "uuid": boundary, "level": "info",
                "compactMetadata": {"trigger": "auto", "preTokens": context, "postTokens": 9_000}}))
            summary = ids.uuid()
            lines.append(_compact({
                "parentUuid": boundary, "isSidechain": False, "type": "user", "message": {"role": "user", "content": (
                    "This session is being continued from a previous conversation that ran out of context. "
                    + _text(rng, 3_000))}, "isVisibleInTranscriptOnly": True, "isCompactSummary": True,
                "uuid": summary, "timestamp": _iso(moment), "userType": "external", "cwd": cwd, "sessionId": session,
                "version": "2.1.332", "gitBranch": "main"}))
            parent_last = summary
            context = 9_000
        for record in template.records:
            rec = json.loads(json.dumps(record))  # a copy to change
            text = json.dumps(rec)
            for found in set(_UUID.findall(text)):
                if found != template.session_key:
                    uuid_map.setdefault(found, ids.uuid())
            kind = rec.get("type")
            if kind in ("user", "assistant", "system", "attachment") and "parentUuid" in rec:
                if rec["parentUuid"] is None and parent_last is not None:
                    rec["parentUuid"] = parent_last  # the next turns hang from the last line of the one before
            message = rec.get("message") if isinstance(rec.get("message"), dict) else None
            if kind == "user" and message is not None:
                content = message.get("content")
                if isinstance(content, str) and slash and not rec.get("isMeta"):
                    # A slash command, as Claude Code writes one, then the prompt it stands for.
                    command = "/init" if first_message and k == 0 else "/review"
                    message["content"] = (f"<command-message>{command[1:]} is running…</command-message>\n"
                                          f"<command-name>{command}</command-name>\n"
                                          f"<command-args>{'' if command == '/init' else 'the last change'}"
                                          "</command-args>")
                    lines.append(_finish(rec, uuid_map, template, session, cwd, offset))
                    meta = json.loads(json.dumps(rec))
                    meta["uuid"] = ids.uuid()
                    meta["parentUuid"] = rec["uuid"]
                    meta["isMeta"] = True
                    meta["message"] = {"role": "user", "content": [{"type": "text", "text": (
                        "Please analyze this codebase and create a CLAUDE.md file, which will be given to "
                        "future instances of Claude Code to operate in this repository.")}]}
                    lines.append(_finish(meta, uuid_map, template, session, cwd, offset))
                    first_message = False
                    continue
                if isinstance(content, str):
                    first_message = False
                if isinstance(content, list):
                    for block in content:
                        if isinstance(block, dict) and block.get("type") == "tool_result":
                            block["content"] = _text(rng, output)
                    # Claude Code keeps the tool's result again for itself (never sent to the model):
                    # the output or the file read, and the whole file an edit changed.
                    result = rec.get("toolUseResult")
                    if isinstance(result, dict):
                        for key in ("content", "stdout"):
                            if isinstance(result.get(key), str):
                                result[key] = _text(rng, output)
                        if "originalFile" in result:
                            result["originalFile"] = _text(rng, 3 * output)
                        if isinstance(result.get("file"), dict) and isinstance(result["file"].get("content"), str):
                            result["file"]["content"] = _text(rng, output)
            if kind == "api-request-blob" and isinstance(rec.get("message"), dict):
                # A message of the request as sent (Claude Code 2.1 logs each one once): a tool's
                # output or a prompt again, as long as the outputs of this session.
                for block in rec["message"].get("content") or []:
                    if isinstance(block, dict) and isinstance(block.get("text"), str):
                        block["text"] = _text(rng, output)
            if kind == "attachment" and isinstance(rec.get("attachment"), dict):
                body = rec["attachment"]
                for key in ("content", "text"):
                    if isinstance(body.get(key), str) and len(body[key]) > 100:
                        body[key] = _text(rng, output // 4)
            if kind == "assistant" and message is not None and isinstance(message.get("usage"), dict):
                usage = message["usage"]
                usage["cache_read_input_tokens"] = int(usage.get("cache_read_input_tokens") or 0) + context
                # As the API reports it (the fixture's scripted server left the split at 0).
                usage["cache_creation"] = {"ephemeral_1h_input_tokens": 0,
                                           "ephemeral_5m_input_tokens": usage.get("cache_creation_input_tokens", 0)}
                message["id"] = f"{message.get('id')}_{session[:8]}_{k}"
                for block in message.get("content") or []:
                    if isinstance(block, dict) and block.get("type") == "tool_use":
                        block["id"] = f"{block.get('id')}_{k}"
            if kind == "user" and message is not None and isinstance(message.get("content"), list):
                for block in message["content"]:
                    if isinstance(block, dict) and isinstance(block.get("tool_use_id"), str):
                        block["tool_use_id"] = f"{block['tool_use_id']}_{k}"
            if isinstance(rec.get("requestId"), str):
                rec["requestId"] = f"{rec['requestId']}_{session[:8]}_{k}"
            line = _finish(rec, uuid_map, template, session, cwd, offset)
            lines.append(line)
            if rec.get("uuid") and kind in ("user", "assistant", "system"):
                parent_last = uuid_map.get(rec["uuid"], rec["uuid"])
        context = min(150_000, context + 2 * output // 4 + 1_500)
        last = moment + timedelta(seconds=template.span)  # the copy's last line
        moment = last + timedelta(seconds=rng.randrange(30, 900))
    return lines, last


def _finish(rec: dict[str, Any], uuid_map: dict[str, str], template: _Template, session: str, cwd: str,
            offset: timedelta) -> str:
    text = _compact(rec)
    text = _UUID.sub(lambda m: session if m.group(0) == template.session_key else uuid_map.get(m.group(0), m.group(0)),
                     text)
    text = text.replace(FIXTURE_CWD, cwd)
    return _STAMP.sub(lambda m: _iso(_parse(m.group(0)) + offset), text)


def _codex_lines(template: _Template, rng: random.Random, ids: _Ids, session: str, cwd: str, start: datetime,
                 copies: int, output: int) -> tuple[list[str], datetime]:
    """A Codex rollout: its meta line once, then the fixture's two turns `copies` times over."""
    lines: list[str] = []
    moment = last = start
    totals = {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    context = 0
    for k in range(copies):
        uuid_map: dict[str, str] = {}
        offset = moment - template.t0
        for record in template.records:
            if record.get("type") == "session_meta" and k:
                continue
            rec = json.loads(json.dumps(record))
            for found in set(_UUID.findall(json.dumps(rec))):
                if found != template.session_key:
                    uuid_map.setdefault(found, ids.uuid())
            payload = rec.get("payload") if isinstance(rec.get("payload"), dict) else {}
            kind = payload.get("type")
            if rec.get("type") == "response_item" and kind in ("function_call_output", "custom_tool_call_output"):
                payload["output"] = _text(rng, output)
            if isinstance(payload.get("call_id"), str):
                payload["call_id"] = f"{payload['call_id']}_{k}"
            item = payload.get("item") if kind == "item_completed" else None
            if isinstance(item, dict):  # Codex's own record of the call: the output again, the diff
                if "aggregated_output" in item:
                    item["aggregated_output"] = _text(rng, output)
                for change in (item.get("changes") or {}).values() if isinstance(item.get("changes"), dict) else []:
                    if isinstance(change, dict) and "unified_diff" in change:
                        change["unified_diff"] = _text(rng, output)
            if rec.get("type") == "event_msg" and kind == "token_count" and isinstance(payload.get("info"), dict):
                # The request's usage grows with the conversation; the running total adds it up.
                info = payload["info"]
                total, last = info.get("total_token_usage") or {}, info.get("last_token_usage") or {}
                if last.get("input_tokens"):
                    for key in ("input_tokens", "cached_input_tokens", "total_tokens"):
                        last[key] = int(last.get(key) or 0) + context
                    for key in totals:
                        totals[key] += int(last.get(key) or 0)
                for key in totals:
                    if key in total:
                        total[key] = totals[key]
            lines.append(_finish(rec, uuid_map, template, session, cwd, offset))
        context = min(200_000, context + output // 2 + 1_000)
        last = moment + timedelta(seconds=template.span)  # the copy's last line
        moment = last + timedelta(seconds=rng.randrange(30, 900))
    return lines, last


def _sizes(rng: random.Random, count: int, total: int) -> list[int]:
    """`count` session sizes (lognormal, a few KB to tens of MB) adding up to about `total`."""
    raw = [math.exp(rng.gauss(0, 1.25)) for _ in range(count)]
    factor = total / sum(raw)
    return [max(20_000, min(60_000_000, int(r * factor))) for r in raw]


def _write(path: Path, lines: list[str], mtime: datetime) -> int:
    import os

    path.parent.mkdir(parents=True, exist_ok=True)
    data = ("\n".join(lines) + "\n").encode()
    path.write_bytes(data)
    stamp = mtime.timestamp()
    os.utime(path, (stamp, stamp))
    return len(data)


def _encode(directory: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "-", directory)


def build(cache: Path, scale: float = 1.0, seed: int = 38, log: Any = print) -> History:
    """The history for (`scale`, `seed`), built into `cache` unless it is there already."""
    root = cache / f"heavy-v{VERSION}-s{scale:.3f}-{seed}"
    marker = root / "built.json"
    if marker.exists():
        return History(**{**json.loads(marker.read_text()), "root": root, "codex_home": root / "codex",
                          "claude_home": root / "claude", "workspace": root / "ws"})
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    rng = random.Random(seed)
    ids = _Ids(random.Random(seed + 1))
    claude_t = _Template(FIXTURES / "claude-2.1.332.jsonl", "2009bcc5-85ba-431c-b4e2-481f4e482c80")
    sub_t = _Template(FIXTURES / "claude-2.1.332-subagent.jsonl", "2009bcc5-85ba-431c-b4e2-481f4e482c80")
    codex_t = _Template(FIXTURES / "codex-0.171.0.jsonl", "01a219b9-80e7-7552-a543-f38a9b3d96e5")
    claude_home, codex_home, workspace = root / "claude", root / "codex", root / "ws"
    workspace.mkdir()
    n_claude, n_codex = round(FULL_CLAUDE * scale), round(FULL_CODEX * scale)
    sizes = _sizes(rng, n_claude + n_codex, int(FULL_BYTES * scale))
    agents = ["claude"] * n_claude + ["codex"] * n_codex
    rng.shuffle(agents)
    starts = sorted(END - timedelta(seconds=rng.randrange(DAYS * 86_400)) for _ in agents)
    total = ws_bytes = 0
    newest, latest = "", starts[0]
    for n, (agent, size, start) in enumerate(zip(agents, sizes, starts, strict=True)):
        written, thread, end = _session(root, rng, ids, agent, str(workspace), start, size,
                                        claude_t, sub_t, codex_t, claude_home, codex_home)
        ws_bytes += written
        if end >= latest:
            newest, latest = thread, end
        if n % 200 == 0:
            log(f"  built {n}/{len(agents)} sessions, {ws_bytes / 1e6:.0f} MB")
    others = [f"/home/user/projects/p{k:02d}" for k in range(max(1, round(OTHER_PROJECTS * scale)))]
    n_other = round(OTHER_SESSIONS * scale)
    for k in range(n_other):
        agent = "claude" if k % 3 else "codex"
        start = END - timedelta(seconds=rng.randrange(DAYS * 86_400))
        written, _, _ = _session(root, rng, ids, agent, others[k % len(others)], start,
                              int(math.exp(rng.gauss(11.5, 0.8))), claude_t, sub_t, codex_t, claude_home, codex_home)
        total += written
    total += ws_bytes
    facts = {"sessions": len(agents), "workspace_bytes": ws_bytes, "other_sessions": n_other, "total_bytes": total,
             "newest": newest}
    marker.write_text(json.dumps(facts))
    return History(root=root, codex_home=codex_home, claude_home=claude_home, workspace=workspace, **facts)


def _session(root: Path, rng: random.Random, ids: _Ids, agent: str, cwd: str, start: datetime, size: int,
             claude_t: _Template, sub_t: _Template, codex_t: _Template, claude_home: Path,
             codex_home: Path) -> tuple[int, str, datetime]:
    session = ids.uuid()
    output = rng.choice([800, 1_500, 3_000, 6_000, 12_000])
    if agent == "claude":
        unit = 90_000 + 31 * output  # about what one copy of the fixture weighs with outputs this long
        copies = max(1, round(size / unit))
        compact_at = copies // 2 if copies >= 4 and rng.random() < 0.15 else None
        slash = rng.random() < 0.04
        lines, end = _claude_lines(claude_t, rng, ids, session, cwd, start, copies, output, compact_at, slash)
        path = claude_home / "projects" / _encode(cwd) / f"{session}.jsonl"
        written = _write(path, lines, end)
        if rng.random() < 0.05:  # a subagent's own file, billed to the session
            sub, _ = _claude_lines(sub_t, rng, ids, session, cwd, start, 1, output, None, False)
            written += _write(path.with_suffix("") / "subagents" / f"agent-{ids.uuid()[:8]}.jsonl", sub, end)
        return written, f"claude:{session}", end
    unit = 28_000 + 8 * output
    copies = max(1, round(size / unit))
    lines, end = _codex_lines(codex_t, rng, ids, session, cwd, start, copies, output)
    day = start.strftime("%Y/%m/%d")
    path = codex_home / "sessions" / day / f"rollout-{start.strftime('%Y-%m-%dT%H-%M-%S')}-{session}.jsonl"
    return _write(path, lines, end), f"codex:{session}", end


if __name__ == "__main__":
    import argparse
    import tempfile

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=1 / 3)
    parser.add_argument("--cache", default=str(Path(tempfile.gettempdir()) / "ctxd-heavy"))
    args = parser.parse_args()
    built = build(Path(args.cache), args.scale)
    print(built)
