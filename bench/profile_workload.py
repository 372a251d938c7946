"""Where evalpipe's time goes on one workload: a profile of one engine run.

    python bench/profile_workload.py                       # W1, 48 questions
    python bench/profile_workload.py --workload W2 --n 16
    python bench/profile_workload.py --dtype bfloat16

Runs the workload once unprofiled (warm-up: kernels built, caches touched), then
once under torch's profiler, with every C kernel call (panel products, decode
attention, rotary) recorded as a named range, since the profiler does not see
ctypes calls. Prints the run's wall time, the time of each kernel and of the
torch operators (self time, largest first), and what is left: Python in the
engine's loop, parsing and scoring, and the profiler's own cost. The profiled
run is slower than a plain one; the shares are what it is for.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_engine import add_threads_option, use_threads
from machine import cpu_line, load_note
from workloads import build, run_engine


def name_kernel_calls() -> list[str]:
    """Wrap every exported function of the loaded C kernels in a profiler range named
    after it; the names wrapped."""
    from torch.profiler import record_function

    from evalpipe.backends.local import native

    wrapped = []
    for kernel in list(native._loaded.values()):  # the kernels loaded so far
        cdll = kernel.lib
        if cdll is None:
            continue
        # ctypes keeps a function as an attribute once it was first called: the warm-up
        # run called every one the workload uses.
        for name in [n for n in vars(cdll) if not n.startswith("_")]:
            fn = getattr(cdll, name)
            if not isinstance(fn, ctypes._CFuncPtr):  # ctypes' function type
                continue

            def timed(*args, _fn=fn, _name=f"kernel:{name}"):
                with record_function(_name):
                    return _fn(*args)

            setattr(cdll, name, timed)
            wrapped.append(f"{kernel.name}.{name}")
    return wrapped


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="W1")
    ap.add_argument("--n", type=int, default=48)
    ap.add_argument("--max-new-tokens", type=int, default=None)
    ap.add_argument("--top", type=int, default=15, help="torch operators listed")
    ap.add_argument("--dtype", default="float32", help="the weights' dtype")
    add_threads_option(ap)
    args = ap.parse_args(argv)
    threads = use_threads(args.threads)

    import torch
    from torch.profiler import ProfilerActivity, profile

    from evalpipe.backends import load_backend

    w = build(args.workload, args.n, args.max_new_tokens)
    backend = load_backend({"id": w.model, "dtype": args.dtype})
    print(f"{cpu_line()}; torch threads {threads}; torch {torch.__version__}")
    print(f"{w.label}: {len(w.questions)} questions, {w.max_new_tokens} new tokens")
    print(backend.log_line())
    plain = run_engine(backend, w)
    print(f"plain run: {plain['wall_s']:.1f} s ({load_note()})")
    wrapped = name_kernel_calls()
    print(f"kernel calls named: {', '.join(wrapped) or 'none (no kernel loaded)'}")
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        profiled = run_engine(backend, w)
    wall = time.perf_counter() - t0
    if profiled["replies"] != plain["replies"]:
        print("warning: the profiled run's replies differ from the plain run's")
    rows = []
    for event in prof.key_averages():
        rows.append((event.self_cpu_time_total / 1e6, event.key, event.count))
    rows.sort(reverse=True)
    kernels = [r for r in rows if r[1].startswith("kernel:")]
    ops = [r for r in rows if not r[1].startswith("kernel:")]
    print(f"\nprofiled run: {wall:.1f} s wall ({load_note()})\n")
    # The profiler's cost falls on the Python between the ranges more than on the ranges
    # themselves, so each range's time is also shown against the unprofiled run.
    base = plain["wall_s"]
    print("| what | self s | share of the profiled wall | against the plain run | calls |\n"
          "|---|---|---|---|---|")
    for seconds, key, count in kernels + ops[: args.top]:
        print(f"| {key} | {seconds:.2f} | {seconds / wall:.0%} | {seconds / base:.0%} | {count} |")
    rest = sum(r[0] for r in ops[args.top:])
    counted = sum(r[0] for r in rows)
    print(f"| other torch operators ({len(ops) - args.top}) | {rest:.2f} | {rest / wall:.0%} | "
          f"{rest / base:.0%} | |")
    # Threads run operators in parallel inside one op; self times are per op, not per thread.
    print(f"| left: Python (engine loop, parsing, scoring), profiler | {wall - counted:.2f} | "
          f"{(wall - counted) / wall:.0%} | {max(base - counted, 0) / base:.0%} | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
