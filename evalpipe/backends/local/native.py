"""The engine's C kernels, built by the machine's own compiler at first use.

Each kernel is one plain C file in kernels/, with no torch headers (only simd.h,
the vector type they share), so the compiler builds it in a second or two into
the user cache, for this CPU (`-march=native`) unless `EVALPIPE_KERNEL_MARCH`
names another target (the tests build every vector width simd.h has this way).
Where no compiler is found or the build fails, `load` returns None and the
caller keeps torch's own operations; `state` says which, and why, for the
run's manifest and log, and a failed build is warned once (EngineWarning).
`EVALPIPE_NATIVE_KERNELS=0` turns every kernel off.

The ctypes signatures are read from the C source itself (`signatures`): every
function defined at the top level of a kernel file without `static` is
exported, and its parameters must be of the types in `C_TYPES`.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evalpipe.errors import EngineWarning

KERNELS = Path(__file__).parent / "kernels"
FLAGS = ("-O3", "-shared", "-fPIC", "-fopenmp")
MARCH_ENV = "EVALPIPE_KERNEL_MARCH"
# The x86-64 levels a build may target instead of this CPU, each with the CPU flags
# (Linux's names) it needs on top of the level below: code for a level the CPU lacks
# dies of an illegal instruction, so such a library is built but never loaded.
# simd.h picks 4 lanes for v2 (SSE), 8 for v3 (AVX2), 16 for v4 (AVX-512).
LEVELS: dict[str, tuple[str, ...]] = {
    "x86-64-v2": ("cx16", "lahf_lm", "popcnt", "sse4_1", "sse4_2", "ssse3"),
    "x86-64-v3": ("avx", "avx2", "bmi1", "bmi2", "f16c", "fma", "abm", "movbe", "xsave"),
    "x86-64-v4": ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"),
}
# C parameter and return types the kernels' exported functions may use.
C_TYPES: dict[str, Any] = {"int64_t": ctypes.c_int64, "int": ctypes.c_int,
                           "float": ctypes.c_float, "void": None, "pointer": ctypes.c_void_p}

# Where a build failed although a compiler is here (said once per kernel and target).
def log(line: str) -> None:
    warnings.warn(EngineWarning(line), stacklevel=3)


def enabled() -> bool:
    return os.environ.get("EVALPIPE_NATIVE_KERNELS", "1") != "0" and sys.platform != "win32"


def march() -> str:
    """The target the kernels are built for: this CPU ("native") unless the environment
    names an x86-64 level or another -march value."""
    return os.environ.get(MARCH_ENV) or "native"


@dataclass(frozen=True)
class Kernel:
    """One kernel library as this process has it: loaded, or why not."""

    name: str
    lib: ctypes.CDLL | None
    march: str
    compiler: str = ""  # the first line of the compiler's --version
    why_not: str = ""

    def fact(self) -> dict[str, Any]:
        """For the run's manifest: built with what, for which width, or why not."""
        if self.lib is None:
            return {"built": False, "why_not": self.why_not}
        return {"built": True, "lanes": int(self.lib.simd_lanes()), "march": self.march,
                "compiler": self.compiler}

    def line(self) -> str:
        """For the run's log."""
        if self.lib is None:
            return f"{self.name} not built ({self.why_not})"
        return f"{self.name} {self.lib.simd_lanes()} lanes"


_loaded: dict[tuple[str, str], Kernel] = {}


def sources() -> list[Path]:
    """Every kernel's C file."""
    return sorted(KERNELS.glob("*.c"))


def states() -> dict[str, dict[str, Any]]:
    """Every kernel's state (`Kernel.fact`), by name, each built if it was not yet."""
    return {source.stem: state(source).fact() for source in sources()}


def load(source: Path) -> ctypes.CDLL | None:
    """The library built from `source` for `march()`, or None where it cannot be had."""
    return state(source).lib


def state(source: Path) -> Kernel:
    """The kernel built from `source` for `march()` (built at the first call)."""
    if not enabled():
        return Kernel(source.stem, None, march(),
                      why_not="switched off: EVALPIPE_NATIVE_KERNELS=0" if sys.platform != "win32"
                      else "not built on Windows")
    key = (str(source), march())
    if key not in _loaded:
        _loaded[key] = _load(source, key[1])
    return _loaded[key]


def forget() -> None:
    """Drop every loaded kernel's entry, so the next `load` builds or finds it anew (tests
    that change the compiler)."""
    _loaded.clear()


def compiler() -> str | None:
    return shutil.which(os.environ.get("CC") or "cc") or shutil.which("gcc")


