"""What running a custom tool in a worker process costs, against running it in the run's
own process (how every custom tool ran before workers).

    python bench/bench_tools.py              # 2,000 calls a side, 2 rounds, alternating
    python bench/bench_tools.py --calls 500 --rounds 3

One tool, `lookup(key: str) -> dict` (a dictionary read: the call itself costs almost
nothing, so what is measured is the way to it and back), called through the same
Toolset.execute the agent loop uses: one call per reply, and replies of four calls
that run at once. Also timed: starting a worker and describing the tool (what a run
pays once per import path, at config load and again when its toolsets are built).
Medians and ranges over rounds; the sides alternate within each round.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_line, load_now  # bench/machine.py: CPU, flags, load

from evalpipe.records import ToolCall
from evalpipe.tools import ToolLimits, Toolset, custom
from evalpipe.tools.registry import Tool

TOOL = '''
TABLE = {f"k{i}": {"value": i, "name": f"item {i}"} for i in range(1000)}


def lookup(key: str) -> dict:
    """An item by its key."""
    return TABLE.get(key, {})
'''


def in_process(module) -> Toolset:
    """The tool as it ran before workers: its function called in this process."""
    described = custom.pool().describe("bench_tool_module:lookup")
    tool = Tool(described["name"], described["description"], described["parameters"],
                fn=module.lookup)
    return Toolset({"lookup": tool}, ToolLimits())


def in_worker() -> Toolset:
    return Toolset({"lookup": custom.tool_from_callable("bench_tool_module:lookup")},
                   ToolLimits())


def per_call_us(toolset: Toolset, calls: int, width: int) -> float:
    """Microseconds per call, `width` calls per reply."""
    replies = [[ToolCall("lookup", {"key": f"k{(r * width + i) % 1000}"}, id=f"c{i}")
                for i in range(width)] for r in range(calls // width)]
    toolset.execute(replies[0])  # warm: the worker started, the module imported
    start = time.perf_counter()
    for reply in replies:
        events = toolset.execute(reply)
        assert all(e.error is None for e in events), events
    return (time.perf_counter() - start) / (len(replies) * width) * 1e6


def start_ms() -> float:
    """A new pool: start a worker, import the module, describe the tool, first call."""
    custom._pools.clear()
    start = time.perf_counter()
    toolset = in_worker()
    toolset.execute([ToolCall("lookup", {"key": "k1"}, id="c")])
    return (time.perf_counter() - start) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    folder = tempfile.mkdtemp()
    Path(folder, "bench_tool_module.py").write_text(TOOL)
    sys.path.insert(0, folder)
    import bench_tool_module

    print(cpu_line())
    print(f"load average {load_now():.1f} at the start")
    figures: dict[str, list[float]] = {}
    for _ in range(args.rounds):
        for width in (1, 4):
            for side, make in (("in process", lambda: in_process(bench_tool_module)),
                               ("worker", in_worker)):
                figures.setdefault(f"{side}, {width} call(s) a reply", []).append(
                    per_call_us(make(), args.calls, width))
        figures.setdefault("worker start + describe + first call", []).append(start_ms())
    for name, values in figures.items():
        unit = "ms" if "start" in name else "us a call"
        print(f"{name:42s} median {statistics.median(values):9.1f} {unit} "
              f"(range {min(values):.1f}-{max(values):.1f}, {len(values)} rounds)")
    print(f"load average {load_now():.1f} at the end")


if __name__ == "__main__":
    main()
