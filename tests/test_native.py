"""The kernel builder (evalpipe/backends/local/native.py): every kernel builds wherever a
compiler is, at every vector width simd.h has (those the CPU cannot run are compiled,
not loaded); a failed build is a logged fault, never silent; the ctypes signatures are
the C source's own; the compiler's version is part of the cache key."""

from __future__ import annotations

import ctypes
import subprocess

import pytest
from helpers import VECTOR_WIDTHS, needs_compiler

from evalpipe.backends.local import native
from evalpipe.errors import EngineWarning

LEVELS = [w for w in VECTOR_WIDTHS if w != "native"]


@needs_compiler
def test_every_kernel_builds_for_this_cpu():
    """A machine with a compiler must get every kernel: a build that fails there is a
    fault (the engine would run torch's slower operations), so this test fails on it."""
    for source in native.sources():
        kernel = native.state(source)
        assert kernel.lib is not None, f"{source.name}: {kernel.why_not}"
        fact = kernel.fact()
        assert fact["built"] and fact["lanes"] in (4, 8, 16) and fact["march"] == "native"
        assert fact["compiler"] == native.compiler_version(native.compiler())
    assert set(native.states()) == {"own_attention", "panel_linear", "rotary"}


@needs_compiler
@pytest.mark.parametrize("level", LEVELS)
def test_every_width_compiles_whatever_this_cpu_runs(level, tmp_path, monkeypatch):
    """Each x86-64 level builds every kernel, and simd.h takes the width the level stands
    for (v4: the 16-lane AVX-512 path, compiled here even on a CPU that cannot run it)."""
    if native.missing_flags(level) == ["not an x86-64 CPU"]:
        pytest.skip(f"-march={level} is an x86-64 target; this CPU is not one")
    monkeypatch.setenv("EVALPIPE_CACHE", str(tmp_path))
    for source in native.sources():
        path, version, why = native.compile_kernel(source, level)
        assert path is not None and path.exists(), f"{source.name} for {level}: {why}"
        assert version
    probe = tmp_path / "lanes.c"
    probe.write_text('#include "simd.h"\n'
                     f'_Static_assert(LANES == {VECTOR_WIDTHS[level]}, "the wrong width");\n')
    subprocess.run([native.compiler(), f"-march={level}", f"-I{native.KERNELS}",
                    "-fsyntax-only", str(probe)], check=True, capture_output=True)


@needs_compiler
@pytest.mark.parametrize("target, dot", [("cooperlake", 1), ("x86-64-v4", 0), ("x86-64-v3", 0)])
def test_the_bfloat16_dot_product_path_compiles_where_the_target_has_it(target, dot, tmp_path):
    """The panel kernel's bfloat16 products take the AVX512_BF16 dot-product instruction
    for a target that has it (Cooper Lake: AVX-512 with BF16, as Zen 4 and 5) and widen
    bfloat16 to float32 for one that does not, whatever this CPU runs."""
    if native.missing_flags("x86-64-v2") == ["not an x86-64 CPU"]:
        pytest.skip("an x86-64 target; this CPU is not one")
    probe = tmp_path / "dot.c"
    probe.write_text('#include "panel_linear.c"\n'
                     f'_Static_assert(DOT_BF16 == {dot}, "the wrong bfloat16 path");\n')
    subprocess.run([native.compiler(), f"-march={target}", *native.FLAGS,
                    f"-I{native.KERNELS}", str(probe), "-o", str(tmp_path / "dot.so")],
                   check=True, capture_output=True)


def test_a_width_the_cpu_lacks_is_built_but_not_loaded(monkeypatch, tmp_path):
    monkeypatch.setenv("EVALPIPE_CACHE", str(tmp_path))
    monkeypatch.setattr(native, "_loaded", {})
    monkeypatch.setattr(native, "missing_flags", lambda target: ["avx512f"])
    monkeypatch.setattr(native, "compile_kernel", lambda source, target: (
        tmp_path / "built.so", "cc 1.0", ""))
    monkeypatch.setenv(native.MARCH_ENV, "x86-64-v4")
    kernel = native.state(native.sources()[0])
    assert kernel.lib is None
    assert kernel.fact() == {"built": False,
                             "why_not": "this CPU cannot run -march=x86-64-v4 (no avx512f)"}


