"""The panel kernel alone: a model's layer shapes in float32 and bfloat16 panels, at
decode and prefill sizes, for each vector width the CPU runs.

    python bench/bench_panels.py                                  # the 1.5B's shapes
    python bench/bench_panels.py --model qwen2.5-coder-0.5b --march native,x86-64-v3

Random weights of the model's shapes (from the converted folder's config.json, or
the 1.5B's where it is not converted): q|k|v, o, gate/up (gated) and down of
`--layers` distinct layers, so the weights come cold from memory as in a decode
step, and one layer at `--prefill` rows. Each product is timed as the fastest of
five passes; prints ms, GFLOP/s and the weights' GB/s. `--march` builds the kernels
for other targets (native.py's EVALPIPE_KERNEL_MARCH): x86-64-v4 runs the widened
bfloat16 path at AVX-512's width on a CPU that has the dot-product instruction.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

from bench_engine import add_threads_option, use_threads

# Qwen2.5-Coder-1.5B as converted (hidden, intermediate, heads, kv heads)
DEFAULT_SHAPE = (1536, 8960, 12, 2)


def shapes_of(model: str) -> tuple[int, int, int, int]:
    from evalpipe.backends.models import converted_dir

    path = converted_dir(model) / "config.json"
    if not path.is_file():
        return DEFAULT_SHAPE
    cfg = json.loads(path.read_text())
    return (cfg["hidden_size"], cfg["intermediate_size"], cfg["num_attention_heads"],
            cfg["num_key_value_heads"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b")
    ap.add_argument("--layers", type=int, default=6)
    ap.add_argument("--rows", default="1,4,16,64,256")
    ap.add_argument("--prefill", type=int, default=2048)
    ap.add_argument("--march", default="native,x86-64-v4",
                    help="kernel targets (native.py), each a block of rows")
    add_threads_option(ap)
    args = ap.parse_args(argv)
    threads = use_threads(args.threads)

    import torch
    from machine import cpu_line, load_now

    from evalpipe.backends.local import native, packed_linear

    hidden, inner, heads, kv = shapes_of(args.model)
    dim = hidden // heads
    print(f"{cpu_line()}; torch threads {threads}; load {load_now():.1f}")
    print(f"shapes of {args.model}: hidden {hidden}, intermediate {inner}, q|k|v "
          f"{(heads + 2 * kv) * dim}; {args.layers} layers of distinct weights\n")
    torch.manual_seed(0)
    layers = [{"qkv": torch.randn((heads + 2 * kv) * dim, hidden) * 0.02,
               "o": torch.randn(hidden, heads * dim) * 0.02,
               "gate": torch.randn(inner, hidden) * 0.02,
               "up": torch.randn(inner, hidden) * 0.02,
               "down": torch.randn(hidden, inner) * 0.02} for _ in range(args.layers)]
    flops_row = 2 * sum(w.numel() for w in layers[0].values())
    print("| kernel | dtype | rows | ms (all layers) | GFLOP/s | weights GB/s |\n"
          "|---|---|---|---|---|---|")
    for target in args.march.split(","):
        os.environ[native.MARCH_ENV] = target
        lib = packed_linear.panel_kernel()
        if lib is None:
            print(f"| {target} | - | - | not built: {native.state(packed_linear.SOURCE).why_not} "
                  "| | |")
            continue
        for dtype in (torch.float32, torch.bfloat16):
            packed = [{"qkv": packed_linear.pack(w["qkv"].to(dtype)),
                       "o": packed_linear.pack(w["o"].to(dtype)),
                       "gate_up": packed_linear.pack_gated(w["gate"].to(dtype), w["up"].to(dtype)),
                       "down": packed_linear.pack(w["down"].to(dtype))} for w in layers]
            nbytes = sum(packed_linear.packed_bytes(p) for layer in packed for p in layer.values())
            label = f"{target} ({lib.simd_lanes()} lanes" + (
                ", dot" if dtype == torch.bfloat16 and lib.bf16_dot() else "") + ")"

            def step(rows: int, which=packed) -> float:
                x, h = torch.randn(rows, hidden), torch.randn(rows, inner)
                t0 = time.perf_counter()
                for p in which:
                    packed_linear.matmul(x, p["qkv"])
                    packed_linear.matmul(x, p["o"])
                    packed_linear.gated(x, p["gate_up"])
                    packed_linear.matmul(h, p["down"])
                return time.perf_counter() - t0

            for rows in [int(r) for r in args.rows.split(",")]:
                best = min(step(rows) for _ in range(5))
                print(f"| {label} | {str(dtype)[6:]} | {rows} | {best * 1e3:.2f} | "
                      f"{rows * flops_row * len(packed) / best / 1e9:.0f} | "
                      f"{nbytes / best / 1e9:.1f} |", flush=True)
            best = min(step(args.prefill, packed[:1]) for _ in range(3))
            print(f"| {label} | {str(dtype)[6:]} | {args.prefill} (one layer) | "
                  f"{best * 1e3:.1f} | {args.prefill * flops_row / best / 1e9:.0f} | |",
                  flush=True)
    print(f"\nload {load_now():.1f} at the end")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
