"""Share of the default job's wall time spent outside the model.

    python bench/bench_overhead.py [--limit 2] [--threads 1] [--cells-apart] [--keep DIR]

Runs configs/default.yaml (its models; none/calculator tools x none/BM25 prepend; every
question of the sample suites unless --limit) through `evalpipe.runner.execute_run` with
the generation cache off, and times the model's work: every `submit` (tokenising) and
`poll` (prefill and decode) of the backend's generation sessions. Everything else
(prompt rendering, parsing, tools, retrieval index and search, scoring, writing
samples.jsonl and reports) is overhead. Model loading is shown apart: it is a one-off
cost of a model, not per-question work. `--cells-apart` runs each cell in a generation
session of its own, as before the cells of a model shared one, for comparison; `--keep
DIR` keeps the run (its samples, to compare replies).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_engine import add_threads_option, use_threads
from machine import floor_share, load_note


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(REPO / "configs/default.yaml"))
    ap.add_argument("--limit", type=int, default=None, help="questions per suite")
    ap.add_argument("--cells-apart", action="store_true",
                    help="each cell in its own generation session (the engine before)")
    ap.add_argument("--keep", help="write the run here instead of a temporary folder")
    add_threads_option(ap)
    args = ap.parse_args(argv)

    import os

    import torch

    from evalpipe.backends import transformers_backend as tb
    from evalpipe.config import load_config
    from evalpipe.engine import Engine
    from evalpipe.runner import execute_run

    use_threads(args.threads)
    timings = {"generate": 0.0, "load": 0.0, "calls": 0}
    backends = []
    init = tb.TransformersBackend.__init__

    def timed(method):
        def call(self, *a, **kw):
            t = time.perf_counter()
            try:
                return method(self, *a, **kw)
            finally:
                timings["generate"] += time.perf_counter() - t
                timings["calls"] += 1
        return call

    def timed_init(self, *a, **kw):
        t = time.perf_counter()
        try:
            init(self, *a, **kw)
            backends.append(self)
        finally:
            timings["load"] += time.perf_counter() - t

    tb.TransformersBackend.__init__ = timed_init
    tb._LoopSession.submit = timed(tb._LoopSession.submit)
    tb._LoopSession.poll = timed(tb._LoopSession.poll)
    os.chdir(REPO)
    config = load_config(args.config, limit=args.limit)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        execute_run(config, Path(args.keep or tmp), use_cache=False, echo=lambda s: None,
                    engine=Engine(shared=not args.cells_apart))
        wall = time.perf_counter() - t0
    job = wall - timings["load"]
    outside = job - timings["generate"]
    print(f"default job ({Path(args.config).name}, limit={args.limit}): {len(config.cells())} "
          f"cells, {'each in its own session' if args.cells_apart else 'one session per model'}; "
          f"torch threads {torch.get_num_threads()}")
    print(f"wall {wall:.1f} s = model load {timings['load']:.1f} s + job {job:.1f} s")
    steps = sum(b.batcher.stats["decode_steps"] for b in backends)
    print(f"inside the model (session submit/poll, {timings['calls']} calls): "
          f"{timings['generate']:.1f} s; {steps} decode steps")
    print(f"outside the model: {outside:.2f} s = {outside / job:.1%} of the job (target < 3%); "
          f"{(outside + timings['load']) / wall:.1%} counting the model load")
    # Tokens each model really computed (not served from a stored cache).
    work = [(b.model, b.batcher.stats["prefilled_tokens"] + b.batcher.stats["decoded_tokens"],
             b.batcher.stats["attended"]) for b in backends]
    if work:
        print(f"{floor_share(work, job)} (target >= 75%)")
    print(f"note: {load_note()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
