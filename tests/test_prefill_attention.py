"""Long prefill chunks attend through two oneDNN products per row and key head: the
same attention as torch's kernel, finite for a query that may attend to nothing, and
greedy replies of long prompts identical to `model.generate`."""

from __future__ import annotations

import random

import helpers
import pytest
import torch
import torch.nn.functional as F
from helpers import greedy_reference as reference

from evalpipe.backends import packed_linear, prefill_attention
from evalpipe.backends.batching import BatchGenerator, PrefixStore

pytestmark = pytest.mark.skipif(not packed_linear.available(), reason="no oneDNN in this torch")


def _plain(query, key, value, mask, scale):
    groups = query.shape[1] // key.shape[1]
    k, v = key.repeat_interleave(groups, 1), value.repeat_interleave(groups, 1)
    return F.scaled_dot_product_attention(query, k, v, attn_mask=mask, scale=scale).transpose(1, 2)


@pytest.mark.parametrize("rows, heads, kv_heads, q_len, s_len", [
    (1, 9, 3, 64, 64), (3, 9, 3, 70, 300), (2, 4, 4, 96, 130)])
def test_attention_equals_torch_kernel(rows, heads, kv_heads, q_len, s_len):
    torch.manual_seed(rows + q_len)
    dim = 32
    query = torch.randn(rows, heads, q_len, dim)
    key, value = torch.randn(rows, kv_heads, s_len, dim), torch.randn(rows, kv_heads, s_len, dim)
    mask = torch.ones(q_len, s_len, dtype=torch.bool).tril(s_len - q_len)[None, None]
    mask = mask.repeat(rows, 1, 1, 1)
    for r in range(rows):
        mask[r, :, :, : r * 7] = False  # left padding, longer on each row
    assert prefill_attention.takes(query, key, mask)
    got = prefill_attention.attend(query, key, value, mask, dim ** -0.5)
    assert got.shape == (rows, q_len, heads, dim) and got.is_contiguous()
    assert torch.allclose(got, _plain(query, key, value, mask, dim ** -0.5), atol=1e-5)


def test_a_query_that_attends_to_nothing_stays_finite():
    query, key = torch.randn(1, 2, 64, 16), torch.randn(1, 2, 80, 16)
    mask = torch.ones(1, 1, 64, 80, dtype=torch.bool)
    mask[0, 0, :5] = False  # five padding queries with no column at all
    out = prefill_attention.attend(query, key, key, mask, 0.25)
    assert torch.isfinite(out).all()
    assert torch.allclose(out[:, 5:], _plain(query, key, key, mask, 0.25)[:, 5:], atol=1e-5)


def test_short_chunks_and_other_dtypes_stay_with_torch():
    key = torch.randn(1, 2, 80, 16)
    mask = torch.ones(1, 1, 64, 80, dtype=torch.bool)
    assert not prefill_attention.takes(torch.randn(1, 2, 63, 16), key, mask[:, :, :63])
    assert not prefill_attention.takes(torch.randn(1, 2, 64, 16).bfloat16(), key.bfloat16(), mask)
    assert not prefill_attention.takes(torch.randn(1, 2, 64, 16), key, None)


@pytest.mark.usefixtures("one_torch_thread")
def test_long_prompts_equal_generate(monkeypatch):
    """Prompts of 150-260 tokens after a shared 40-token prefix: the prefill takes the
    oneDNN path and every greedy reply equals `model.generate`'s."""
    model = helpers.tiny_llama()
    rng = random.Random(5)
    shared = [rng.randrange(3, 96) for _ in range(40)]
    prompts = [shared + [rng.randrange(3, 96) for _ in range(rng.randrange(150, 260))]
               for _ in range(5)]
    refs = [reference(model, p, 12, -1) for p in prompts]
    calls = []
    attend = prefill_attention.attend
    monkeypatch.setattr(prefill_attention, "attend",
                        lambda *a: calls.append(a[0].shape) or attend(*a))
    gen = BatchGenerator(model, [-1], 0, PrefixStore())
    rows = gen.generate(prompts, max_new_tokens=12, batch_size=5, prefix_reuse=True)
    assert calls, "the long prefill should have taken the oneDNN path"
    assert [r.tokens for r in rows] == refs
