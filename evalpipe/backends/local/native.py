"""The engine's C kernels, built by the machine's own compiler at first use.

Each kernel is one plain C file beside this module, with no torch headers (only
simd.h, the vector type they share), so the compiler builds it in well under a
second, for this CPU (`-march=native`), into the user cache. Where no compiler
is found or the build fails, `build` returns None and the caller keeps torch's
own operations; nothing else changes.
`EVALPIPE_NATIVE_KERNELS=0` turns every kernel off.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

FLAGS = ("-O3", "-march=native", "-shared", "-fPIC", "-fopenmp")


def enabled() -> bool:
    return os.environ.get("EVALPIPE_NATIVE_KERNELS", "1") != "0" and sys.platform != "win32"


def build(source: Path) -> ctypes.CDLL | None:
    """The library built from `source`, or None where it cannot be had."""
    if not enabled():
        return None
    compiler = shutil.which(os.environ.get("CC") or "cc") or shutil.which("gcc")
    if compiler is None:
        return None
    from evalpipe.backends.local.cpu import cpu_info
    from evalpipe.paths import cache_dir

    # The source and the headers beside it; -march=native code runs only on CPUs like
    # this one: the CPU is part of the key.
    texts = [source.read_bytes()] + [h.read_bytes() for h in sorted(source.parent.glob("*.h"))]
    key = hashlib.sha256(b"\0".join([*texts, compiler.encode(), " ".join(FLAGS).encode(),
                                     platform.machine().encode(), cpu_info()[0].encode()]))
    target = cache_dir("kernels") / f"{source.stem}-{key.hexdigest()[:16]}.so"
    if not target.exists():
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            built = Path(tmp) / target.name
            try:
                subprocess.run([compiler, *FLAGS, f"-I{source.parent}", str(source), "-o",
                                str(built)], check=True, capture_output=True, timeout=120)
            except (OSError, subprocess.SubprocessError):
                return None
            os.replace(built, target)  # atomic: parallel first uses cannot see half a file
    try:
        return ctypes.CDLL(str(target))
    except OSError:
        return None