def test_a_march_value_that_is_no_target_is_refused(monkeypatch):
    monkeypatch.setattr(native, "compiler", lambda: "/usr/bin/cc")
    path, _, why = native.compile_kernel(native.sources()[0], "native -o /tmp/x")
    assert path is None and "is not a -march value" in why


def test_without_a_compiler_nothing_is_built_and_nothing_warned(monkeypatch):
    monkeypatch.setattr(native, "_loaded", {})
    monkeypatch.setattr(native, "compiler", lambda: None)
    warned = []
    monkeypatch.setattr(native, "log", warned.append)
    assert native.states() == {name: {"built": False,
                                      "why_not": "no C compiler found (CC, cc, gcc)"}
                               for name in ("own_attention", "panel_linear", "rotary")}
    assert warned == []  # nothing to fix on such a machine: the state says it


def test_a_failed_build_is_warned_once_and_recorded(monkeypatch, tmp_path):
    fake = tmp_path / "cc"
    fake.write_text("#!/bin/sh\n[ \"$1\" = --version ] && echo 'fakecc 9.9' && exit 0\n"
                    "echo 'own_attention.c:1:1: error: no such thing' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("EVALPIPE_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", str(fake))
    monkeypatch.setattr(native, "_loaded", {})
    source = native.KERNELS / "own_attention.c"
    with pytest.warns(EngineWarning) as warned:  # a warning, not a line printed
        assert native.load(source) is None and native.load(source) is None
    assert len(warned) == 1
    message = str(warned[0].message)
    assert "own_attention kernel did not build" in message and "no such thing" in message
    fact = native.state(source).fact()
    assert not fact["built"] and "cc exit 1: own_attention.c:1:1: error: no such thing" in \
        fact["why_not"]


def test_the_compiler_version_is_part_of_the_cache_key(monkeypatch, tmp_path):
    """Another compiler version builds anew, even at the same path."""
    monkeypatch.setenv("EVALPIPE_CACHE", str(tmp_path))
    runs = []
    monkeypatch.setattr(native, "compiler", lambda: "/usr/bin/cc")

    def fake_run(cmd, **kwargs):
        runs.append(cmd)
        open(cmd[cmd.index("-o") + 1], "w").close()

    monkeypatch.setattr(native.subprocess, "run", fake_run)
    source = native.sources()[0]
    paths = []
    for version in ("cc (GCC) 12.2.0", "cc (GCC) 12.2.0", "cc (GCC) 13.1.0"):
        monkeypatch.setattr(native, "compiler_version", lambda path, v=version: v)
        paths.append(native.compile_kernel(source, "native")[0])
    assert paths[0] == paths[1] != paths[2]
    assert len(runs) == 2


def test_signatures_are_read_from_the_c_source():
    """The ctypes types come from each exported definition (not `static`), parameters
    spread over several lines included, and from simd.h beside it."""
    sig = native.signatures(native.KERNELS / "rotary.c")
    i64, ptr = ctypes.c_int64, ctypes.c_void_p
    assert sig["rotate_into"] == (None, [ptr] + [i64] * 5 + [ptr] * 2 + [i64] * 2 + [ptr] * 3
                                  + [i64] * 3 + [ctypes.c_int])
    assert sig["simd_lanes"] == (ctypes.c_int, []) and sig["dim_multiple"] == (ctypes.c_int, [])
    assert "rotate" not in sig and "turn" not in sig  # static helpers are not exported
    attention = native.signatures(native.KERNELS / "own_attention.c")
    assert attention["decode_attention"][0] is ctypes.c_int
    assert attention["decode_attention"][1][-2:] == [ctypes.c_float, ctypes.c_int]


def test_a_type_without_a_ctypes_mapping_is_an_error(tmp_path):
    source = tmp_path / "odd.c"
    source.write_text("/* int commented(void) { } */\n"
                      "double odd(const float *x,\n         double y) {\n    return y;\n}\n")
    with pytest.raises(ValueError, match="odd: C type 'double'"):
        native.signatures(source)
