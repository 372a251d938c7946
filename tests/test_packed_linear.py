"""The engine's linears on packed oneDNN weights: on only inside the engine's forward,
close to the stock layer, and greedy replies still those of `model.generate`."""

from __future__ import annotations

import pytest
import torch

from evalpipe.backends.local import fused_layer, packed_linear
from evalpipe.backends.local.batching import BatchGenerator, PrefixStore
from evalpipe.backends.local.packed_linear import PackedLinears
from tests import helpers

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(),
                                reason="this torch build has no oneDNN")


@helpers.needs_compiler
def test_panel_kernel_builds_here():
    """Wherever a compiler is, whatever the vector width (it once built for AVX-512 alone,
    so AVX2 machines silently ran oneDNN)."""
    lib = packed_linear._panel_kernel()
    assert lib is not None
    assert lib.panel_width() in (8, 16, 64)  # SSE or NEON, AVX2, AVX-512
    assert packed_linear.kernel_for(torch.float32) == "panel"


def test_packed_layers_are_close_and_only_on_inside_active():
    model = helpers.tiny_llama()
    plain = helpers.tiny_llama()  # same seed: the same weights, never packed
    packed = PackedLinears.install(model, budget_bytes=1 << 30)
    assert packed is not None and packed.layers == 2 * 7 + 1  # 7 per layer + the head
    layer, reference = model.model.layers[0].mlp.down_proj, plain.model.layers[0].mlp.down_proj
    x = torch.randn(16, 128)
    with torch.inference_mode():
        assert torch.equal(layer(x), reference(x))  # off: the stock kernel, bit for bit
        with packed.active():
            inside = layer(x)
        assert not packed.on
        assert torch.allclose(inside, reference(x), rtol=1e-5, atol=1e-6)
        ids = torch.tensor([[5, 9, 17, 3, 40]])
        assert torch.equal(model(ids).logits, plain(ids).logits)  # generate's path untouched


def test_llama_layers_run_fused_projections_inside_active(monkeypatch):
    model = helpers.tiny_llama()
    plain = helpers.tiny_llama()
    widths = []  # output width of every packed product
    for name in ("_packed_matmul", "gated"):
        real = getattr(packed_linear, name)
        monkeypatch.setattr(packed_linear, name,
                            lambda *a, _f=real: widths.append(_f(*a).shape[-1]) or _f(*a))
    packed = PackedLinears.install(model, budget_bytes=1 << 30)
    widths.clear()  # the install's own probe
    assert all(fused_layer.fusable(layer) for layer in model.model.layers)
    ids = torch.tensor([[5, 9, 17, 3, 40, 41], [6, 2, 88, 31, 7, 12]])
    with torch.inference_mode():
        with packed.active():
            inside = model(ids).logits
        assert torch.allclose(inside, plain(ids).logits, rtol=1e-4, atol=1e-5)
        widths_inside = list(widths)
        assert torch.equal(model(ids).logits, plain(ids).logits)  # off: the stock layers
    # Per layer q|k|v (64 + 32 + 32) as one product, o, silu(gate) * up (128) as one
    # gated product, down; the head last.
    assert widths_inside == [128, 64, 128, 64] * 2 + [96]
    assert widths == widths_inside


def test_layers_of_another_layout_keep_their_own_projections():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, mlp_bias=True)
    model = LlamaForCausalLM(config).eval()
    assert fused_layer.why_not(model.model.layers[0]) == \
        "its MLP's gate and up projections have biases"
    stock = model.model.layers[0].forward
    packed = PackedLinears.install(model, budget_bytes=1 << 30)
    assert packed is not None and model.model.layers[0].forward == stock
    assert packed.fused == 0 and packed.unfused == {
        "its MLP's gate and up projections have biases": 1}
    x = torch.randn(8, 64)
    up = model.model.layers[0].mlp.up_proj
    with torch.inference_mode(), packed.active():
        assert torch.allclose(up(x), torch.nn.functional.linear(x, up.weight, up.bias),
                              rtol=1e-5, atol=1e-6)


def test_nothing_is_packed_beyond_the_memory_budget():
    model = helpers.tiny_llama()
    before = model.model.layers[0].mlp.up_proj.forward
    assert PackedLinears.install(model, budget_bytes=1024) is None
    assert model.model.layers[0].mlp.up_proj.forward == before
    assert "over the 0.0 GiB allowed" in packed_linear.why_not(model, budget_bytes=1024)
    assert packed_linear.why_not(model, budget_bytes=1 << 30) is None


def test_the_log_says_why_a_model_keeps_its_stock_linears():
    from evalpipe.backends.transformers_backend import engine_line

    line = engine_line("m", {"path": "batching loop", "why": "full caches", "linear": "stock",
                             "linear_why": "their packed copies would take 6.6 GiB"})
    assert line.endswith("; linears stock, no fused layers (their packed copies would take "
                         "6.6 GiB)")


