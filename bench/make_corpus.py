"""Generate the machine-made part of the token corpus: JSON tool output and shell logs.

The hand-written files (prose, code, Chinese, Japanese) are committed as they are; this script
regenerates `corpus/json_tool_output.txt` and `corpus/shell_log.txt` deterministically (fixed
seed), so the corpus can be reviewed and rebuilt: `python bench/make_corpus.py`.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
from pathlib import Path

HERE = Path(__file__).parent / "corpus"
WORDS = ["cache", "server", "client", "request", "token", "window", "usage", "ledger", "thread", "workspace", "snapshot", "compact", "history", "item", "message", "tool", "output", "config", "parser", "handler", "worker", "queue", "retry", "timeout", "error", "index", "build", "deploy", "release", "branch", "commit", "merge", "review", "test", "fixture", "module", "package"]
NAMES = ["alice", "bob", "carol", "dmitri", "eun-ji", "fatima", "gustavo", "hiro", "ingrid", "jamal"]
EXTS = [".py", ".ts", ".rs", ".go", ".md", ".json", ".toml", ".lua", ".c", ".h"]
ZH = ["修复登录超时问题", "更新依赖版本", "重构缓存模块", "添加单元测试", "优化查询性能"]


def sha(rng: random.Random, n: int = 40) -> str:
    return hashlib.sha1(str(rng.random()).encode()).hexdigest()[:n]


def path(rng: random.Random) -> str:
    depth = rng.randint(1, 4)
    parts = [rng.choice(WORDS) + rng.choice(["", "s", "_utils", "-core"]) for _ in range(depth)]
    return "/".join(["src", *parts]) + rng.choice(EXTS)


def sentence(rng: random.Random, n: int) -> str:
    text = " ".join(rng.choice(WORDS) for _ in range(n))
    return text[0].upper() + text[1:] + "."


def iso(rng: random.Random) -> str:
    return (
        f"2025-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}T"
        f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z"
    )


def json_samples(rng: random.Random) -> list[str]:
    out = []
    for _ in range(6):  # issue lists, as a GitHub-like API returns them
        issues = [
            {
                "id": rng.randint(10**8, 10**9),
                "number": rng.randint(1, 5000),
                "title": sentence(rng, rng.randint(3, 9)),
                "state": rng.choice(["open", "closed"]),
                "user": {"login": rng.choice(NAMES), "id": rng.randint(1000, 99999)},
                "labels": [{"name": rng.choice(["bug", "enhancement", "docs", "good first issue"])}],
                "created_at": iso(rng),
                "comments": rng.randint(0, 40),
                "body": sentence(rng, rng.randint(10, 40)) if rng.random() < 0.7 else None,
            }
            for _ in range(rng.randint(2, 5))
        ]
        out.append(json.dumps(issues, indent=2))
    for _ in range(6):  # code search results
        hits = {
            "total_count": rng.randint(1, 300),
            "items": [
                {
                    "path": path(rng),
                    "line": rng.randint(1, 2000),
                    "sha": sha(rng),
                    "preview": f"def {rng.choice(WORDS)}_{rng.choice(WORDS)}(self, {rng.choice(WORDS)}: int) -> None:",
                    "score": round(rng.random() * 20, 4),
                }
                for _ in range(rng.randint(3, 8))
            ],
        }
        out.append(json.dumps(hits))
    for _ in range(5):  # package metadata with hashes and versions
        meta = {
            "name": f"{rng.choice(WORDS)}-{rng.choice(WORDS)}",
            "version": f"{rng.randint(0, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 99)}",
            "dependencies": {
                f"{rng.choice(WORDS)}{rng.choice(['', '-js', '-rs', 'lib'])}": f"^{rng.randint(0, 9)}.{rng.randint(0, 20)}.0"
                for _ in range(rng.randint(3, 10))
            },
            "dist": {
                "integrity": "sha512-" + sha(rng) + sha(rng) + "==",
                "tarball": f"https://registry.example.org/{rng.choice(WORDS)}/-/{rng.choice(WORDS)}.tgz",
                "fileCount": rng.randint(3, 400),
                "unpackedSize": rng.randint(10_000, 9_000_000),
            },
        }
        out.append(json.dumps(meta, indent=2))
    for _ in range(5):  # a tool's structured result with mixed content
        result = {
            "ok": rng.random() < 0.8,
            "elapsed_ms": round(rng.random() * 3000, 2),
            "files": [
                {"path": path(rng), "size": rng.randint(0, 100_000), "modified": iso(rng)}
                for _ in range(rng.randint(4, 12))
            ],
            "summary": {"added": rng.randint(0, 50), "removed": rng.randint(0, 50), "note": rng.choice(ZH)},
            "uuid": f"{sha(rng, 8)}-{sha(rng, 4)}-{sha(rng, 4)}-{sha(rng, 4)}-{sha(rng, 12)}",
        }
        out.append(json.dumps(result, indent=1, ensure_ascii=False))
    for _ in range(3):  # metrics series: arrays of numbers
        series = {
            "metric": f"{rng.choice(WORDS)}.{rng.choice(WORDS)}_seconds",
            "labels": {"host": f"{rng.choice(WORDS)}-{rng.randint(1, 40)}", "region": rng.choice(["eu-west-1", "us-east-2"])},
            "timestamps": [1_700_000_000 + 15 * i for i in range(rng.randint(20, 40))],
            "values": [round(rng.random() * 10 ** rng.randint(0, 4), rng.randint(0, 4)) for _ in range(30)],
        }
        out.append(json.dumps(series))
    for _ in range(2):  # a file read by a tool, base64-encoded
        blob = base64.b64encode(bytes(rng.randrange(256) for _ in range(rng.randint(200, 500)))).decode()
        out.append(json.dumps({"path": path(rng), "encoding": "base64", "size": rng.randint(200, 500), "content": blob}, indent=2))
    return out


def shell_samples(rng: random.Random) -> list[str]:
    out = []
    for _ in range(4):  # git log
        lines = []
        for _ in range(rng.randint(3, 6)):
            lines += [
                f"commit {sha(rng)}",
                f"Author: {rng.choice(NAMES).title()} <{rng.choice(NAMES)}@example.com>",
                f"Date:   Mon Mar {rng.randint(1, 28)} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:11 2025 +0100",
                "",
                "    " + (rng.choice(ZH) if rng.random() < 0.2 else sentence(rng, rng.randint(4, 10))),
                "",
            ]
        out.append("\n".join(lines))
    for _ in range(4):  # ls -la
        lines = [f"total {rng.randint(8, 400)}"]
        for _ in range(rng.randint(8, 20)):
            mode = rng.choice(["-rw-r--r--", "drwxr-xr-x", "-rwxr-xr-x", "lrwxrwxrwx"])
            lines.append(
                f"{mode} {rng.randint(1, 9):>2} {rng.choice(NAMES):<8} staff {rng.randint(0, 999999):>8} "
                f"Mar {rng.randint(1, 28):>2} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d} "
                f"{rng.choice(WORDS)}{rng.choice(EXTS)}"
            )
        out.append("\n".join(lines))
    for _ in range(4):  # pytest run with a failure
        tests = [f"tests/test_{rng.choice(WORDS)}.py" for _ in range(rng.randint(4, 9))]
        lines = [
            "============================= test session starts ==============================",
            "platform linux -- Python 3.11.7, pytest-8.3.2, pluggy-1.5.0",
            "rootdir: /home/dev/project",
            f"collected {rng.randint(20, 400)} items",
            "",
        ]
        for t in tests:
            lines.append(f"{t} {'.' * rng.randint(1, 30)}{'F' if rng.random() < 0.2 else ''}  [{rng.randint(1, 100):>3}%]")
        name = rng.choice(WORDS)
        lines += [
            "",
            "=================================== FAILURES ===================================",
            f"_____________________________ test_{name}_roundtrip _____________________________",
            "",
            f"    def test_{name}_roundtrip(tmp_path):",
            f"        store = Store(tmp_path / '{name}.db')",
            f"        store.put('{name}', {rng.randint(1, 999)})",
            f">       assert store.get('{name}') == {rng.randint(1, 999)}",
            f"E       AssertionError: assert {rng.randint(1, 999)} == {rng.randint(1, 999)}",
            "",
            f"tests/test_{name}.py:{rng.randint(10, 300)}: AssertionError",
            "=========================== short test summary info ============================",
            f"FAILED tests/test_{name}.py::test_{name}_roundtrip - AssertionError",
            f"========== 1 failed, {rng.randint(20, 400)} passed in {rng.random() * 30:.2f}s ==========",
        ]
        out.append("\n".join(lines))
    for _ in range(4):  # compiler errors
        lines = [f"   Compiling {rng.choice(WORDS)}-{rng.choice(WORDS)} v0.{rng.randint(1, 9)}.{rng.randint(0, 9)} (/home/dev/work)"]
        for _ in range(rng.randint(2, 4)):
            var = rng.choice(WORDS)
            lines += [
                f"error[E0{rng.randint(300, 599)}]: cannot find value `{var}` in this scope",
                f"  --> src/{rng.choice(WORDS)}.rs:{rng.randint(1, 500)}:{rng.randint(1, 80)}",
                "   |",
                f"{rng.randint(1, 500):>3} |     let total = {var}.len() + offset;",
                f"   |                 ^^^^^ help: a local variable with a similar name exists: `{var}s`",
                "",
            ]
        lines.append(f"error: could not compile `{rng.choice(WORDS)}` due to {rng.randint(2, 9)} previous errors")
        out.append("\n".join(lines))
    for _ in range(4):  # service logs
        lines = []
        for _ in range(rng.randint(10, 25)):
            level = rng.choice(["INFO", "INFO", "INFO", "WARN", "ERROR", "DEBUG"])
            lines.append(
                f"{iso(rng)} {level:<5} [{rng.choice(WORDS)}-{rng.randint(1, 16)}] "
                f"{rng.choice(['GET', 'POST', 'PUT'])} /api/v{rng.randint(1, 3)}/{rng.choice(WORDS)}/{rng.randint(1, 99999)} "
                f"status={rng.choice([200, 200, 201, 304, 404, 500])} dur={rng.random() * 900:.1f}ms "
                f"req_id={sha(rng, 16)}"
            )
        out.append("\n".join(lines))
    for _ in range(3):  # find / du: long paths and sizes
        out.append("\n".join(
            f"{rng.randint(4, 99999) if rng.random() < 0.5 else str(rng.randint(1, 999)) + rng.choice('KMG')}\t"
            f"./{'/'.join(rng.choice(WORDS) + rng.choice(['', '_test', '-v2', 's']) for _ in range(rng.randint(2, 6)))}"
            f"{rng.choice(EXTS)}" for _ in range(rng.randint(10, 25))))
    for _ in range(3):  # ps aux / top: columns of numbers
        lines = ["USER         PID %CPU %MEM    VSZ   RSS TTY      STAT START   TIME COMMAND"]
        for _ in range(rng.randint(10, 20)):
            lines.append(
                f"{rng.choice(NAMES):<8} {rng.randint(1, 99999):>7} {rng.random() * 100:4.1f} {rng.random() * 20:4.1f} "
                f"{rng.randint(1000, 9999999):>7} {rng.randint(100, 999999):>6} pts/{rng.randint(0, 9)}    "
                f"{rng.choice(['S', 'Sl', 'R+', 'Ss'])}   {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}   "
                f"{rng.randint(0, 99)}:{rng.randint(0, 59):02d} {rng.choice(['python3', 'node', '/usr/bin/ssh', 'nvim'])} "
                f"{path(rng) if rng.random() < 0.5 else '--port=' + str(rng.randint(1024, 65535))}"
            )
        out.append("\n".join(lines))
    for _ in range(3):  # CSV / numeric tables
        cols = rng.randint(4, 9)
        lines = [",".join(rng.choice(WORDS) for _ in range(cols))]
        for _ in range(rng.randint(15, 40)):
            lines.append(",".join(
                str(rng.randint(0, 10 ** rng.randint(1, 7))) if rng.random() < 0.6 else f"{rng.random() * 1000:.3f}"
                for _ in range(cols)))
        out.append("\n".join(lines))
    for _ in range(2):  # base64 payloads and hex dumps
        blob = base64.b64encode(bytes(rng.randrange(256) for _ in range(rng.randint(300, 700)))).decode()
        out.append("\n".join(blob[i:i + 76] for i in range(0, len(blob), 76)))
        out.append("\n".join(
            f"{offset:08x}  " + " ".join(f"{rng.randrange(256):02x}" for _ in range(16)) for offset in range(0, 512, 16)))
    for _ in range(3):  # npm / pip install chatter
        lines = []
        for _ in range(rng.randint(6, 14)):
            pkg = f"{rng.choice(WORDS)}-{rng.choice(WORDS)}"
            ver = f"{rng.randint(0, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 99)}"
            lines.append(
                rng.choice(
                    [
                        f"Collecting {pkg}=={ver}",
                        f"  Downloading {pkg}-{ver}-py3-none-any.whl ({rng.randint(10, 900)} kB)",
                        f"npm WARN deprecated {pkg}@{ver}: This package is no longer maintained.",
                        f"added {rng.randint(1, 900)} packages, and audited {rng.randint(900, 2000)} packages in {rng.randint(1, 60)}s",
                        f"Requirement already satisfied: {pkg}>={ver} in /usr/lib/python3/site-packages",
                    ]
                )
            )
        out.append("\n".join(lines))
    return out


def main() -> None:
    rng = random.Random(20251122)
    sep = "\n\n\f\n\n"  # form feed: a sample boundary that never appears inside a sample
    (HERE / "json_tool_output.txt").write_text(sep.join(json_samples(rng)) + "\n", encoding="utf-8")
    (HERE / "shell_log.txt").write_text(sep.join(shell_samples(rng)) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
