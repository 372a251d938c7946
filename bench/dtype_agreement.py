"""How the engine's bfloat16 replies compare with float32's and with torch's own
bfloat16 `model.generate`, on the tiny test models (no download, no timing); and,
given two runs of one config in the two dtypes, how their replies and verdicts do.

    python bench/dtype_agreement.py
    python bench/dtype_agreement.py --runs outputs/RUN_FLOAT32 outputs/RUN_BFLOAT16

The engine computes in float32 around bfloat16 panels; torch's bfloat16 model rounds
the residual stream, norms, attention and cache to bfloat16 too. So the engine's
replies are not expected to equal torch's bfloat16 ones everywhere: this counts where
they do, and how each bfloat16 arithmetic keeps to float32's (identical replies, and
the tokens before each reply first parts from float32's). docs/speed.md quotes it.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))


def prompts(n: int, seed: int = 5) -> list[list[int]]:
    """n prompts of 25-54 tokens on one 24-token prefix."""
    rng = random.Random(seed)
    head = [rng.randrange(3, 96) for _ in range(24)]
    return [head + [rng.randrange(3, 96) for _ in range(rng.randrange(1, 30))]
            for _ in range(n)]


def common(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def runs(a: Path, b: Path) -> None:
    """Per model of two runs of one grid (run b in another dtype than run a): samples
    whose every turn's reply is identical, the first turns identical, and the samples
    whose verdict moved (the primary category, or exact match), listed."""
    import json

    def samples(run: Path) -> dict[tuple[str, str], dict]:
        out = {}
        with open(run / "samples.jsonl", encoding="utf-8") as f:
            for line in f:
                r = json.loads(line)
                out[(r["cell_id"], r["question_id"])] = r
        return out

    def verdicts(run: Path) -> dict[tuple[str, str], tuple]:
        scores = json.loads((run / "scores.json").read_text(encoding="utf-8"))
        return {(s["cell_id"], s["question_id"]): (s.get("category"), s.get("exact"))
                for s in scores["samples"]}

    sa, sb, va, vb = samples(a), samples(b), verdicts(a), verdicts(b)
    dtypes = {run: next(iter(s.values()))["settings"].get("dtype") for run, s in
              ((a, sa), (b, sb))}
    print(f"{a.name} ({dtypes[a]}) against {b.name} ({dtypes[b]}): "
          f"{len(set(sa) & set(sb))} samples in both\n")
    print("| model | samples | every turn's reply identical | first reply identical | "
          "verdict moved |\n|---|---|---|---|---|")
    moved_all = []
    for model in sorted({k[0].split("/")[0] for k in sa}):
        keys = sorted(k for k in set(sa) & set(sb) if k[0].split("/")[0] == model)
        replies = [[t.get("raw") for t in s["turns"]] for s in (sa[k] for k in keys)], \
            [[t.get("raw") for t in s["turns"]] for s in (sb[k] for k in keys)]
        whole = sum(x == y for x, y in zip(*replies))
        first = sum(x[:1] == y[:1] for x, y in zip(*replies))
        moved = [k for k in keys if va.get(k) != vb.get(k)]
        moved_all += [(k, va.get(k), vb.get(k)) for k in moved]
        print(f"| {model} | {len(keys)} | {whole}/{len(keys)} | {first}/{len(keys)} | "
              f"{len(moved)}/{len(keys)} |")
    for (cell, question), before, after in moved_all:
        print(f"- {cell} {question}: {before[0]} (exact {before[1]}) -> {after[0]} "
              f"(exact {after[1]})")


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", nargs=2, type=Path, metavar=("RUN_A", "RUN_B"),
                    help="two run folders of one grid in two dtypes")
    args = ap.parse_args(argv)
    if args.runs:
        runs(*args.runs)
        return 0
    import helpers
    import torch

    from evalpipe.backends.local.batching import BatchGenerator, PrefixStore

    torch.set_num_threads(1)
    builds = {"Qwen2, tied": lambda: helpers.tiny_qwen2(tied=True),
              "Qwen2, untied": lambda: helpers.tiny_qwen2(tied=False),
              "Llama": helpers.tiny_llama}
    asked, new = prompts(40), 16
    print(f"{len(asked)} prompts, {new} new tokens, greedy; identical replies (tokens "
          "before the first difference, summed)\n")
    print("| model | engine bfloat16 = float32 | torch bfloat16 = float32 | engine = torch, "
          "both bfloat16 |\n|---|---|---|---|")
    for name, build in builds.items():
        float32 = [helpers.greedy_reference(build(), p, new, 2) for p in asked]
        torch_bf16_model = build()
        for p in torch_bf16_model.parameters():
            p.data = p.data.bfloat16()
        torch_bf16 = [helpers.greedy_reference(torch_bf16_model, p, new, 2) for p in asked]
        engine_model = build()
        for p in engine_model.parameters():
            p.data = p.data.bfloat16()
        rows = BatchGenerator(engine_model, [2], 0, PrefixStore()).generate(
            asked, max_new_tokens=new, batch_size=16)
        engine = [r.tokens for r in rows]

        def cell(a, b):
            return (f"{sum(x == y for x, y in zip(a, b))}/{len(a)} "
                    f"({sum(common(x, y) for x, y in zip(a, b))} tokens)")

        print(f"| {name} | {cell(engine, float32)} | {cell(torch_bf16, float32)} | "
              f"{cell(engine, torch_bf16)} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