def test_engine_forward_runs_on_packed_layers_and_equals_generate(monkeypatch):
    model = helpers.tiny_llama()
    gen = BatchGenerator(model, [7], 0, PrefixStore())
    assert gen.packed is not None
    calls = []
    real = packed_linear._packed_matmul
    monkeypatch.setattr(packed_linear, "_packed_matmul",
                        lambda *a: calls.append(a[0].numel() // a[0].shape[-1]) or real(*a))
    torch.manual_seed(1)
    prompts = [torch.randint(3, 96, (n,)).tolist() for n in (5, 9, 14, 30, 31, 44)]
    rows = gen.generate(prompts, max_new_tokens=16, batch_size=6)
    assert calls and min(calls) >= packed_linear.MIN_ROWS[gen.packed.kernel]  # prefill, decode
    for prompt, row in zip(prompts, rows):
        assert row.tokens == helpers.greedy_reference(model, prompt, 16, 7)


def test_embedded_model_replies_equal_generate_one_at_a_time(default_backend):
    backend = default_backend
    assert backend.batcher.packed is not None
    assert backend.describe()["linear_kernel"] == "panel"
    tok = backend.tokenizer
    prompts = [tok(backend.render([{"role": "user", "content": f"What is {a} times {b}?"}],
                                  None))["input_ids"] for a, b in [(3, 7), (12, 11), (45, 6),
                                                                   (8, 125), (99, 99), (7, 0)]]
    eos = backend.eos_ids[0]  # the model's only end token
    assert backend.eos_ids == [eos]
    rows = backend.batcher.generate(prompts, max_new_tokens=32, batch_size=8)
    for prompt, row in zip(prompts, rows):
        assert row.tokens == helpers.greedy_reference(backend.model, prompt, 32, eos)


@pytest.mark.parametrize("rows, inner, out", [(1, 64, 128), (5, 37, 96), (13, 576, 200),
                                              (64, 100, 64)])
def test_panel_product_equals_linear(rows, inner, out, vector_width):
    """Panels of the kernel's width for any output width (zeros past it), rows in tiles
    of six and a remainder, an inner size that is no whole number of vectors, and a
    bias."""
    torch.manual_seed(rows + out)
    weight, bias = torch.randn(out, inner), torch.randn(out)
    x = torch.randn(2, rows, inner + 3)[:, :, :inner]  # strided, as a sliced activation
    packed = packed_linear.pack(weight)
    assert isinstance(packed, packed_linear.Panels)
    got = packed_linear._packed_matmul(x, packed, bias)
    assert got.shape == (2, rows, out)
    assert torch.allclose(got, torch.nn.functional.linear(x, weight, bias), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("rows, inner", [(1000, 576), (700, 1536)])
def test_large_products_in_chunks_are_the_same_sums(rows, inner, vector_width):
    """Inputs over 2 MB are multiplied in chunks of rows (prefill sizes); each output is
    the same sum in the same order as in a small product, bit for bit, the last chunk's
    missing tiles included (1,000 rows: 167 tiles in chunks of 3)."""
    torch.manual_seed(rows)
    weight = torch.randn(200, inner)
    x = torch.randn(rows, inner)
    packed = packed_linear.pack(weight)
    whole = packed_linear.matmul(x, packed)
    in_pieces = torch.cat([packed_linear.matmul(x[i: i + 60], packed) for i in range(0, rows, 60)])
    assert torch.equal(whole, in_pieces)
    assert torch.allclose(whole, x @ weight.t(), rtol=1e-5, atol=1e-3)


@pytest.mark.parametrize("rows, inner, out", [(1, 64, 128), (7, 37, 96), (1000, 576, 200)])
def test_gated_product_is_silu_of_gate_times_up(rows, inner, out, vector_width):
    """The gate/up product with SwiGLU's activation applied in the kernel equals
    torch's silu(x gate^T) * (x up^T), for output widths that are no whole number of
    panels, a remainder of rows and a prefill-sized input taken in chunks."""
    torch.manual_seed(rows)
    gate, up = torch.randn(out, inner) * 0.2, torch.randn(out, inner) * 0.2
    x = torch.randn(rows, inner)
    packed = packed_linear.pack_gated(gate, up)
    assert isinstance(packed.data, packed_linear.Panels)
    got = packed_linear.gated(x, packed)
    assert got.shape == (rows, out)
    want = torch.nn.functional.silu(x @ gate.t()) * (x @ up.t())
    assert torch.allclose(got, want, rtol=1e-5, atol=1e-3)  # sums in another order


def test_gated_activation_holds_at_the_extremes(vector_width):
    """silu(g) * u where the exponential would overflow or underflow, at zero and at
    inf/nan, with gate = up = the input (one input, weight 1)."""
    g = torch.tensor([-1e4, -100.0, -87.0, -20.0, -1e-3, -0.0, 0.0, 1e-3, 1.0, 20.0, 87.0,
                      100.0, 1e4, 3e38, float("inf"), float("nan")])
    got = packed_linear.gated(g[:, None], packed_linear.pack_gated(torch.ones(16, 1),
                                                                   torch.ones(16, 1)))[:, 0]
    want = torch.nn.functional.silu(g) * g
    finite = want.isfinite() & (want.abs() > 1e-30)
    assert torch.allclose(got[finite], want[finite], rtol=1e-6, atol=0)
    assert (got[:2] == 0).all()  # e^-x past float's range: silu is ~ -0, times u
    assert got[13:15].isinf().all() and got[15].isnan()  # 3e38^2 overflows; inf stays


def test_other_dtypes_and_no_compiler_take_onednn(monkeypatch):
    if not packed_linear.onednn_available():
        pytest.skip("no oneDNN in this torch")
    weight = torch.randn(96, 64)
    if packed_linear.onednn_available(torch.bfloat16):  # not on an AVX2-only CPU
        assert not isinstance(packed_linear.pack(weight.bfloat16()), packed_linear.Panels)
    monkeypatch.setenv("EVALPIPE_NATIVE_KERNELS", "0")
    packed = packed_linear.pack(weight)
    assert not isinstance(packed, packed_linear.Panels)
    x = torch.randn(8, 64)
    assert torch.allclose(packed_linear.matmul(x, packed), x @ weight.t(), atol=1e-5)
    gate, up = weight[:48], weight[48:]
    both = packed_linear.pack_gated(gate, up)
    assert not isinstance(both.data, packed_linear.Panels)
    assert torch.allclose(packed_linear.gated(x, both),
                          torch.nn.functional.silu(x @ gate.t()) * (x @ up.t()), atol=1e-5)
