"""What every benchmark prints beside its figures: the CPU (model, the flags that
decide matmul speed, native bfloat16 or not), the cores and the machine's load.

A figure means little without the machine it came from: bfloat16 is 1.5x faster
than float32 on one CPU and ~170x slower on another (docs/speed.md)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def cpu_line() -> str:
    from evalpipe.backends.cpu import describe_cpu

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