@functools.lru_cache(maxsize=8)
def compiler_version(path: str) -> str:
    """The first line of `path --version` (gcc and clang both print one), or ""."""
    try:
        out = subprocess.run([path, "--version"], check=False, capture_output=True, text=True,
                             timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.strip().splitlines()[0] if out.strip() else ""


def missing_flags(target: str) -> list[str]:
    """The CPU flags this machine lacks to run code built for `target`: [] for native or
    a target this module does not know, ["not an x86-64 CPU"] for a level elsewhere."""
    if target not in LEVELS:
        return []
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return ["not an x86-64 CPU"]
    from evalpipe.backends.local.cpu import cpu_info

    flags = cpu_info()[1]
    needed = [f for level, names in LEVELS.items() for f in names
              if list(LEVELS).index(level) <= list(LEVELS).index(target)]
    return [f for f in needed if f not in flags]


def compile_kernel(source: Path, target: str) -> tuple[Path | None, str, str]:
    """Build `source` for `target` into the user cache (once; the key holds the sources,
    the compiler and its version, the flags and, for native code, the CPU): (the
    library's path or None, the compiler's version line, why not)."""
    cc = compiler()
    if cc is None:
        return None, "", "no C compiler found (CC, cc, gcc)"
    if not re.fullmatch(r"[A-Za-z0-9_.+-]+", target):
        return None, "", f"{MARCH_ENV}={target!r} is not a -march value"
    from evalpipe.backends.local.cpu import cpu_info
    from evalpipe.paths import cache_dir

    version = compiler_version(cc)
    flags = (*FLAGS, f"-march={target}")
    texts = [source.read_bytes()] + [h.read_bytes() for h in sorted(source.parent.glob("*.h"))]
    cpu = cpu_info()[0] if target == "native" else ""  # native code runs on CPUs like this one
    key = hashlib.sha256(b"\0".join([*texts, cc.encode(), version.encode(),
                                     " ".join(flags).encode(), platform.machine().encode(),
                                     cpu.encode()]))
    path = cache_dir("kernels") / f"{source.stem}-{key.hexdigest()[:16]}.so"
    if path.exists():
        return path, version, ""
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        built = Path(tmp) / path.name
        try:
            subprocess.run([cc, *flags, f"-I{source.parent}", str(source), "-o", str(built)],
                           check=True, capture_output=True, text=True, timeout=120)
        except subprocess.CalledProcessError as exc:
            first = next((line for line in exc.stderr.splitlines() if "error" in line),
                         exc.stderr.strip().splitlines()[0] if exc.stderr.strip() else "")
            why = f"{Path(cc).name} exit {exc.returncode}: {first.strip()[:300]}"
            return None, version, f"the build failed ({why})"
        except (OSError, subprocess.SubprocessError) as exc:
            return None, version, f"the build failed ({type(exc).__name__}: {exc})"
        os.replace(built, path)  # atomic: parallel first uses cannot see half a file
    return path, version, ""


def _load(source: Path, target: str) -> Kernel:
    path, version, why = compile_kernel(source, target)
    if path is None:
        if compiler() is not None:  # a compiler that fails: a fault to see, not a fallback
            log(f"the {source.stem} kernel did not build for -march={target}: {why}; "
                "the engine runs torch's slower operations instead")
        return Kernel(source.stem, None, target, version, why)
    missing = missing_flags(target)
    if missing:
        return Kernel(source.stem, None, target, version,
                      f"this CPU cannot run -march={target} (no {', '.join(missing)})")
    try:
        lib = ctypes.CDLL(str(path))
        for name, (restype, argtypes) in signatures(source).items():
            function = getattr(lib, name)
            function.restype, function.argtypes = restype, argtypes
    except (OSError, AttributeError, ValueError) as exc:
        log(f"the {source.stem} kernel did not load: {exc}")
        return Kernel(source.stem, None, target, version, f"it did not load: {exc}")
    return Kernel(source.stem, lib, target, version)


_DEFINITION = re.compile(r"^(?!static\b)(?:const\s+)?(\w+)\s+(\w+)\s*\(([^)]*)\)\s*\{",
                         re.MULTILINE)


def signatures(source: Path) -> dict[str, tuple[Any, list[Any]]]:
    """The exported functions of `source` and of the headers beside it, as ctypes
    (restype, argtypes): each function defined at the start of a line without `static`."""
    texts = [source.read_text()] + [h.read_text() for h in sorted(source.parent.glob("*.h"))]
    out: dict[str, tuple[Any, list[Any]]] = {}
    for text in texts:
        text = re.sub(r"/\*.*?\*/", "", text, flags=re.DOTALL)
        for restype, name, params in _DEFINITION.findall(text):
            out[name] = (_c_type(restype, name), [_c_type(p, name) for p in _params(params)])
    return out


def _params(params: str) -> list[str]:
    """The types of a C parameter list ("void" or empty: none)."""
    kept = []
    for p in params.split(","):
        p = " ".join(p.split())
        if not p or p == "void":
            continue
        if "*" in p:
            kept.append("pointer")
        else:
            kept.append(p.replace("const ", "").rsplit(" ", 1)[0])
    return kept


def _c_type(name: str, function: str) -> Any:
    if name not in C_TYPES:
        raise ValueError(f"{function}: C type {name!r} has no ctypes mapping in native.C_TYPES")
    return C_TYPES[name]
