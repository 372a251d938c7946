"""Time to first token with and without shared-prefix reuse.

    python bench/bench_prefix.py [--n 8] [--threads 2]

The prompts are first turns of the hermes format with the full math toolset
(system prompt + seven tool definitions, then the question), as an eval cell
sends them. Three measurements in one run, interleaved:
  cold   reuse on, empty prefix store (the first call of a cell: prefix computed once)
  warm   reuse on, prefix already stored (every later turn and question of the cell)
  off    no reuse: every row prefills its whole prompt
TTFT is the mean per-row prefill_ms reported by the backend (admission to first
token), with max_new_tokens=1. Greedy replies are also checked to be identical
with and without reuse (max_new_tokens=24).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_engine import add_threads_option, bench_questions, use_threads
from machine import load_note


def first_turn_prompts(backend, n: int, toolset: str = "math") -> list[str]:
    from evalpipe.engine import DEFAULT_SYSTEM_PROMPT
    from evalpipe.formats import get_format
    from evalpipe.tools import build_toolset

    fmt, tools = get_format("hermes"), build_toolset(toolset).schemas()
    prompts = []
    for q in bench_questions(n):
        wire, template_tools = fmt.prepare(
            [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT},
             {"role": "user", "content": q.question}], tools, backend.template_supports_tools)
        prompts.append(backend.render(wire, template_tools))
    return prompts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=8, help="prompts per batch")
    ap.add_argument("--rounds", type=int, default=2)
    add_threads_option(ap)
    args = ap.parse_args(argv)

    import torch

    from evalpipe.backends import load_backend
    from evalpipe.backends.base import GenerationSettings

    use_threads(args.threads)
    backend = load_backend({"id": "smollm2-135m", "dtype": "float32"})
    prompts = first_turn_prompts(backend, args.n)
    tok = backend.tokenizer
    lengths = [len(tok(p, add_special_tokens=False)["input_ids"]) for p in prompts]
    one = GenerationSettings(max_new_tokens=1, batch_size=args.n)
    backend.generate(prompts[:1], GenerationSettings(max_new_tokens=1, batch_size=1))  # warm-up

    ttft = {"cold": [], "warm": [], "off": []}
    for _ in range(args.rounds):
        backend.prefix_reuse = True
        backend.prefix_store.clear()
        ttft["cold"].append(statistics.mean(g.prefill_ms for g in backend.generate(prompts, one)))
        ttft["warm"].append(statistics.mean(g.prefill_ms for g in backend.generate(prompts, one)))
        backend.prefix_reuse = False
        ttft["off"].append(statistics.mean(g.prefill_ms for g in backend.generate(prompts, one)))
    stats = backend.batcher.stats

    check = GenerationSettings(max_new_tokens=24, batch_size=args.n)
    backend.prefix_reuse = True
    with_reuse = [g.text for g in backend.generate(prompts, check)]
    backend.prefix_reuse = False
    without = [g.text for g in backend.generate(prompts, check)]
    same = sum(a == b for a, b in zip(with_reuse, without))

    prefix = len(next(iter(backend.prefix_store.entries), ())) if backend.prefix_store.entries \
        else 0
    cold, warm, off = (min(ttft[k]) for k in ("cold", "warm", "off"))
    print(f"{len(prompts)} prompts (hermes + math tools), {min(lengths)}-{max(lengths)} tokens, "
          f"shared prefix {prefix} tokens; torch threads {torch.get_num_threads()}; "
          f"best of {args.rounds}")
    print(f"mean TTFT, no reuse      : {off:8.0f} ms")
    print(f"mean TTFT, reuse (cold)  : {cold:8.0f} ms   {off / cold:5.2f}x better")
    print(f"mean TTFT, reuse (warm)  : {warm:8.0f} ms   {off / warm:5.2f}x better  (target >= 2x)")
    print(f"greedy replies identical with and without reuse: {same}/{len(prompts)}")
    print(f"tokens prefilled {stats['prefilled_tokens']}, reused from the store "
          f"{stats['reused_tokens']}")
    print(f"note: {load_note()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
