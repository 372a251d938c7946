"""dtype `auto` and the CPU's native bfloat16: auto loads float32, an explicit
bfloat16 on a CPU that emulates it warns in one line why it will be slow."""

from __future__ import annotations

import pytest

from evalpipe.backends.local import cpu

EPYC = """processor\t: 0
model name\t: AMD EPYC
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512_bf16 avx512_vnni
processor\t: 1
model name\t: AMD EPYC
flags\t\t: fpu sse2 avx avx2 fma avx512f avx512_bf16 avx512_vnni
"""
AVX2_ONLY = "model name\t: Intel(R) Xeon(R) CPU E5-2680 v4\nflags\t\t: fpu sse2 avx avx2 fma\n"
GRAVITON3 = "processor\t: 0\nBogoMIPS\t: 2100.00\nFeatures\t: fp asimd sve bf16 i8mm\n"


def test_parse_cpuinfo_reads_model_and_flags():
    model, flags = cpu.parse_cpuinfo(EPYC)
    assert model == "AMD EPYC"
    assert {"avx512_bf16", "avx2"} <= flags and "amx_bf16" not in flags
    assert cpu.parse_cpuinfo(GRAVITON3)[1] >= {"bf16", "sve"}


@pytest.mark.parametrize("text, native", [(EPYC, True), (AVX2_ONLY, False), (GRAVITON3, True),
                                          ("", False)])
def test_native_bf16_follows_the_flags(monkeypatch, text, native):
    monkeypatch.setattr(cpu, "cpu_info", lambda: cpu.parse_cpuinfo(text))
    assert cpu.native_bf16() is native
    assert ("bfloat16 native" in cpu.describe_cpu()) is native


def test_auto_is_float32_everywhere(monkeypatch):
    for native in (True, False):
        monkeypatch.setattr(cpu, "native_bf16", lambda native=native: native)
        assert cpu.resolve_dtype("auto") == ("float32", None)


def test_explicit_bfloat16_without_native_support_warns(monkeypatch):
    monkeypatch.setattr(cpu, "cpu_info", lambda: cpu.parse_cpuinfo(AVX2_ONLY))
    dtype, warning = cpu.resolve_dtype("bfloat16")
    assert dtype == "bfloat16"
    assert "\n" not in warning and "E5-2680" in warning and "slower than float32" in warning
    monkeypatch.setattr(cpu, "cpu_info", lambda: cpu.parse_cpuinfo(EPYC))
    assert cpu.resolve_dtype("bfloat16") == ("bfloat16", None)
    assert cpu.resolve_dtype("bfloat16", device="cuda") == ("bfloat16", None)
    monkeypatch.setattr(cpu, "cpu_info", lambda: cpu.parse_cpuinfo(AVX2_ONLY))
    assert cpu.resolve_dtype("bfloat16", panels=True) == ("bfloat16", None)  # widened there


def test_backend_default_is_auto_and_loads_float32(tiny_model_dir, monkeypatch, capsys):
    import torch

    from evalpipe.backends import load_backend
    from evalpipe.backends.transformers_backend import TransformersBackend

    backend = load_backend({"id": str(tiny_model_dir)})
    assert backend.dtype == "float32" and backend.describe()["dtype"] == "float32"
    assert next(backend.model.parameters()).dtype == torch.float32
    monkeypatch.setattr(cpu, "cpu_info", lambda: cpu.parse_cpuinfo(AVX2_ONLY))
    # On bfloat16 panels (any CPU with a compiler) bfloat16 is not emulated: no warning.
    TransformersBackend(str(tiny_model_dir), dtype="bfloat16")
    assert "warning: dtype bfloat16" not in capsys.readouterr().err
    monkeypatch.setenv("EVALPIPE_NATIVE_KERNELS", "0")  # no panels: torch emulates it
    slow = TransformersBackend(str(tiny_model_dir), dtype="bfloat16")
    assert next(slow.model.parameters()).dtype == torch.bfloat16
    err = capsys.readouterr().err
    warnings = [line for line in err.splitlines() if line.startswith("warning: dtype bfloat16")]
    assert len(warnings) == 1


def test_auto_float32_and_no_dtype_are_one_config():
    """auto resolves to float32: writing either, or neither, names the same run."""
    from evalpipe.config import parse_config

    def config(**dtype):
        return parse_config({"questions": ["q.jsonl"], "models": [{"id": "m", **dtype}]})

    plain, auto, float32 = config(), config(dtype="auto"), config(dtype="float32")
    assert cpu.resolve_dtype("auto")[0] == "float32"
    assert [m.record() for c in (plain, auto, float32) for m in c.models] == \
        [{"id": "m", "backend": "transformers"}] * 3
    assert plain.hash() == auto.hash() == float32.hash()
    bf16 = config(dtype="bfloat16")
    assert bf16.models[0].record()["dtype"] == "bfloat16" and bf16.hash() != plain.hash()
