"""The engine's fast path on the Qwen2 layout (q/k/v biases, the output layer tied or
not, seven query heads per key head): fused layers, and greedy float32 replies token for
token those of `model.generate`, with shared prefixes, joining prompts and later turns
that reuse their conversation's cache; and on bfloat16 weights, greedy replies token for
token those of `model.generate` doing the same arithmetic, at every batch size and
vector width."""

from __future__ import annotations

import random

import helpers
import pytest
import torch
from helpers import greedy_reference as reference
from test_packed_linear import panel_calls
from test_turn_reuse import converse

from evalpipe.backends.local import fused_layer, packing
from evalpipe.backends.local.batching import BatchGenerator, PrefixStore, supported

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module", params=[True, False], ids=["tied", "untied"])
def qwen2(request):
    return helpers.tiny_qwen2(tied=request.param)


@pytest.fixture(scope="module")
def engine_qwen2(qwen2):
    """The same weights for the engine, which packs the model it runs (the references
    run on `qwen2`, never packed)."""
    return helpers.tiny_qwen2(tied=qwen2.config.tie_word_embeddings)


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
    model = helpers.tiny_qwen2(tied=qwen2.config.tie_word_embeddings)
    packed = packing.PackedLinears.install(model, 1 << 34)
    assert packed is not None and packed.fused == 2 and packed.unfused == {}
    calls = panel_calls(monkeypatch)
    ids = torch.tensor([[5, 9, 17, 3, 40, 41], [6, 2, 88, 31, 7, 12]])
    with torch.inference_mode():
        assert torch.allclose(model(ids).logits, qwen2(ids).logits, rtol=1e-4, atol=1e-4)
    # Per layer q|k|v (448 + 64 + 64) as one product, o, silu(gate) * up, down; the head.
    assert calls == [(576, "y"), (448, "added+norm"), (256, "gated"), (448, "added")] * 2 + \
        [(96, "y")]


def test_a_qwen2_layer_without_biases_on_some_projections_is_not_fused():
    model = helpers.tiny_qwen2()
    layer = model.model.layers[0]
    layer.self_attn.k_proj.bias = None
    assert fused_layer.why_not(layer) == "only some of its q, k and v projections have biases"


@pytest.mark.parametrize("batch_size", [1, 4, 16])
@pytest.mark.parametrize("reuse", [False, True])
def test_qwen2_replies_equal_generate(qwen2, engine_qwen2, batch_size, reuse):
    prompts = prompts_on_a_shared_prefix()
    refs = [reference(qwen2, p, 16, eos=2) for p in prompts]
    gen = BatchGenerator(engine_qwen2, [2], 0, PrefixStore())
    assert gen.packed is not None and gen.packed.fused == 2
    rows = gen.generate(prompts, max_new_tokens=16, batch_size=batch_size, prefix_reuse=reuse)
    assert [r.tokens for r in rows] == refs
    assert (gen.stats["reused_tokens"] > 0) == reuse


def test_qwen2_prompts_joining_a_running_batch_equal_generate(qwen2, engine_qwen2):
    prompts = prompts_on_a_shared_prefix(8)
    refs = [reference(qwen2, p, 12, eos=2) for p in prompts]
    gen = BatchGenerator(engine_qwen2, [2], 0, PrefixStore())
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


def test_qwen2_later_turns_reuse_their_cache_and_equal_generate(qwen2, engine_qwen2):
    gen = BatchGenerator(engine_qwen2, [2], 0, PrefixStore())
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
    gen = BatchGenerator(model, [2], 0, PrefixStore())  # packs it: references first
    assert gen.packed.fused == 2
    assert [r.tokens for r in gen.generate(prompts, max_new_tokens=12, batch_size=4)] == refs


def bf16_weights(model):
    """`model` with its parameters in bfloat16, as `from_pretrained(dtype=bfloat16)` loads
    them (buffers such as the rotary frequencies stay float32)."""
    for p in model.parameters():
        p.data = p.data.bfloat16()
    return model


