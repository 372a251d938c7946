"""What every benchmark prints beside its figures: the CPU (model, the flags that
decide matmul speed, native bfloat16 or not), the cores and the machine's load.

A figure means little without the machine it came from: bfloat16 is 1.5x faster
than float32 on one CPU and ~170x slower on another (docs/speed.md)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def cpu_line() -> str:
    from evalpipe.backends.local.cpu import describe_cpu

    return describe_cpu()


def load_now() -> float:
    """The 1-minute load average (0.0 where the platform has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:  # pragma: no cover - Windows
        return 0.0


def load_note() -> str:
    """The CPU and the machine's load as the benchmark ends: ratios come from one run,
    under it."""
    return (f"{cpu_line()}; load average {load_now():.1f} at the end; both sides ran under "
            "the same conditions, the ratios come from this one run")


def matmul_rate(n: int = 1024, seconds: float = 2.0) -> float:
    """Measured float32 FLOP/s of an n x n x n product with torch's threads: the best of
    torch's matmul (the BLAS torch was built with), oneDNN's product on a packed weight,
    and the panel kernel the engine's linears run (best of a few runs each). They differ
    by CPU: on one AMD EPYC the BLAS ran at 116 GFLOP/s and oneDNN at about 300, so a
    ceiling from the BLAS alone put a run at 158% of it."""
    import torch

    from evalpipe.backends.local import packed_linear

    a, b = torch.randn(n, n), torch.randn(n, n)
    products = [lambda: torch.mm(a, b)]
    weight = b.t().contiguous()
    if packed_linear.onednn_available():
        onednn = packed_linear.pack_onednn(weight)
        products.append(lambda: packed_linear.matmul(a, onednn))
    if packed_linear.kernel_for(torch.float32) == "panel":  # the engine's own float32 kernel
        engine = packed_linear.pack(weight)
        products.append(lambda: packed_linear.matmul(a, engine))
    best = 0.0
    for product in products:
        product()
        end = time.perf_counter() + seconds
        while time.perf_counter() < end:
            t0 = time.perf_counter()
            for _ in range(4):
                product()
            best = max(best, 4 * 2 * n ** 3 / (time.perf_counter() - t0))
    return best


def flops_per_token(model) -> float:
    """2 x the weights every token multiplies by: every layer's projections and the
    output layer (the embedding lookup, norms and biases not; attention over the
    context is left out). From the config, so a model whose linears the engine packed
    (packed_linear.py) counts the same."""
    cfg = model.config.get_text_config(decoder=True)
    h, heads = cfg.hidden_size, cfg.num_attention_heads
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    dim = getattr(cfg, "head_dim", None) or h // heads
    inner = getattr(cfg, "intermediate_size", 4 * h)
    layer = h * dim * (2 * heads + 2 * kv) + 3 * h * inner  # q, o; k, v; gate, up, down
    return 2.0 * (cfg.num_hidden_layers * layer + cfg.vocab_size * h)


def attention_flops_per_column(model) -> float:
    """FLOPs of one token attending to one key column: the query-key product and the
    weighted sum of values, 2 FLOPs per multiply-add each, in every layer and head."""
    cfg = model.config.get_text_config(decoder=True)
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    return 4.0 * cfg.num_hidden_layers * cfg.num_attention_heads * head_dim


def floor_share(work: list[tuple[Any, int, int]], seconds: float) -> str:
    """How close `seconds` came to the compute floor of the tokens each model processed:
    for each (model, tokens processed, key columns attended), tokens x FLOPs per token /
    (measured matmul rate x seconds), summed over the models. A second figure adds
    attention's FLOPs, which grow with the context and which the first leaves out."""
    rate = matmul_rate()
    floor = sum(tokens * flops_per_token(model) for model, tokens, _ in work) / rate
    extra = sum(columns * attention_flops_per_column(model) for model, _, columns in work) / rate
    tokens = sum(t for _, t, _ in work)
    line = (f"compute floor {floor:.1f} s ({tokens} tokens over {len(work)} model(s) / "
            f"{rate / 1e9:.0f} GFLOP/s measured float32 matmul, the best of BLAS, oneDNN and "
            f"panels) = {floor / seconds:.0%} of {seconds:.1f} s")
    if extra:
        line += (f"; with attention over the context (+{extra:.1f} s): "
                 f"{(floor + extra) / seconds:.0%}")
    return line
