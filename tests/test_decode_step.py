"""Decode steps of a fused model in kernel calls (decode_step.py): taken where every
layer is fused on panels in float32, the model's own forward not called, four panel
calls a layer (each residual added and the next norm taken as a product is stored), and
greedy replies still `model.generate`'s."""

from __future__ import annotations

import helpers
import pytest
import torch
from helpers import greedy_reference as reference
from test_packed_linear import panel_calls
from test_qwen2 import prompts_on_a_shared_prefix

from evalpipe.backends.local import decode_step
from evalpipe.backends.local.batching import BatchGenerator, PrefixStore

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def llama_64():
    """A tiny Llama with heads of 64 (the rotary kernel takes half-heads of whole
    vectors: 32 floats with AVX-512)."""
    return helpers.tiny_llama(hidden_size=128, intermediate_size=256, heads=2, kv_heads=1)


@pytest.mark.parametrize("build", [llama_64, helpers.tiny_qwen2], ids=["llama", "qwen2"])
def test_decode_steps_run_in_kernel_calls_and_equal_generate(build, monkeypatch, vector_width):
    prompts = prompts_on_a_shared_prefix(8)
    refs = [reference(build(), p, 12, eos=2) for p in prompts]
    model = build()
    gen = BatchGenerator(model, [2], 0, PrefixStore())
    assert gen.decode_step is not None
    forwards = []
    real_forward = model.forward
    monkeypatch.setattr(model, "forward", lambda *a, **k: forwards.append(
        k["input_ids"].shape) or real_forward(*a, **k))
    rows = gen.generate(prompts, max_new_tokens=12, batch_size=3)
    assert [r.tokens for r in rows] == refs
    assert forwards and all(shape[1] > 1 or shape[0] == 1 for shape in forwards)  # prefills
    # One step, spied: per layer q|k|v, o added and normed, gate/up, down added and the
    # next norm taken; the output layer last.
    session = gen.session(max_new_tokens=4, batch_size=8)
    for i, p in enumerate(prompts[:5]):
        session.submit(i, p)
    session.step()  # the admission's prefill and a first step
    calls = panel_calls(monkeypatch)
    session.step()
    width = model.config.hidden_size
    qkv = (model.config.num_attention_heads + 2 * model.config.num_key_value_heads) * \
        (width // model.config.num_attention_heads)
    layer = [(qkv, "y"), (width, "added+norm"), (model.config.intermediate_size, "gated"),
             (width, "added+norm")]
    assert calls == layer * model.config.num_hidden_layers + [(96, "y")]


def test_bfloat16_panels_take_the_kernel_step_too():
    model = helpers.tiny_qwen2(tied=False)
    for p in model.parameters():
        p.data = p.data.bfloat16()
    gen = BatchGenerator(model, [2], 0, PrefixStore())
    assert gen.packed.dtype == torch.bfloat16 and gen.decode_step is not None


def test_other_models_decode_through_their_own_forward():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
                         mlp_bias=True, eos_token_id=2, pad_token_id=0)
    torch.manual_seed(0)
    unfused = LlamaForCausalLM(config).eval()
    prompts = prompts_on_a_shared_prefix(4)
    refs = [reference(unfused, p, 8, eos=2) for p in prompts]
    gen = BatchGenerator(unfused, [2], 0, PrefixStore())
    assert gen.decode_step is None
    assert decode_step.why_not(unfused, torch.float32) == "not every decoder layer is fused"
    assert [r.tokens for r in gen.generate(prompts, max_new_tokens=8, batch_size=4)] == refs
    assert decode_step.why_not(llama_64(), torch.bfloat16) == "it computes in torch.bfloat16"