def same_arithmetic(model):
    """A float32 `model` that computes what the engine computes on bfloat16 panels: its
    parameters rounded to bfloat16 and every linear's input rounded to bfloat16 (the
    kernel rounds x before it multiplies), everything else float32. Only the order of
    the float32 sums differs from the engine's."""
    for p in model.parameters():
        p.data = p.data.bfloat16().float()
    for m in model.modules():
        if isinstance(m, torch.nn.Linear):
            m.register_forward_pre_hook(lambda _, args: (args[0].bfloat16().float(),))
    return model


# How far apart the reference's two best logits may be where the engine's bfloat16
# reply takes the second. The kernel rounds each linear's input to bfloat16, so a
# float32 difference in the last bits upstream (the attention kernels sum in other orders
# than torch, and by the vector width) can move an input across a rounding boundary: one
# bfloat16 ulp, 2^-8 of it, where float32 reorderings move it by 2^-24. Through the
# remaining layers that moved the logits of the tiny models by up to 1.4e-4 (0.9 logits;
# x86-64-v2, untied); the bound allows seven times that.
NEAR_TIE = 1e-3


def parted_at_near_ties(model, prompts, refs, got, eos: int = 2) -> int:
    """How many replies in `got` part from `refs` (greedy on `model`): each only where the
    reference's best two logits are within NEAR_TIE and `got` took the second."""
    parted = 0
    for prompt, ref, reply in zip(prompts, refs, got):
        if reply == ref:
            continue
        i = next(i for i, (a, b) in enumerate(zip(ref, reply)) if a != b)
        with torch.inference_mode():
            logits = model(torch.tensor([prompt + ref[:i]])).logits[0, -1]
        (first, second), (best, runner_up) = logits.topk(2)
        assert best == ref[i] and runner_up == reply[i], (prompt, ref, reply)
        assert first - second <= NEAR_TIE, (float(first - second), prompt, ref, reply)
        parted += 1
    return parted


@pytest.mark.parametrize("tied", [True, False], ids=["tied", "untied"])
def test_bfloat16_replies_equal_generate_on_the_same_arithmetic(tied, vector_width):
    """On bfloat16 weights the engine computes in float32 around bfloat16 panels; its
    greedy replies equal `model.generate`'s on that arithmetic (`same_arithmetic`), one
    row at a time, 4 or 16 together, with the prefix reused or not, except at a near tie
    (`NEAR_TIE`; at most one of ten replies). Against torch's own bfloat16 `generate`
    (which rounds the residual stream, norms, attention and cache to bfloat16 as well)
    the replies differ where that rounding tips an argmax: docs/speed.md counts them."""
    prompts = prompts_on_a_shared_prefix()
    reference_model = same_arithmetic(helpers.tiny_qwen2(tied=tied))
    refs = [reference(reference_model, p, 16, eos=2) for p in prompts]
    gen = BatchGenerator(bf16_weights(helpers.tiny_qwen2(tied=tied)), [2], 0, PrefixStore())
    assert gen.packed.kernel == "panel" and gen.packed.dtype == torch.bfloat16
    assert gen.dtype == torch.float32  # activations and the key/value cache
    for batch_size, reuse in [(1, True), (4, False), (16, True)]:
        rows = gen.generate(prompts, max_new_tokens=16, batch_size=batch_size,
                            prefix_reuse=reuse)
        got = [r.tokens for r in rows]
        assert parted_at_near_ties(reference_model, prompts, refs, got) <= 1, (batch_size, reuse)


def test_bfloat16_later_turns_equal_generate_on_the_same_arithmetic():
    reference_model = same_arithmetic(helpers.tiny_qwen2(tied=False))
    gen = BatchGenerator(bf16_weights(helpers.tiny_qwen2(tied=False)), [2], 0, PrefixStore())
    asked = converse(gen, 2, batch_size=3)
    refs = [reference(reference_model, prompt, 12, 2) for prompt, _ in asked]
    assert parted_at_near_ties(reference_model, [p for p, _ in asked], refs,
                               [reply for _, reply in asked]) <= 1
    assert gen.stats["turn_reused_tokens"] > 0
