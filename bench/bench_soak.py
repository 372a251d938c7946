"""Soak: a long run through the replay backend, end to end, stays flat.

    python bench/bench_soak.py              # 20,000 samples
    python bench/bench_soak.py --n 5000

A recording is made first (a scripted in-process model, not timed), then the
measured run replays it through everything a real run does: the generation
loop with tool calls, appends + fsync, the manifest, scoring and the report.
Prints the time per 1,000 samples over the first and the last 1,000 written,
the resident memory at those two points and at its peak, and the machine's
load before and after. Flat means: the last 1,000 cost what the first did, and
memory at the end is what it was near the start.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import re
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_line, load_now  # bench/machine.py

from evalpipe import runner
from evalpipe._report import report
from evalpipe.backends.base import Backend
from evalpipe.config import parse_config
from evalpipe.records import Generation
from evalpipe.store import RunStore


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class Arithmetic(Backend):
    """Calls multiply on the first turn and answers with the tool's result on the
    second: two turns and one tool call per sample, as a small agent loop does."""

    model_id = "soak"

    def describe(self):
        return {"model_id": self.model_id, "backend": "soak"}

    def render(self, messages, tools):
        return json.dumps(messages)

    def generate(self, prompts, settings, progress=None):
        out = []
        for prompt in prompts:
            last = json.loads(prompt)[-1]["content"]
            if "<tool_response>" in last:  # hermes hands tool results back in a user turn
                result = re.findall(r"-?\d+(?:\.\d+)?", last.split("<tool_response>")[-1])
                text = f"The answer is {result[0] if result else 'unknown'}."
            else:
                a, b = re.findall(r"\d+", last)[:2]
                text = (f'<tool_call>{{"name": "multiply", "arguments": {{"a": {a}, "b": {b}}}}}'
                        "</tool_call>")
            out.append(Generation(text, prompt_tokens=len(prompt) // 4, completion_tokens=12))
        return out


def config(folder: Path, n: int, model: dict):
    qs = folder / "questions.jsonl"
    if not qs.exists():
        with open(qs, "w") as f:
            f.writelines(json.dumps({"id": f"q{i:05d}", "suite": "arithmetic", "lang": "en",
                                    "question": f"What is {i} times {i % 97 + 2}?",
                                    "answer": i * (i % 97 + 2),
                                    "gold_calls": [{"id": "s1", "name": "multiply",
                                                    "arguments": {"a": i, "b": i % 97 + 2}}]})
                        + "\n" for i in range(n))
    return parse_config({"name": "soak", "questions": [str(qs)], "models": [model],
                         "formats": ["hermes"], "toolsets": ["calculator"],
                         "retrieval": ["none"], "max_turns": 3,
                         "generation": {"batch_size": 16}}, source=str(folder / "soak.yaml"))


def record(folder: Path, n: int) -> None:
    """The scripted model through the same loop: the replies the measured run replays."""
    runner.load_backend = lambda model: Arithmetic()
    runner.execute_run(config(folder, n, {"id": "soak"}), folder / "rec", use_cache=False,
                       echo=lambda line: None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000, help="samples in the run")
    parser.add_argument("--keep", action="store_true", help="keep the run folder")
    args = parser.parse_args()
    if args.n < 2000:
        parser.error("--n must be at least 2000: the first and the last 1,000 are compared")
    folder = Path(tempfile.mkdtemp(prefix="evalpipe-soak-"))
    print(f"{cpu_line()}; load average {load_now():.1f} before")

    # 1. the recording (not timed), in a child process so that its memory is not counted
    child = multiprocessing.get_context("fork").Process(target=record, args=(folder, args.n))
    child.start()
    child.join()
    (recorded,) = [p for p in (folder / "rec").iterdir() if p.is_dir() and not p.is_symlink()]

    # 2. the measured run: replay backend, every append timed
    marks: list[tuple[int, float, float]] = []  # (samples written, time, RSS MiB)
    written = 0
    real_append = RunStore.append_samples

    def timed_append(self, samples):
        nonlocal written
        samples = list(samples)
        real_append(self, samples)
        written += len(samples)
        marks.append((written, time.perf_counter(), rss_mib()))

    RunStore.append_samples = timed_append
    cfg = config(folder, args.n, {"id": "soak", "backend": "replay",
                                  "recording": str(recorded / "samples.jsonl")})
    start = time.perf_counter()
    marks.append((0, start, rss_mib()))
    run_dir = runner.execute_run(cfg, folder / "out", use_cache=False, echo=lambda line: None)
    generated = marks[-1][1]
    peak_run = peak_mib()  # generation, writes and scoring; the report is next
    text = report(run_dir, "md")
    end = time.perf_counter()
    RunStore.append_samples = real_append

    def window(lo: int, hi: int) -> tuple[float, float]:
        """ms per 1,000 samples between the marks that bracket [lo, hi], and the RSS at hi."""
        a = max((m for m in marks if m[0] <= lo), key=lambda m: m[0])
        b = min((m for m in marks if m[0] >= hi), key=lambda m: m[0])
        return (b[1] - a[1]) / (b[0] - a[0]) * 1000 * 1000, b[2]

    begin = marks[1][0]  # from the first write: loading the recording is not a sample's cost
    first, rss_first = window(begin, begin + 1000)
    last, rss_last = window(args.n - 1000, args.n)
    scores = json.loads((run_dir / "scores.json").read_text())
    scored = scores["samples"]
    correct = sum(s["category"] == "correct" for s in scored)
    assert len(scored) == args.n, (len(scored), args.n)
    print(f"{args.n} samples: setup {marks[1][1] - start:.1f} s, generation + writes "
          f"{generated - marks[1][1]:.1f} s, scoring + report "
          f"{end - generated:.1f} s ({len(text)} characters of report; {correct} correct)")
    print(f"time per 1,000 samples: first 1,000 {first:.0f} ms, last 1,000 {last:.0f} ms "
          f"(ratio last/first {last / first:.2f})")
    every = [window(lo, lo + 1000)[0] for lo in range(begin, args.n - 999, 1000)]
    print("every 1,000 in order (ms): " + " ".join(f"{t:.0f}" for t in every))
    print(f"resident memory: {rss_first:.0f} MiB after the first 1,000, {rss_last:.0f} MiB "
          f"after the last; peak {peak_run:.0f} MiB through scoring, {peak_mib():.0f} MiB with the "
          "report")
    print(f"load average {load_now():.1f} after")
    if args.keep:
        print(f"run kept in {folder}")
    else:
        shutil.rmtree(folder)


if __name__ == "__main__":
    sys.exit(main())
