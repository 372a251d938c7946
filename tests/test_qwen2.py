"""The engine's fast path on the Qwen2 layout (q/k/v biases, the output layer tied or
not, seven query heads per key head): fused layers, and greedy float32 replies token for
token those of `model.generate`, with shared prefixes, joining prompts and later turns
that reuse their conversation's cache."""

from __future__ import annotations

import random

import helpers
import pytest
import torch
from helpers import greedy_reference as reference
from test_turn_reuse import converse

from evalpipe.backends.local import fused_layer, packed_linear
from evalpipe.backends.local.batching import BatchGenerator, PrefixStore, supported

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module", params=[True, False], ids=["tied", "untied"])
def qwen2(request):
    return helpers.tiny_qwen2(tied=request.param)


def prompts_on_a_shared_prefix(n: int = 10) -> list[list[int]]:
    """Prompts of different lengths on one 24-token prefix (a cell's system prompt)."""
    rng = random.Random(5)
    head = [rng.randrange(3, 96) for _ in range(24)]
    return [head + [rng.randrange(3, 96) for _ in range(rng.randrange(1, 30))]
            for i in range(n)]


def test_qwen2_layers_are_fused_with_their_biases(qwen2, monkeypatch):
    assert supported(qwen2)
    assert all(fused_layer.why_not(layer) is None for layer in qwen2.model.layers)
    assert qwen2.model.layers[0].self_attn.q_proj.bias is not None
    plain = helpers.tiny_qwen2(tied=qwen2.config.tie_word_embeddings)
    widths = []
    for name in ("_packed_matmul", "gated"):
        real = getattr(packed_linear, name)
        monkeypatch.setattr(packed_linear, name,
                            lambda *a, _f=real: widths.append(_f(*a).shape[-1]) or _f(*a))
    packed = packed_linear.PackedLinears.install(qwen2, budget_bytes=1 << 30)
    assert packed is not None and packed.fused == 2 and packed.unfused == {}
    widths.clear()
    ids = torch.tensor([[5, 9, 17, 3, 40, 41], [6, 2, 88, 31, 7, 12]])
    with torch.inference_mode():
        with packed.active():
            inside = qwen2(ids).logits
        assert torch.allclose(inside, plain(ids).logits, rtol=1e-4, atol=1e-4)
        assert torch.equal(qwen2(ids).logits, plain(ids).logits)  # off: the stock layers
    # Per layer q|k|v (448 + 64 + 64) as one product, o, silu(gate) * up, down; the head.
    assert widths == [576, 448, 256, 448] * 2 + [96]


def test_a_qwen2_layer_without_biases_on_some_projections_is_not_fused():
    model = helpers.tiny_qwen2()
    layer = model.model.layers[0]
    layer.self_attn.k_proj.bias = None
    assert fused_layer.why_not(layer) == "only some of its q, k and v projections have biases"


@pytest.mark.parametrize("batch_size", [1, 4, 16])
@pytest.mark.parametrize("reuse", [False, True])
def test_qwen2_replies_equal_generate(qwen2, batch_size, reuse):
    prompts = prompts_on_a_shared_prefix()
    refs = [reference(qwen2, p, 16, eos=2) for p in prompts]
    gen = BatchGenerator(qwen2, [2], 0, PrefixStore())
    assert gen.packed is not None and gen.packed.fused == 2
    rows = gen.generate(prompts, max_new_tokens=16, batch_size=batch_size, prefix_reuse=reuse)
    assert [r.tokens for r in rows] == refs
    assert (gen.stats["reused_tokens"] > 0) == reuse


def test_qwen2_prompts_joining_a_running_batch_equal_generate(qwen2):
    prompts = prompts_on_a_shared_prefix(8)
    refs = [reference(qwen2, p, 12, eos=2) for p in prompts]
    gen = BatchGenerator(qwen2, [2], 0, PrefixStore())
    session = gen.session(max_new_tokens=12, batch_size=3)
    got = {}
    for i, p in enumerate(prompts[:4]):
        session.submit(i, p)
    steps = 0
    while session.pending:
        got.update(session.step())
        steps += 1
        if steps == 3:  # later prompts join the running batch
            for i, p in enumerate(prompts[4:], start=4):
                session.submit(i, p)
    assert [got[i].tokens for i in range(len(prompts))] == refs


def test_qwen2_later_turns_reuse_their_cache_and_equal_generate(qwen2):
    gen = BatchGenerator(qwen2, [2], 0, PrefixStore())
    asked = converse(gen, 2, batch_size=3)
    assert len(asked) == 18
    for prompt, reply in asked:
        assert reply == reference(qwen2, prompt, 12, 2)
    assert gen.stats["turn_reused_tokens"] > 0


def test_a_llama_with_attention_biases_is_fused_and_equals_generate():
    """Llama's `attention_bias` gives q, k, v and o biases: the same fused path."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(
        vocab_size=96, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=1, attention_bias=True, eos_token_id=2,
        pad_token_id=0)).eval()
    with torch.no_grad():  # nonzero, so that a product without them would show
        for layer in model.model.layers:
            for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
                getattr(layer.self_attn, name).bias.normal_(0.0, 0.5)
    prompts = prompts_on_a_shared_prefix(6)
    refs = [reference(model, p, 12, eos=2) for p in prompts]
    gen = BatchGenerator(model, [2], 0, PrefixStore())
    assert gen.packed.fused == 2
    assert [r.tokens for r in gen.generate(prompts, max_new_tokens=12, batch_size=4)] == refs
