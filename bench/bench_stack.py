"""What serving ctxd's hot path on pygls would cost (issue #28, "The design card's stack").

Four daemons get the same requests from one client in the same run, taking turns call by call, on
one CPU (bench_speed.py's client and method): the floor (`floor_daemon.py`), the same floor served
by pygls' `LanguageServer` with its default structuring (params become pygls objects, turned back
into dicts to be stored), the same with raw params (a converter hook that leaves them as JSON
gave them), and ctxd. Printed: median per call and the ratio to the floor, for a one-item durable
`ctxd/record` and a `ctxd/usage`. No goal: this is the measurement the README's "Why" cites.

    python bench/bench_stack.py [--calls 500]
    python bench/bench_stack.py --serve-pygls STATE_DIR default|raw   (the pygls daemon itself)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

from bench_speed import ONE_ITEM, Wire, interleaved, pin_to_one_cpu, thread_items  # noqa: E402
from floor_daemon import Floor  # noqa: E402
from table import Row, ms, report  # noqa: E402

from tests.rpc import daemon_env  # noqa: E402


def plain(value: Any) -> Any:
    """pygls' structured params back as JSON values (its objects are named tuples)."""
    if hasattr(value, "_asdict"):
        return {key: plain(item) for key, item in value._asdict().items()}
    if isinstance(value, (list, tuple)):
        return [plain(item) for item in value]
    return value


def serve_pygls(state_dir: Path, mode: str) -> None:
    from pygls.lsp.server import LanguageServer
    from pygls.protocol import JsonRPCRequestMessage, default_converter

    def raw_converter() -> Any:
        converter = default_converter()
        converter.register_structure_hook(JsonRPCRequestMessage, lambda data, _type: JsonRPCRequestMessage(
            id=data["id"], method=data["method"], jsonrpc=data["jsonrpc"], params=data.get("params")))
        return converter

    floor = Floor(state_dir)
    server = LanguageServer("pygls-floor", "1", converter_factory=raw_converter if mode == "raw" else default_converter)
    unpack = (lambda params: params) if mode == "raw" else plain

    @server.feature("ctxd/record")
    def record(params: Any) -> dict[str, Any]:
        return floor.record(unpack(params))

    @server.feature("ctxd/usage")
    def usage(params: Any) -> dict[str, Any]:
        return floor.usage(unpack(params))

    server.start_io()


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500)
    parser.add_argument("--serve-pygls", nargs=2, metavar=("STATE_DIR", "MODE"))
    args = parser.parse_args(argv)
    if args.serve_pygls:
        serve_pygls(Path(args.serve_pygls[0]), args.serve_pygls[1])
        return 0
    pin_to_one_cpu()
    with tempfile.TemporaryDirectory(prefix="ctxd-bench-stack-") as tmp:
        root = Path(tmp)
        workspace = root / "ws"
        workspace.mkdir()
        env = daemon_env(root / "state")
        wires = {
            "floor": Wire([sys.executable, str(HERE / "floor_daemon.py"), str(root / "floor")], env),
            "pygls": Wire([sys.executable, __file__, "--serve-pygls", str(root / "pygls"), "default"], env),
            "pygls raw": Wire([sys.executable, __file__, "--serve-pygls", str(root / "raw"), "raw"], env),
            "ctxd": Wire([sys.executable, "-m", "ctxd"], env),
        }
        init = {"processId": None, "rootUri": workspace.as_uri(), "capabilities": {},
                "workspaceFolders": [{"uri": workspace.as_uri(), "name": "ws"}],
                "initializationOptions": {"ctxd": {"autoCompactTokenLimit": 0}}}
        where = {"workspace": workspace.as_uri()}
        rows: list[Row] = []
        try:
            for wire in wires.values():
                wire.request("initialize", init)
                wire.send({"jsonrpc": "2.0", "method": "initialized", "params": {}})
                wire.request("ctxd/record", {**where, "thread": "t", "items": thread_items(1000)})
            each = {name: (wire, {**where, "thread": "records", "items": [ONE_ITEM]}) for name, wire in wires.items()}
            record = interleaved(each, "ctxd/record", args.calls)
            each = {name: (wire, {**where, "thread": "t"}) for name, wire in wires.items()}
            usage = interleaved(each, "ctxd/usage", args.calls)
        finally:
            for wire in wires.values():
                wire.close()
        for figure, medians in (("one-item durable ctxd/record", record), ("ctxd/usage, 1k-item thread", usage)):
            for name in ("pygls", "pygls raw", "ctxd"):
                ratio = medians[name] / medians["floor"]
                rows.append(Row(f"{figure}: {name}", ms(medians[name]), f"{ms(medians['floor'])} (floor daemon)",
                                f"{ratio:.2f}x", "-", True))
    report(rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
