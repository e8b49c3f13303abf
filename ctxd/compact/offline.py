"""Compaction without a model: mask old tool outputs, then, if needed, an extractive summary.

Tool outputs are most of a coding thread's tokens and the least of its meaning once the model has
read them, so the first step replaces the bodies of all but the newest few with a placeholder that
keeps the tool's name, the body's size, its exit code and its first error lines. When that is not
enough, the thread is replaced like an LLM compaction would replace it (recent user messages, a
handoff summary, the ghost snapshots), except that the summary is extracted rather than written:
constraints the user stated, decisions and the latest conclusion, errors seen, commands run and
their failures, files and paths touched, earlier requests, any earlier summary (merged section by
section, every line of it kept whatever the budget: a summary carries the earlier ones forward),
and with what budget is left, the assistant's earlier messages. Everything here is a pure
function of the items, so the same thread always compacts to the same history.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ctxd.compact.history import (
    ghost_snapshots,
    recent_user_messages,
    summary_message,
)
from ctxd.ledger.rules import (
    PLACEHOLDER_RE,
    SUMMARY_PREFIX,
    TOOL_CALL_TYPES,
    TOOL_OUTPUT_TYPES,
    is_real_user_message,
    is_summary_message,
    message_text,
)
from ctxd.ledger.truncation import truncate_text
from ctxd.tokens.approx import approx_text_tokens, item_tokens
from ctxd.tokens.counter import count_item

KEEP_RECENT_OUTPUTS = 3
PLACEHOLDER_ERRORS = 8  # distinct error lines a masked output's placeholder quotes
PLACEHOLDER_DEFINITIONS = 3  # search hits that define something, quoted likewise
ERRORS_PER_OUTPUT = 5
MAX_LINE_CHARS = 240
SHELL_TOOLS = {"shell", "bash", "exec_command", "local_shell", "container.exec", "run_command", "terminal", "sh"}

ERROR_RE = re.compile(
    r"\b\w*(?:Error|Exception)\b|\btraceback\b|\berror\b|\bfailed\b|\bfailure\b|\bfatal\b|\bpanic(?:ked)?\b"
    r"|\bdenied\b|\bnot found\b|\bno such file\b|\bcannot\b|\bunable to\b|\bsegmentation fault\b|\btimed out\b"
    r"|\bERR!",
    re.IGNORECASE,
)
STRONG_ERROR_RE = re.compile(
    r"(?:E\s+|\w+:\d+: )?(?:[\w.]*(?:Error|Exception)\b|error(?:\[\w+\])?:|fatal:|panic|FAILED|ERROR\b|Traceback|npm ERR!)",
)
# Source lines (a file read, a diff, a traceback's code context) mention errors without reporting one.
CODE_LINE_RE = re.compile(r"(?:raise|except|throw|catch|try|if|elif|else|return|def|class|import|from|assert)\b"
                          r"|#|//|/\*|\*|@|[+-](?!\d)")
# Lines that mention errors without reporting one ("0 errors", "errors: none").
NOT_ERROR_RE = re.compile(r"\b(?:0|no) (?:errors?|failures?|failed)\b|\berrors?: (?:none|0)\b", re.IGNORECASE)
EXIT_RE = re.compile(r"(?:exit[_ ]code|exit status|exited with(?: code)?|returncode)[\"']?\s*[:=]?\s*(-?\d+)", re.IGNORECASE)
PATH_RE = re.compile(
    r"(?<![\w@/.-])(?:~|\.{1,2})?/?(?:[\w@+-][\w.@+-]*/)+[\w.@+-]+/?"      # a/b/c, /abs/path, ./rel, ~/x
    r"|(?<![\w/.-])[\w-][\w.-]*\.(?:py|pyi|js|jsx|ts|tsx|rs|go|java|kt|c|h|cc|cpp|hpp|cs|rb|php|swift|lua"
    r"|sh|toml|yaml|yml|json|md|txt|cfg|ini|lock|sql|html|css|vue|proto|gradle|xml)\b"
)
DECISION_RE = re.compile(
    r"\b(?:decid\w*|decision|chose|choose|going with|go with|settled on|we(?:'ll| will) use|i(?:'ll| will) use"
    r"|let's use|instead of|rather than|root cause|the fix is|fixed by|conclusion|plan is|we should|approach"
    r"|switch(?:ed|ing)? (?:\w+ ){0,3}to|migrat\w*|replac\w* (?:\w+ ){0,3}with)\b",
    re.IGNORECASE,
)
CONSTRAINT_RE = re.compile(
    r"\b(?:must|mustn't|never|always|only|don't|do not|avoid|prefer\w*|should(?:n't| not)?|keep|without"
    r"|make sure|required?|no more than|at most|at least|constraint)\b",
    re.IGNORECASE,
)
SENTENCE_RE = re.compile(r"(?<=[.!?])\s+|\n+")
# A search hit (`path:line:text`, as grep, rg and git grep print it) whose text defines a name.
DEFINITION_RE = re.compile(
    r"^[^\s:]+:\d+:(?:\d+:)?\s*(?:(?:export|pub(?:\([\w:]+\))?|public|private|protected|static|async|default|abstract)\s+)*"
    r"(?:def|class|fn|func|function|struct|enum|interface|trait|type|impl|module|const|let)\s+\w"
)


@dataclass
class OfflineResult:
    items: list[dict[str, Any]]
    summary: str
    masked: int


Count = Callable[[str], int]


def history_tokens(items: list[dict[str, Any]], count: Count | None = None) -> int:
    """Tokens of `items`: with the thread's counter (what the gauge and targets use), or without
    one in Codex's approximate units (bytes / 4 of each item's JSON)."""
    if count is None:
        return sum(item_tokens(item) for item in items)
    return sum(count_item(item, count) for item in items)


# --- step 1: masking ----------------------------------------------------------------------------


def _output_text(output: Any) -> str:
    if isinstance(output, str):
        return output
    if isinstance(output, list):
        return "\n".join(part.get("text", "") for part in output if isinstance(part, dict) and isinstance(part.get("text"), str))
    return ""


def _clip(line: str, limit: int = MAX_LINE_CHARS) -> str:
    line = " ".join(line.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def _tool_result(output: Any) -> tuple[str, int | None]:
    """A tool output's text and exit code, from Codex's JSON shape ({"output", "metadata"}) or plain text."""
    text = _output_text(output)
    if text.startswith("{"):
        try:
            data = json.loads(text)
        except ValueError:
            data = None
        if isinstance(data, dict):
            metadata = data.get("metadata")
            meta = metadata if isinstance(metadata, dict) else data
            code = meta.get("exit_code") if isinstance(meta.get("exit_code"), int) else None
            if isinstance(data.get("output"), str):
                return data["output"], code
            if code is not None:
                return text, code
    match = EXIT_RE.search(text[:400]) or EXIT_RE.search(text[-400:])
    return text, int(match.group(1)) if match else None


def _error_lines(text: str, limit: int | None = None) -> list[str]:
    """Lines that report an error, the definite ones (`E   KeyError: ...`, `error[E0382]: ...`,
    `FAILED ...`) in preference to lines that merely mention one; source code is skipped."""
    strong: list[str] = []
    weak: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or CODE_LINE_RE.match(line) or not ERROR_RE.search(line) or NOT_ERROR_RE.search(line):
            continue
        (strong if STRONG_ERROR_RE.match(line) else weak).append(_clip(line))
    found = list(dict.fromkeys(strong or weak))
    return found if limit is None else found[:limit]


def _call_names(items: list[dict[str, Any]]) -> dict[Any, str]:
    return {item.get("call_id"): str(item.get("name", "tool")) for item in items if item.get("type") in TOOL_CALL_TYPES}


def mask_placeholder(name: str, output: Any) -> str:
    text, code = _tool_result(output)
    tokens = approx_text_tokens(text) if text else approx_text_tokens(json.dumps(output))
    note = f"[output of `{name}` removed by compaction: {tokens} tokens, {text.count(chr(10)) + 1 if text else 0} lines"
    if code is not None:
        note += f", exit code {code}"
    errors = _error_lines(text, PLACEHOLDER_ERRORS)
    if errors:
        note += "; errors: " + QUOTE_SEPARATOR.join(errors)
    definitions = _definition_lines(text, PLACEHOLDER_DEFINITIONS)
    if definitions:
        note += "; definitions: " + QUOTE_SEPARATOR.join(definitions)
    return note + "]"


QUOTE_SEPARATOR = " | "
MAX_PLACEHOLDER_CHARS = 200 + (PLACEHOLDER_ERRORS + PLACEHOLDER_DEFINITIONS) * (MAX_LINE_CHARS + len(QUOTE_SEPARATOR))


def _output_facts(text: str) -> tuple[list[str], list[str]]:
    """A tool output's error lines and definitions; of a placeholder (an earlier compaction's),
    the ones it quotes, so that a second compaction carries them on."""
    placeholder = PLACEHOLDER_RE.match(text) if len(text) <= MAX_PLACEHOLDER_CHARS else None
    if placeholder is None:
        return _error_lines(text, ERRORS_PER_OUTPUT), _definition_lines(text, PLACEHOLDER_DEFINITIONS)

    def quoted(name: str) -> list[str]:
        return [line for line in (placeholder.group(name) or "").split(QUOTE_SEPARATOR) if line]

    return quoted("errors"), quoted("definitions")


def _is_placeholder(output: Any) -> bool:
    """Whether an output is a placeholder already (one that only looks like one, but is longer
    than any this module writes, is masked as any other output)."""
    return isinstance(output, str) and len(output) <= MAX_PLACEHOLDER_CHARS and PLACEHOLDER_RE.match(output) is not None


def _definition_lines(text: str, limit: int) -> list[str]:
    """The hits of a search that define a name (`src/a.py:12:def parse(`): where a symbol lives
    is what a search was usually run to learn."""
    found = [_clip(line.strip()) for line in text.splitlines() if DEFINITION_RE.match(line.strip())]
    return list(dict.fromkeys(found))[:limit]


def mask_tool_outputs(items: list[dict[str, Any]], keep_recent: int = KEEP_RECENT_OUTPUTS) -> tuple[list[dict[str, Any]], int]:
    """Replace the bodies of all but the newest `keep_recent` tool outputs with a placeholder."""
    names = _call_names(items)
    positions = [i for i, item in enumerate(items) if item.get("type") in TOOL_OUTPUT_TYPES]
    old = set(positions[: max(0, len(positions) - keep_recent)])
    out: list[dict[str, Any]] = []
    masked = 0
    for index, item in enumerate(items):
        if index in old and not _is_placeholder(item.get("output")):  # (masked by an earlier compaction)
            placeholder = mask_placeholder(names.get(item.get("call_id"), "tool"), item.get("output"))
            if approx_text_tokens(placeholder) < item_tokens(item):
                item = {**item, "output": placeholder}
                masked += 1
        out.append(item)
    return out, masked


# --- step 2: extractive summary -----------------------------------------------------------------


def _command_of(item: dict[str, Any]) -> str | None:
    """The command line of a shell-like call, or None for other tools."""
    raw = item.get("arguments") if item.get("type") == "function_call" else item.get("input")
    args: Any = None
    if isinstance(raw, str):
        try:
            args = json.loads(raw)
        except ValueError:
            args = None
    command = args.get("command", args.get("cmd")) if isinstance(args, dict) else None
    if command is None:
        return raw if str(item.get("name")) in SHELL_TOOLS and isinstance(raw, str) else None
    if isinstance(command, list) and all(isinstance(part, str) for part in command):
        if len(command) == 3 and command[0] in ("bash", "sh", "zsh") and command[1] in ("-lc", "-c"):
            return str(command[2])
        return shlex.join(command)
    return str(command)


def _sentences(text: str) -> list[str]:
    return [part.strip() for part in SENTENCE_RE.split(text) if part.strip()]


def _paths(text: str) -> list[str]:
    found = []
    for match in PATH_RE.finditer(text):
        path = match.group(0).rstrip(".,:;)")
        if len(path) > 2 and not path.startswith("//") and not re.fullmatch(r"[\d./]+", path):
            found.append(path)
    return found


@dataclass
class Section:
    title: str
    lines: list[str]          # chronological
    keep_newest: bool = True  # under pressure, keep the newest lines (else the oldest)
    pinned: frozenset[str] = frozenset()  # lines an earlier summary said: kept whatever the budget


def extract_sections(items: list[dict[str, Any]], skip_requests: int = 0) -> list[Section]:
    """The facts worth handing over, in order of importance.

    `skip_requests` leaves out the newest real user messages, because the new history carries
    them verbatim anyway.
    """
    outputs = {item.get("call_id"): _tool_result(item.get("output")) for item in items if item.get("type") in TOOL_OUTPUT_TYPES}
    user_texts = [message_text(item) for item in items if is_real_user_message(item)]
    requests = user_texts[: len(user_texts) - skip_requests] if skip_requests else user_texts

    constraints: list[str] = []
    for text in user_texts:
        constraints.extend(_clip(s, 400) for s in _sentences(text) if CONSTRAINT_RE.search(s))

    assistant_texts = [message_text(item) for item in items if item.get("type") == "message" and item.get("role") == "assistant"]
    decisions: list[str] = []
    for text in assistant_texts[:-1]:
        decisions.extend(_clip(s, 400) for s in _sentences(text) if DECISION_RE.search(s))
    latest = [truncate_text(assistant_texts[-1].strip(), 600)] if assistant_texts and assistant_texts[-1].strip() else []

    errors: list[str] = []
    commands: list[str] = []
    failed: list[str] = []
    paths: list[str] = []
    definitions: list[str] = []
    for item in items:
        kind = item.get("type")
        if kind in TOOL_CALL_TYPES:
            command = _command_of(item)
            raw = item.get("arguments") if kind == "function_call" else item.get("input")
            paths.extend(_paths(raw if isinstance(raw, str) else ""))
            result, code = outputs.get(item.get("call_id"), ("", None))
            if command is not None:
                status = "" if code is None else (" (ok)" if code == 0 else f" (failed, exit code {code})")
                commands.append(f"`{_clip(command, 300)}`{status}")
                if code not in (None, 0):
                    first = _error_lines(result)[:1]
                    failed.append(f"`{_clip(command, 200)}` exit code {code}" + (f": {first[0]}" if first else ""))
        elif kind in TOOL_OUTPUT_TYPES:
            found, defined = _output_facts(_tool_result(item.get("output"))[0])
            errors.extend(found)
            definitions.extend(defined)
        elif kind == "message" and item.get("role") in ("user", "assistant") and not is_summary_message(item):
            text = message_text(item)
            paths.extend(_paths(text))
            if item.get("role") == "assistant":
                errors.extend(line for line in _error_lines(text) if re.search(r"\w+(?:Error|Exception)\b|error:", line))

    # An earlier offline summary is merged section by section (its lines are older than ours);
    # any other earlier summary (a model's prose) is carried as one block.
    carried: dict[str, list[str]] = {}
    blocks: list[str] = []
    for item in items:
        if is_summary_message(item):
            text = message_text(item)[len(SUMMARY_PREFIX):].strip()
            parsed = parse_summary(text)
            if parsed is None:
                blocks.append(text)
                continue
            for title, lines in parsed.items():
                carried.setdefault(CARRY_INTO.get(title, title), []).extend(lines)

    def merged(title: str, lines: list[str], keep_last: bool = False, counted: bool = False) -> Section:
        earlier = {COUNT_RE.sub("", line) if counted else line for line in carried.get(title, [])}
        kept = unique(carried.get(title, []) + lines, keep_last, counted)
        return Section(title, kept, pinned=frozenset(line for line in kept
                                                     if (COUNT_RE.sub("", line) if counted else line) in earlier))

    return [
        merged(CONSTRAINTS, constraints),
        Section(LATEST, latest),
        merged(DECISIONS, decisions),
        merged(ERRORS, errors),
        merged(FAILED, failed),
        merged(PATHS, paths, keep_last=True),
        merged(DEFINITIONS, definitions, keep_last=True),
        Section(EARLIER, carried.get(EARLIER, []) + blocks, pinned=frozenset(carried.get(EARLIER, []) + blocks)),
        merged(REQUESTS, [_clip(text, 600) for text in requests]),
        merged(COMMANDS, commands, keep_last=True, counted=True),
        # What is left of the budget goes to the assistant's own words, newest first.
        Section(NOTES, unique([_clip(text, 400) for text in assistant_texts[:-1] if text.strip()])),
    ]


CONSTRAINTS = "Constraints and preferences the user stated"
LATEST = "Latest assistant conclusion"
DECISIONS = "Decisions and findings"
ERRORS = "Errors seen"
FAILED = "Failed commands"
PATHS = "Files and paths touched"
DEFINITIONS = "Definitions found by searches"
EARLIER = "Earlier summary"
REQUESTS = "Earlier user requests"
COMMANDS = "Commands run"
NOTES = "Earlier assistant messages"
TITLES = (CONSTRAINTS, LATEST, DECISIONS, ERRORS, FAILED, PATHS, DEFINITIONS, EARLIER, REQUESTS, COMMANDS, NOTES)
CARRY_INTO = {LATEST: DECISIONS}  # an old "latest conclusion" is now just a finding
MORE_RE = re.compile(r"^\(\+\d+ more not shown\)$")
COUNT_RE = re.compile(r" ×\d+$")


def unique(lines: list[str], keep_last: bool = False, counted: bool = False) -> list[str]:
    """Drop repeats, keeping each line where it first (or, with keep_last, last) appeared;
    `counted` appends how often a line occurred."""
    counts: dict[str, int] = {}
    for line in lines:
        if counted:
            match = COUNT_RE.search(line)
            n, line = (int(match.group(0)[2:]), line[: match.start()]) if match else (1, line)
        else:
            n = 1
        counts[line] = counts.pop(line, 0) + n if keep_last else counts.get(line, 0) + n
    return [line if count == 1 or not counted else f"{line} ×{count}" for line, count in counts.items()]


def parse_summary(text: str) -> dict[str, list[str]] | None:
    """The sections of a summary this module wrote, or None for any other text."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("## "):
            title = line[3:].strip()
            if title not in TITLES:
                return None
            current = sections.setdefault(title, [])
        elif not line or MORE_RE.match(line):
            continue
        elif current is None:
            return None
        elif title == EARLIER and current:
            current[-1] += "\n" + raw
        else:
            current.append(line.removeprefix("- "))
    return sections or None


