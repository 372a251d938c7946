"""What the CPU at hand computes natively, and the weights dtype `auto` picks from it.

bfloat16 is fast on a CPU only where the instruction set multiplies it natively:
on x86, AVX512-BF16 (`avx512_bf16`) or AMX (`amx_bf16`); on Arm, the BF16
extension (`bf16` in Linux's Features line, `hw.optional.arm.FEAT_BF16` on
macOS). Without them PyTorch converts every element in software: a plain
bfloat16 matmul ran ~170x slower than float32 on an AVX2-only machine
(docs/speed.md).
"""

from __future__ import annotations

import platform
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

# Flags that decide how fast the model's matmuls run: vector width, FMA, bfloat16.
RELEVANT = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "amx_tile", "amx_bf16",
            "amx_int8", "asimd", "sve", "bf16", "i8mm")
NATIVE_BF16 = ("avx512_bf16", "amx_bf16", "bf16")


@lru_cache(maxsize=1)
def cpu_info() -> tuple[str, frozenset[str]]:
    """The CPU's model name and its feature flags (empty where they cannot be read)."""
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    model, flags = parse_cpuinfo(text)
    model = model or platform.processor() or platform.machine()
    if sys.platform == "darwin":
        model = _sysctl("machdep.cpu.brand_string") or model
        if _sysctl("hw.optional.arm.FEAT_BF16") == "1":
            flags |= {"bf16"}
    return model, flags


def parse_cpuinfo(text: str) -> tuple[str, frozenset[str]]:
    """Model name and flags of the first processor in Linux's /proc/cpuinfo (x86 says
    `model name` and `flags`, Arm `CPU part` and `Features`)."""
    model, flags = "", frozenset[str]()
    for line in text.splitlines():
        name, _, value = line.partition(":")
        name = name.strip().lower()
        if name in ("model name", "cpu model") and value.strip() and not model:
            model = value.strip()
        elif name in ("flags", "features") and not flags:
            flags = frozenset(value.split())
    return model, flags


def _sysctl(name: str) -> str:
    try:
        return subprocess.run(["sysctl", "-n", name], check=False, capture_output=True, text=True,
                              timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def native_bf16() -> bool:
    """True when the CPU multiplies bfloat16 in hardware."""
    return any(f in cpu_info()[1] for f in NATIVE_BF16)


def describe_cpu() -> str:
    """One line for benchmark output: model, cores, the flags that matter, bf16 verdict."""
    import os

    model, flags = cpu_info()
    shown = " ".join(f for f in RELEVANT if f in flags) or "flags unknown"
    return (f"CPU: {model}, {os.cpu_count()} cores; {shown}; bfloat16 "
            f"{'native' if native_bf16() else 'NOT native (emulated, slow)'}")


AUTO = "auto"
DTYPES = ("float32", "bfloat16", "float16")  # what weights load in; `auto` picks one


def resolve_dtype(requested: str, device: str = "cpu", panels: bool = False
                  ) -> tuple[str, str | None]:
    """The dtype to load weights in, and a warning line when the request will be slow.

    `auto` is float32 on every device: the reproducible default, whose greedy replies
    equal one-at-a-time `generate`'s (docs/speed.md, "dtype"). An explicit bfloat16 is
    slow only where the CPU has no bfloat16 instructions and the engine's bfloat16
    panels (`panels`: their kernel is built here, which widens bfloat16 to float32 on
    any CPU) cannot take the weights: then torch emulates it element by element."""
    if requested == AUTO:
        return "float32", None
    if requested == "bfloat16" and device == "cpu" and not native_bf16() and not panels:
        model = cpu_info()[0]
        return requested, (f"warning: dtype bfloat16 on a CPU without native bfloat16 ({model}: "
                           "no avx512_bf16/amx_bf16/bf16 flag) and without the engine's "
                           "bfloat16 kernel is emulated and runs many times slower than "
                           "float32; use dtype: auto or float32")
    return requested, None
