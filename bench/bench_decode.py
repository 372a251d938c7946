"""Decode tokens per second of the batching loop by number of rows.

    python bench/bench_decode.py [--dtype bfloat16] [--copied-prefix] [--threads 1] [--rows 1,64]

Every row is the same 560-token prefix followed by its own 1-43 tokens (so
rows are padded, as an eval cell's questions are); each generates 40 tokens.
Prints decode tokens per second at 1, 16, 32 and 64 rows and each against 1
row: what batching buys on this machine before any agent loop. `--copied-prefix`
copies the shared prefix under every row instead of attending to it in place
(docs/speed.md).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_engine import add_threads_option, use_threads
from machine import load_note

PREFIX_TOKENS, NEW_TOKENS = 560, 40


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--copied-prefix", action="store_true",
                    help="copy the shared prefix under every row (the model's own attention)")
    ap.add_argument("--rows", default="1,16,32,64", help="comma-separated batch sizes")
    add_threads_option(ap)
    args = ap.parse_args(argv)
    threads = use_threads(args.threads)

    from evalpipe.backends import load_backend

    backend = load_backend({"id": "smollm2-135m", "dtype": args.dtype})
    batcher = backend.batcher
    batcher.shared_attention = batcher.shared_attention and not args.copied_prefix
    base = list(range(1000, 1000 + PREFIX_TOKENS))
    print(f"smollm2-135m {args.dtype}, torch threads {threads}, prefix "
          f"{'copied per row' if args.copied_prefix else 'attended in place'}; "
          f"{PREFIX_TOKENS}-token shared prefix + 1-43 tokens per row, "
          f"{NEW_TOKENS} new tokens each")
    single = None
    for rows in [int(r) for r in args.rows.split(",")]:
        backend.prefix_store.clear()
        session = batcher.session(max_new_tokens=NEW_TOKENS, batch_size=rows)
        for i in range(rows):
            session.submit(i, base + [5 + i] * (1 + 6 * (i % 8)))
        done = session.step()  # admission: prefill and the first decode step
        start = time.perf_counter()
        while session.pending:
            done += session.step()
        seconds = time.perf_counter() - start
        # Tokens decoded after the clock started: all but the prefill's and the first step's.
        rate = sum(max(0, len(row.tokens) - 2) for _, row in done) / seconds
        single = single or rate
        print(f"{rows:3d} rows: {rate:7.0f} tokens/s  {rate / single:5.1f}x one row")
    print(f"note: {load_note()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