def render_summary(sections: list[Section], budget: int, count: Count = approx_text_tokens) -> str:
    """Fit the sections into `budget` tokens, sharing it fairly, and render them as markdown.

    Water-filling: every section gets an equal share of what is left; sections needing less
    return the difference to the others. A line that does not fit is dropped whole, except the
    one line of a single-line section, which is middle-truncated.
    """
    def line_cost(line: str) -> int:
        return count(line) + 1

    sections = [section for section in sections if section.lines]
    header_cost = sum(line_cost(f"## {section.title}\n") for section in sections)
    # What earlier summaries said is kept first, whatever it costs; the rest shares what is left.
    pinned_cost = sum(line_cost(line) for section in sections for line in section.lines if line in section.pinned)
    available = max(0, budget - header_cost - 8 - pinned_cost)
    demand = {id(section): sum(line_cost(line) for line in section.lines if line not in section.pinned)
              for section in sections}
    share: dict[int, int] = {}
    pending = list(sections)
    while pending:
        each = available // len(pending)
        satisfied = [section for section in pending if demand[id(section)] <= each]
        if not satisfied:
            for section in pending:
                share[id(section)] = each
            break
        for section in satisfied:
            share[id(section)] = demand[id(section)]
            available -= demand[id(section)]
            pending.remove(section)

    out: list[str] = []
    for section in sections:
        allowance = share.get(id(section), 0)
        lines = section.lines
        if demand[id(section)] > allowance:
            if len(lines) == 1 and not section.pinned:
                lines = [truncate_text(lines[0], max(0, allowance - 2))] if allowance > 8 else []
            else:
                order = list(reversed(lines)) if section.keep_newest else list(lines)
                chosen: list[str] = [line for line in lines if line in section.pinned]
                for line in order:
                    if line in section.pinned:
                        continue
                    cost = line_cost(line)
                    if cost > allowance:
                        break
                    chosen.append(line)
                    allowance -= cost
                keep = set(chosen)
                lines = [line for line in section.lines if line in keep]
                omitted = len(section.lines) - len(lines)
                if omitted and lines and line_cost(f"(+{omitted} more not shown)") <= allowance:
                    lines.append(f"(+{omitted} more not shown)")
        if not lines:
            continue
        out.append(f"## {section.title}")
        out.extend(line if section.title in (EARLIER, LATEST) else f"- {line}" for line in lines)
        out.append("")
    return "\n".join(out).strip()


