"""How the engine's bfloat16 replies compare with float32's and with torch's own
bfloat16 `model.generate`, on the tiny test models (no download, no timing).

    python bench/dtype_agreement.py

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


def main() -> int:
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
