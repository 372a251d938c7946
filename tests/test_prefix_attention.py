"""Shared-prefix attention equals ordinary attention over [prefix | row] keys."""

from __future__ import annotations

import pytest
import torch
from torch.nn.functional import scaled_dot_product_attention

from evalpipe.backends.local.prefix_attention import SharedPrefix, _cascade, _with_prefix


class _Module:
    layer_idx = 0


def reference(query, key, value, mask, prefix: SharedPrefix):
    """Plain attention with the prefix copied in front of every row's keys."""
    q_len, groups = query.shape[2], query.shape[1] // key.shape[1]
    key, value, full = _with_prefix(key, value, mask, prefix, 0, q_len)
    key, value = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
    return scaled_dot_product_attention(query, key, value, attn_mask=full).transpose(1, 2)


@pytest.mark.parametrize("q_len", [1, 4])
def test_cascade_equals_attention_over_copied_prefix(q_len):
    torch.manual_seed(0)
    b, heads, kv_heads, dim, p_len, s_len = 5, 6, 2, 8, 7, q_len + 5
    query = torch.randn(b, heads, q_len, dim)
    key, value = torch.randn(b, kv_heads, s_len, dim), torch.randn(b, kv_heads, s_len, dim)
    prefix = SharedPrefix.one([(torch.randn(1, kv_heads, p_len, dim),
                                torch.randn(1, kv_heads, p_len, dim))],
                              torch.tensor([True, True, False, True, False]))
    # Left padding: row i has i padding columns; queries see their own past only.
    own = torch.ones(b, 1, q_len, s_len, dtype=torch.bool).tril(s_len - q_len)
    for i in range(b):
        own[i, :, :, :i] = False
    out, _ = _cascade(_Module(), query, key, value, own, dim ** -0.5, prefix)
    expected = reference(query, key, value, own, prefix)
    real = own[:, 0].any(-1)  # queries that attend to at least one of their own tokens
    assert torch.allclose(out[real], expected[real], atol=1e-5)
    assert torch.isfinite(out).all()  # padding queries get finite output, never NaN


def test_rows_without_the_prefix_ignore_it():
    torch.manual_seed(1)
    query, key, value = torch.randn(2, 2, 1, 4), torch.randn(2, 1, 3, 4), torch.randn(2, 1, 3, 4)
    big = torch.full((1, 1, 6, 4), 50.0)  # would dominate any row that attended to it
    prefix = SharedPrefix.one([(big, big)], torch.tensor([False, False]))
    out, _ = _cascade(_Module(), query, key, value, None, 0.5, prefix)
    plain = scaled_dot_product_attention(query, key.repeat_interleave(2, 1),
                                         value.repeat_interleave(2, 1), scale=0.5)
    assert torch.allclose(out, plain.transpose(1, 2), atol=1e-6)


@pytest.mark.parametrize("q_len", [1, 4])
def test_rows_on_different_prefixes_attend_to_their_own(q_len):
    """The prefixes of two cells stored one after another: each row attends to its own
    part (or none), in the torch path and in the copied-prefix reference alike."""
    from helpers import two_prefixes

    torch.manual_seed(2)
    b, heads, kv_heads, dim, s_len = 6, 4, 2, 16, q_len + 3
    query = torch.randn(b, heads, q_len, dim)
    key, value = torch.randn(b, kv_heads, s_len, dim), torch.randn(b, kv_heads, s_len, dim)
    kv, starts, lengths = two_prefixes(b, kv_heads, dim, 40)
    prefix = SharedPrefix([kv], starts, lengths)
    assert not prefix.every_row
    own = torch.ones(b, 1, q_len, s_len, dtype=torch.bool).tril(s_len - q_len)
    out, _ = _cascade(_Module(), query, key, value, own, dim ** -0.5, prefix)
    assert torch.allclose(out, reference(query, key, value, own, prefix), atol=1e-5)
    for i in range(b):  # each row alone with only its own prefix: the same attention
        k, v = kv[0][:, :, starts[i]: starts[i] + lengths[i]], kv[1][:, :, starts[i]:
                                                                      starts[i] + lengths[i]]
        alone = SharedPrefix.one([(k, v)], torch.tensor([True]))
        if lengths[i] == 0:
            alone = SharedPrefix.one([(kv[0][:, :, :1], kv[1][:, :, :1])], torch.tensor([False]))
        one, _ = _cascade(_Module(), query[i:i + 1], key[i:i + 1], value[i:i + 1],
                          own[i:i + 1], dim ** -0.5, alone)
        assert torch.allclose(out[i:i + 1], one, atol=1e-5)