TRAIL_TOKENS = 1_000
TRAIL_TITLES = (ERRORS, FAILED, PATHS, COMMANDS)


def artifact_trail(items: list[dict[str, Any]], budget: int = TRAIL_TOKENS, count: Count = approx_text_tokens) -> str:
    """The files touched, commands run and errors seen, rendered like a summary's sections."""
    sections = [section for section in extract_sections(items) if section.title in TRAIL_TITLES]
    return render_summary(sections, budget, count)


def offline_compact(items: list[dict[str, Any]], *, target_tokens: int, user_message_max_tokens: int,
                    try_masking: bool = True, count: Count | None = None) -> OfflineResult:
    """Compact `items` towards `target_tokens` of `count` (the thread's counter), without a model.

    The newest real user messages are kept verbatim up to `user_message_max_tokens` (Codex's
    `COMPACT_USER_MESSAGE_MAX_TOKENS`, in Codex's approximate units as Codex counts that budget),
    whatever the target: the user's own words are what a handoff must not lose. The summary gets
    what the target leaves, and at least half the target. `try_masking=False` goes straight to the
    summary (the benchmark measures both steps)."""
    counter = count or approx_text_tokens
    masked_items, masked = mask_tool_outputs(items) if try_masking else (items, 0)
    if masked and history_tokens(masked_items, count) <= target_tokens:
        note = f"Removed the bodies of {masked} old tool outputs; the conversation is otherwise intact."
        trail = artifact_trail(items, count=counter)
        return OfflineResult(masked_items, f"{note}\n\n{trail}" if trail else note, masked)

    user_budget = max(0, user_message_max_tokens)
    # An opaque remote compaction cannot be summarized here; the newest one is kept as it is.
    opaque = [item for item in items if item.get("type") == "compaction"][-1:]
    messages = recent_user_messages(items, user_budget)
    # Each message costs its JSON too: the oldest go until they fit (each counted once, not the
    # whole list again per message dropped, which took minutes for thousands of short turns).
    costs = [item_tokens(message) for message in messages]
    total, first = sum(costs), 0
    while first < len(messages) and total > user_budget:
        total -= costs[first]
        first += 1
    messages = messages[first:]
    head = opaque + messages
    prefix_cost = history_tokens([summary_message("")], count)
    summary_budget = max(target_tokens - history_tokens(head, count) - prefix_cost, target_tokens // 2)
    sections = extract_sections(items, skip_requests=len(messages))
    summary = render_summary(sections, summary_budget, counter)
    # A rendered item can count more than its lines did (JSON escaping, joins): shrink until it fits.
    while summary and history_tokens([summary_message(summary)], count) > summary_budget + prefix_cost and summary_budget > 0:
        summary_budget = summary_budget * 9 // 10
        summary = render_summary(sections, summary_budget, counter)
    if not summary:
        summary = "(nothing to carry over)"
    return OfflineResult(head + [summary_message(summary)] + ghost_snapshots(items), summary, 0)
