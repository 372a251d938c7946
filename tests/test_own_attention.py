"""The C kernel for a decode step's attention agrees with plain attention over
[prefix | own tokens], and attention falls back to torch's where the kernel cannot be
built or cannot take the shapes."""

from __future__ import annotations

import pytest
import torch

from evalpipe.backends.local import native, own_attention
from evalpipe.backends.local.prefix_attention import SharedPrefix, _cascade
from tests.helpers import needs_compiler, prefix_columns, two_prefixes


class _Module:
    layer_idx = 0


def _cache(b, kv_heads, s_len, dim, spare=5):
    """Keys or values as the engine holds them: a view of a buffer with spare columns."""
    return torch.randn(b, kv_heads, s_len + spare, dim)[:, :, :s_len]


def _gappy_mask(b, s_len):
    """Left padding and a gap inside each row, as merged batches leave them."""
    mask = torch.ones(b, s_len, dtype=torch.bool)
    for i in range(b):
        mask[i, : i % s_len] = False
        mask[i, s_len // 2] = i % 2 == 0
    mask[:, -1] = True  # every row attends to its newest token
    return mask


@needs_compiler
def test_kernel_builds_here():
    assert own_attention.kernel() is not None


def _torch_attention(query, key, value, mask, prefix, starts, lengths, scale):
    """The same attention written plainly: [the row's prefix | own] columns, one softmax."""
    b, heads = query.shape[:2]
    groups = heads // key.shape[1]
    k = key.repeat_interleave(groups, 1)
    v = value.repeat_interleave(groups, 1)
    cols = mask[:, None, None, :]
    if prefix is not None:
        pk, pv = (t.expand(b, -1, -1, -1).repeat_interleave(groups, 1) for t in prefix)
        k, v = torch.cat([pk, k], 2), torch.cat([pv, v], 2)
        shared = prefix_columns(starts, lengths, pk.shape[2])
        cols = torch.cat([shared[:, None, None, :], cols], -1)
    scores = (query * scale) @ k.transpose(-1, -2)
    weights = torch.softmax(scores.masked_fill(~cols, float("-inf")), -1).nan_to_num(0.0)
    return (weights @ v).transpose(1, 2)


@pytest.mark.parametrize("groups, dim, p_len, s_len", [
    (1, 64, 11, 37), (3, 64, 482, 29), (4, 16, 33, 16), (5, 80, 32, 1), (6, 128, 70, 150),
    (3, 64, 0, 45)])
def test_decode_attention_equals_plain_attention(groups, dim, p_len, s_len, vector_width):
    torch.manual_seed(groups * 100 + dim + p_len)
    b, kv_heads = 7, 3
    query = torch.randn(b, kv_heads * groups, 1, dim)
    key, value = _cache(b, kv_heads, s_len, dim), _cache(b, kv_heads, s_len, dim)
    value = value.as_strided(value.shape, key.stride())  # one buffer layout, as the cache
    mask = _gappy_mask(b, s_len)
    prefix, starts, lengths = two_prefixes(b, kv_heads, dim, p_len)  # rows on either or none
    width = prefix[0].shape[2] if prefix else 0
    assert own_attention.usable(query, key, value)
    out = own_attention.decode_attention(query, key, value, mask, prefix,
                                         own_attention.Ranges.of(starts, lengths, width),
                                         dim ** -0.5)
    expected = _torch_attention(query, key, value, mask, prefix, starts, lengths, dim ** -0.5)
    assert out.shape == (b, 1, kv_heads * groups, dim)
    assert torch.allclose(out, expected, atol=2e-6, rtol=1e-5)


def test_a_row_that_attends_to_nothing_gets_zeros_not_nan(vector_width):
    b, heads, kv_heads, dim, s_len = 2, 4, 2, 16, 5
    query = torch.randn(b, heads, 1, dim)
    key = value = torch.randn(b, kv_heads, s_len, dim)
    mask = torch.ones(b, s_len, dtype=torch.bool)
    mask[1] = False
    prefix = (torch.randn(1, kv_heads, 3, dim), torch.randn(1, kv_heads, 3, dim))
    out = own_attention.decode_attention(query, key, value, mask, prefix,
                                         own_attention.Ranges.of(torch.tensor([0, 0]),
                                                                 torch.tensor([3, 0]), 3), 0.25)
    assert (out[1] == 0).all()
    assert torch.isfinite(out).all() and (out[0] != 0).any()


def test_exp_in_the_kernel_matches_torch_over_the_softmax_range(vector_width):
    """A single column per block isolates exp: its weight is exp(s - max) / sum."""
    torch.manual_seed(3)
    dim = 16
    query = torch.zeros(1, 1, 1, dim)
    query[..., 0] = 1.0
    xs = torch.linspace(-100.0, 0.0, 2001)  # scores, so weights e^(x - 0) against column 0
    key = torch.zeros(1, 1, xs.numel() + 1, dim)
    key[0, 0, 1:, 0] = xs
    value = torch.zeros_like(key)
    value[0, 0, 1:, : dim] = torch.eye(dim).repeat(xs.numel() // dim + 1, 1)[: xs.numel()]
    mask = torch.ones(1, xs.numel() + 1, dtype=torch.bool)
    none = own_attention.Ranges.none(1)
    out = own_attention.decode_attention(query, key, value, mask, None, none, 1.0)
    expected = _torch_attention(query, key, value, mask, None, none.starts, none.lengths, 1.0)
    assert torch.allclose(out, expected, rtol=1e-6, atol=1e-12)


def test_no_kernel_where_it_cannot_be_built(monkeypatch, tmp_path):
    monkeypatch.setenv("EVALPIPE_CACHE", str(tmp_path))
    monkeypatch.setenv("CC", "false")  # a "compiler" that always fails
    monkeypatch.setattr(native.shutil, "which",
                        lambda name: "/bin/false" if name == "false" else None)
    warned = []
    monkeypatch.setattr(native, "log", warned.append)
    monkeypatch.setattr(native, "_loaded", {})
    assert own_attention.kernel() is None
    assert own_attention.kernel() is None
    assert len(warned) == 1 and "own_attention kernel did not build" in warned[0]  # once
    query = torch.randn(2, 4, 1, 8)
    key = value = torch.randn(2, 2, 5, 8)
    assert not own_attention.usable(query, key, value)
    prefix = SharedPrefix.one([(torch.randn(1, 2, 3, 8), torch.randn(1, 2, 3, 8))],
                              torch.tensor([True, True]))
    out, _ = _cascade(_Module(), query, key, value, None, 0.5, prefix)
    assert torch.isfinite(out).all()


def test_switched_off_by_environment(monkeypatch):
    monkeypatch.setenv("EVALPIPE_NATIVE_KERNELS", "0")
    assert own_attention.kernel() is None
    assert native.state(own_attention.SOURCE).fact() == {
        "built": False, "why_not": "switched off: EVALPIPE_NATIVE_KERNELS=0"}


def test_kernel_not_taken_for_prefill_or_bfloat16():
    query = torch.randn(2, 4, 3, 8)  # three query tokens: a prefill chunk
    key = value = torch.randn(2, 2, 5, 8)
    assert not own_attention.usable(query, key, value)
    assert not own_attention.usable(query[:, :, :1], key.bfloat16(), value.bfloat16())


@needs_compiler
def test_a_mask_that_is_not_bool_is_refused():
    query, key = torch.randn(1, 1, 1, 16), torch.randn(1, 1, 4, 16)
    with pytest.raises(TypeError, match="bool"):
        own_attention.decode_attention(query, key, key, torch.ones(1, 4, dtype=torch.long),
                                       None, own_attention.Ranges.none(1), 1.0)


def test_ranges_out_of_bounds_are_refused():
    """The kernel reads each row's range rounded up to whole blocks: that must lie within
    the stored prefixes, rounded up alike."""
    own_attention.Ranges.of(torch.tensor([0, 32]), torch.tensor([20, 3]), 35)
    for starts, lengths in (([0, 33], [20, 3]), ([0, -1], [20, 3]), ([0, 0], [20, 70])):
        with pytest.raises(ValueError, match="out of bounds"):
            own_attention.Ranges.of(torch.tensor(starts), torch.tensor(lengths), 35)
