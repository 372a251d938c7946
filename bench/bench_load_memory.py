"""Peak memory of loading one model and packing it for the engine, split into
anonymous memory (the packed copy, what is left of the model) and pages of the
mapped weights file.

    python bench/bench_load_memory.py                          # the 1.5B, float32
    python bench/bench_load_memory.py --model qwen2.5-coder-1.5b --dtype bfloat16

The process's resident memory is read from /proc/self/status every 20 ms while
the backend loads and packs; a peak between two reads is missed, so the kernel's
own high-water mark (VmHWM) is printed beside the sampled total. Linux only.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

from machine import cpu_line, load_now

FIELDS = ("RssAnon", "RssFile", "VmRSS", "VmHWM")


def resident() -> dict[str, float]:
    """GiB of each of FIELDS, from /proc/self/status."""
    values = {}
    with open("/proc/self/status") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in FIELDS:
                values[key] = int(rest.split()[0]) / 2**20
    return values


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--dtype", default="float32")
    args = ap.parse_args(argv)

    from evalpipe.backends import load_backend

    print(f"{cpu_line()}; load average {load_now():.1f} at the start")
    peak = dict.fromkeys(FIELDS, 0.0)
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            for key, value in resident().items():
                peak[key] = max(peak[key], value)
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    start = time.perf_counter()
    backend = load_backend({"id": args.model, "dtype": args.dtype})
    seconds = time.perf_counter() - start
    done.set()
    sampler.join()
    after = resident()
    print(backend.log_line())
    print(f"{args.model} {args.dtype}: load and pack {seconds:.1f} s; peak sampled: "
          f"anonymous {peak['RssAnon']:.2f} GiB, file {peak['RssFile']:.2f} GiB, total "
          f"{peak['VmRSS']:.2f} GiB (VmHWM {after['VmHWM']:.2f}); after: anonymous "
          f"{after['RssAnon']:.2f} GiB, file {after['RssFile']:.2f} GiB; load average "
          f"{load_now():.1f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
