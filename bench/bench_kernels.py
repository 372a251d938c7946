"""The engine's linears on packed weights against the stock CPU kernel.

    python bench/bench_kernels.py                 # W1: 160 questions, 128 new tokens
    python bench/bench_kernels.py --workload W2 --n 32

Runs one workload (bench/workloads.py) through the engine twice in one process,
once on a model whose weights were packed once (panels: the default on a CPU,
`evalpipe/backends/local/packed_linear.py`) and once on a second copy of the model
that keeps its stock linears, and prints
wall time, tokens/s, the machine's load around each side, and how many replies
(every turn's raw text) and final answers are identical: the two kernels sum
in different orders, so this is the agreement the speed costs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_engine import add_threads_option, use_threads
from machine import cpu_line, load_note, load_now
from workloads import build, run_engine


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="W1")
    ap.add_argument("--n", type=int, default=None, help="questions (default: the workload's)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=None)
    add_threads_option(ap)
    args = ap.parse_args(argv)
    threads = use_threads(args.threads)

    from evalpipe.backends import load_backend
    from evalpipe.backends.transformers_backend import TransformersBackend

    backend = load_backend({"id": "smollm2-135m", "dtype": "float32"})
    packed = backend.batcher.packed
    if packed is None:
        print(f"the linears could not be packed here: {backend.batcher.unpacked_why}")
        return 1
    # Packing replaces a model's weights: the stock side is a second copy, loaded for
    # model.generate (never packed) and then run through the batching loop.
    stock = TransformersBackend("smollm2-135m", "float32", generation="hf")
    stock.generation = "loop"
    w = build(args.workload, args.n, args.max_new_tokens)
    for side in (backend, stock):
        run_engine(side, build("W1", 2, 4))  # first-call costs paid before either side
    print(f"{cpu_line()}; torch threads {threads}")
    print(f"workload {w.label}: {len(w.questions)} questions, smollm2-135m float32, "
          f"max_new_tokens {w.max_new_tokens}; {packed.layers} linears packed "
          f"({packed.nbytes / 2**20:.0f} MiB)")
    runs = {}
    for label, side in ((f"packed ({packed.kernel})", backend), ("stock", stock)):
        side.prefix_store.clear()
        before = load_now()
        r = runs[label] = run_engine(side, w, args.batch_size)
        tokens = r["prompt_tokens"] + r["completion_tokens"]
        print(f"{label:16s}: {r['wall_s']:7.1f} s  {tokens / r['wall_s']:6.0f} tokens/s "
              f"(prompt + completion)  load {before:.1f} -> {load_now():.1f}", flush=True)
    a, b = runs.values()
    replies = [[t["raw"] for t in s.turns] for s in a["samples"]], \
        [[t["raw"] for t in s.turns] for s in b["samples"]]
    same_replies = sum(x == y for x, y in zip(*replies))
    same_answers = sum(a["answers"][q] == b["answers"].get(q) for q in a["answers"])
    print(f"stock / packed wall: {b['wall_s'] / a['wall_s']:.2f}x")
    print(f"identical replies (every turn): {same_replies}/{len(a['samples'])}; identical final "
          f"answers: {same_answers}/{len(a['answers'])}")
    print(f"note: {load_note()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
