"""float32 against bfloat16 on one machine, in one alternating run: the figures a
dtype comparison needs, each part a benchmark of its own run as a child process.

    python bench/bench_dtypes.py                       # everything, about 2-3 hours
    python bench/bench_dtypes.py --parts engine,sizes  # leave the peers out

Parts, in this order (each prints its own table):

- engine: tokens/s of the engine on the 0.5B and the 1.5B in both dtypes, batched and
  one conversation at a time (bench_engine.py, the dtypes and sides alternating);
- sizes: configs/sizes.yaml run whole in both dtypes, alternating, without the
  generation cache, each under `/usr/bin/time -v`: wall time and peak memory (the
  largest resident set of the run); then the first round's two runs compared reply
  for reply and verdict for verdict (`dtype_agreement.py --runs`). `--keep DIR`
  keeps the runs (`DIR/<dtype>-<round>/latest`), for a report or a re-count;
- peers: W1, W2 and W4 against vLLM's CPU build at float32 and bfloat16 and
  llama.cpp's server on the 4-bit file (bench_peers.py), every system twice,
  alternating.

The machine (CPU model and flags), its load and the busiest processes are printed
first and last: only a run on a machine with nothing else heavy running means
anything.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

from machine import cpu_line, load_now

DTYPES = ("float32", "bfloat16")
PARTS = ("engine", "sizes", "peers")


def busiest() -> str:
    """The five processes using the most CPU now (ps), one per line."""
    out = subprocess.run(["ps", "-eo", "pcpu,rss,etime,args", "--sort=-pcpu"],
                         capture_output=True, text=True, check=False).stdout
    return "\n".join(line[:160] for line in out.splitlines()[:6])


def machine(when: str) -> None:
    print(f"\n## The machine, {when}\n\n{cpu_line()}; load average {load_now():.2f}")
    print(f"```\n{busiest()}\n```", flush=True)


def child(cmd: list[str]) -> str:
    """Run a benchmark in a child process, its output shown as it comes; the output."""
    print(f"\n$ {' '.join(cmd)}", flush=True)
    lines = []
    with subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "Warning" not in line:
                print(line, end="", flush=True)
            lines.append(line)
    return "".join(lines)


def engine(args) -> None:
    for model in ("qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"):
        child([sys.executable, "bench/bench_engine.py", "--model", model,
               "--dtype", ",".join(DTYPES), "--sides", "engine,engine-1",
               "--n", str(args.engine_n), "--max-new-tokens", str(args.engine_tokens),
               "--repeats", str(args.repeats)])


def time_v(output: str) -> tuple[float, float]:
    """(wall seconds, peak resident GiB) from `/usr/bin/time -v`'s report."""
    wall = re.search(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (?:(\d+):)?(\d+):([\d.]+)",
                     output)
    peak = re.search(r"Maximum resident set size \(kbytes\): (\d+)", output)
    if not wall or not peak:
        raise ValueError("no /usr/bin/time -v report in the output")
    h, m, s = wall.groups()
    return int(h or 0) * 3600 + int(m) * 60 + float(s), int(peak.group(1)) / 2**20


def sizes(args) -> None:
    if not Path("/usr/bin/time").exists():
        print("\nsizes: /usr/bin/time is not installed (apt-get install time): not run")
        return
    results: dict[str, list[tuple[float, float, float, float]]] = {d: [] for d in DTYPES}
    with tempfile.TemporaryDirectory() as tmp:
        out = args.keep or tmp
        rounds = args.sizes_repeats or args.repeats
        if rounds < 2:
            print("one run of each dtype (--sizes-repeats 1): no range; another such "
                  "invocation gives the second alternating round", flush=True)
        for rnd in range(rounds):
            for dtype in DTYPES:
                before = load_now()
                text = child(["/usr/bin/time", "-v", sys.executable, "-m", "evalpipe", "run",
                              "--config", "configs/sizes.yaml", "--dtype", dtype, "--no-cache",
                              "--out", f"{out}/{dtype}-{rnd}"])
                wall, peak = time_v(text)
                results[dtype].append((wall, peak, before, load_now()))
                print(f"sizes {dtype}, round {rnd + 1}: {wall:.0f} s, peak {peak:.2f} GiB",
                      flush=True)
        # How the replies and verdicts of the two dtypes compare (the first round's runs).
        child([sys.executable, "bench/dtype_agreement.py", "--runs",
               *(f"{out}/{dtype}-0/latest" for dtype in DTYPES)])
    print("\n| sizes job | wall s, median (range) | peak memory GiB, median (range) | load "
          "before -> after |\n|---|---|---|---|")
    for dtype, rows in results.items():
        walls, peaks = [r[0] for r in rows], [r[1] for r in rows]
        loads = "; ".join(f"{b:.1f} -> {a:.1f}" for _, _, b, a in rows)
        print(f"| {dtype} | {statistics.median(walls):.0f} ({min(walls):.0f}-{max(walls):.0f}) "
              f"| {statistics.median(peaks):.2f} ({min(peaks):.2f}-{max(peaks):.2f}) "
              f"| {loads} |", flush=True)


def peers(args) -> None:
    child([sys.executable, "bench/bench_peers.py", "--workloads", args.workloads,
           "--peers", "vllm,llama.cpp", "--dtypes", ",".join(DTYPES),
           "--repeats", str(args.repeats), "--vllm-concurrency", args.vllm_concurrency])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parts", default=",".join(PARTS), help=f"of {', '.join(PARTS)}")
    ap.add_argument("--repeats", type=int, default=2, help="alternating rounds of every part")
    ap.add_argument("--engine-n", type=int, default=8, help="questions of the engine part")
    ap.add_argument("--engine-tokens", type=int, default=48, help="its max_new_tokens")
    ap.add_argument("--workloads", default="W1:48,W2:16,W4:8",
                    help="bench_peers.py's workloads (the sizes measured before)")
    ap.add_argument("--vllm-concurrency", default="48")
    ap.add_argument("--sizes-repeats", type=int, default=None,
                    help="rounds of the sizes part (default --repeats; 1 where a round takes "
                         "too long for two in one sitting)")
    ap.add_argument("--keep", default=None, metavar="DIR",
                    help="keep the sizes runs in DIR (default: a temporary folder, removed)")
    args = ap.parse_args(argv)
    parts = args.parts.split(",")
    unknown = set(parts) - set(PARTS)
    if unknown or args.repeats < 2:
        ap.error(f"unknown part(s) {', '.join(sorted(unknown))}" if unknown
                 else "--repeats must be at least 2: one run of each side is not a result")
    if args.sizes_repeats is not None and args.sizes_repeats < 1:
        ap.error("--sizes-repeats must be at least 1")
    started = time.time()
    machine("at the start")
    for part in parts:
        print(f"\n## {part}", flush=True)
        {"engine": engine, "sizes": sizes, "peers": peers}[part](args)
    machine(f"at the end ({(time.time() - started) / 60:.0f} minutes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
