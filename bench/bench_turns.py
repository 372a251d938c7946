"""Cross-turn cache reuse on a workload that really loops (W2f, bench/workloads.py).

    python bench/bench_turns.py                 # 64 questions, 128 new tokens
    python bench/bench_turns.py --n 16 --max-new-tokens 64

The embedded model calls no tool, so W2 is one turn per question; W2f forces
the gold plans' calls (named so in the output) so that every later turn
prefills real tool results and decodes a reply. Runs the engine twice on it,
each conversation's cache kept between its turns and not (every turn
prefilled on top of the shared prefix only), and prints wall time, turns,
tokens prefilled, tokens/s and how many final replies are identical.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_engine import add_threads_option, use_threads
from machine import load_note
from workloads import build, run_engine


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--dtype", default="float32")
    add_threads_option(ap)
    args = ap.parse_args(argv)
    threads = use_threads(args.threads)

    from evalpipe.backends import load_backend

    backend = load_backend({"id": "smollm2-135m", "dtype": args.dtype})
    w = build("W2f", args.n, args.max_new_tokens)
    warm = build("W2f", 2, 4)
    run_engine(backend, warm)  # first-call costs paid before either side
    print(f"workload {w.label}; {len(w.questions)} questions, {len(w.forced)} with a plan "
          f"(forced calls: {sum(map(len, w.forced.values()))}); smollm2-135m {args.dtype}, "
          f"max_new_tokens {w.max_new_tokens}, batch cap {args.batch_size}, "
          f"torch threads {threads}")
    results = {}
    for label, fraction in (("kept between turns", 0.25), ("prefilled every turn", 0.0)):
        backend.prefix_store.clear()
        backend.batcher.turn_memory_fraction = fraction
        before = dict(backend.batcher.stats)
        r = run_engine(backend, w, args.batch_size)
        stats = {k: backend.batcher.stats[k] - before.get(k, 0) for k in backend.batcher.stats}
        results[label] = r
        print(f"cache {label:21s}: {r['wall_s']:7.1f} s  {r['turns']} turns  "
              f"{(r['prompt_tokens'] + r['completion_tokens']) / r['wall_s']:6.0f} tokens/s "
              f"(prompt + completion)  prefilled {stats['prefilled_tokens']} tokens, "
              f"from the turn cache {stats['turn_reused_tokens']}, from the shared prefix "
              f"{stats['reused_tokens']}")
    on, off = results.values()
    same = sum(on["answers"][q] == off["answers"][q] for q in on["answers"])
    print(f"speed-up from keeping caches: {off['wall_s'] / on['wall_s']:.2f}x; identical final "
          f"replies {same}/{len(on['answers'])}")
    print(f"note: {load_note()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
