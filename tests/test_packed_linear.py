"""The engine's linears on packed weights: the packed copy replaces the model's weight,
products in float32 and bfloat16 against torch at every vector width (with bounds
derived from the arithmetic), and greedy replies still those of `model.generate` on a
model that was never packed."""

from __future__ import annotations

import gc
from pathlib import Path

import pytest
import torch

from evalpipe.backends.local import fused_layer, packed_linear, packing
from evalpipe.backends.local.batching import BatchGenerator, PrefixStore
from evalpipe.backends.local.packed_linear import PackedLinear
from evalpipe.backends.local.packing import PackedLinears
from tests import helpers

pytestmark = pytest.mark.skipif(not torch.backends.mkldnn.is_available(),
                                reason="this torch build has no oneDNN")

FREE = 1 << 34  # free memory the tiny models are packed in


@helpers.needs_compiler
def test_panel_kernel_builds_here():
    """Wherever a compiler is, whatever the vector width (it once built for AVX-512 alone,
    so AVX2 machines silently ran oneDNN), for float32 and bfloat16 weights."""
    lib = packed_linear.panel_kernel()
    assert lib is not None
    assert lib.panel_width() in (8, 16, 64)  # SSE or NEON, AVX2, AVX-512
    assert packed_linear.kernel_for(torch.float32) == "panel"
    assert packed_linear.kernel_for(torch.bfloat16) == "panel"


def test_the_packed_copy_replaces_the_weights():
    """No linear keeps its weight beside its panels: the fused layers hold q/k/v and
    gate/up as two packed products, o and down and the output layer are PackedLinears,
    and what stays of the model is the embedding, the norms and the panels."""
    model = helpers.tiny_llama()
    plain = helpers.tiny_llama()  # same seed: the same weights, never packed
    linear_bytes = sum(m.weight.numel() * 4 for m in model.modules()
                       if type(m) is torch.nn.Linear)
    packed = PackedLinears.install(model, FREE)
    assert packed is not None and packed.layers == 2 * 7 + 1  # 7 per layer + the head
    assert not any(type(m) is torch.nn.Linear for m in model.modules())
    assert sum(type(m) is PackedLinear for m in model.modules()) == 2 * 2 + 1
    for layer in model.model.layers:
        assert layer.self_attn.q_proj is None and layer.mlp.gate_proj is None
    left = {name for name, _ in model.named_parameters()}
    assert left == {"model.embed_tokens.weight", "model.norm.weight",
                    *(f"model.layers.{i}.{n}.weight" for i in range(2)
                      for n in ("input_layernorm", "post_attention_layernorm"))}
    # The panels are the weights, padded to whole panels of the kernel's width.
    assert linear_bytes <= packed.nbytes <= linear_bytes + 64 * 128 * 4 * 16
    assert PackedLinears.install(model, FREE) is packed  # a second engine reuses it
    ids = torch.tensor([[5, 9, 17, 3, 40]])
    with torch.inference_mode():
        assert torch.allclose(model(ids).logits, plain(ids).logits, rtol=1e-4, atol=1e-5)


@pytest.mark.skipif(not Path("/proc/self/maps").exists(), reason="needs Linux's /proc")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_packed_model_keeps_nothing_of_its_weights_file(tmp_path, dtype):
    """A safetensors file is loaded as a mapping of the whole file; one tensor left viewing
    it (the embedding) kept every page read while packing resident beside the packed copy
    (the 1.5B's 3.6 GB in bfloat16, counted in the sizes job's peak). Once packed, the
    model's process holds no mapping of the file."""
    from transformers import AutoModelForCausalLM

    helpers.tiny_llama().to(dtype).save_pretrained(tmp_path)
    weights = str(tmp_path / "model.safetensors")
    model = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=dtype)

    def mapped() -> bool:
        gc.collect()
        return any(line.rstrip().endswith(weights) for line in open("/proc/self/maps"))

    assert mapped()  # loading maps the file: what this test is about
    plain = helpers.tiny_llama().to(dtype)
    assert PackedLinears.install(model, FREE) is not None
    assert not mapped()
    ids = torch.tensor([[5, 9, 17, 3, 40]])
    with torch.inference_mode():  # the copies are the same values
        assert torch.allclose(model(ids).logits.float(), plain(ids).logits.float(),
                              rtol=2e-2, atol=2e-2)


def _resident_of(path: str) -> int:
    """Bytes of the file at `path` resident in this process's mappings of it."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if line[0] in "0123456789abcdef" and "-" in line.split(maxsplit=1)[0]:
            inside = line.rstrip().endswith(path)  # a mapping's header line
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1]) * 1024
    return total


@pytest.mark.skipif(not Path("/proc/self/smaps").exists(), reason="needs Linux's /proc")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_packing_lets_go_of_each_weights_file_page_as_its_copy_is_made(tmp_path, dtype,
                                                                      monkeypatch):
    """Every page of the mapped file a weight was read from stayed resident while the
    packed copy grew beside it (the 1.5B's 7.1 GB file in float32, counted in the sizes
    job's peak). As packing reaches the output layer, the last linear it copies, the
    pages of the layers copied before it are no longer the process's."""
    from transformers import AutoModelForCausalLM

    plain = helpers.tiny_llama(hidden_size=256, intermediate_size=1024).to(dtype)
    plain.save_pretrained(tmp_path)
    weights = str(tmp_path / "model.safetensors")
    model = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=dtype)
    size = Path(weights).stat().st_size
    layer_bytes = sum(p.numel() * p.element_size() for p in model.model.layers.parameters())
    assert layer_bytes > 0.9 * size  # the layers are nearly all of the file
    with torch.no_grad():
        [p.sum() for p in model.parameters()]  # every page read, as packing reads them
    assert _resident_of(weights) > 0.9 * size
    seen = []
    real = packing.pack

    def spy(weight):
        if weight is model.lm_head.weight:
            seen.append(_resident_of(weights))
        return real(weight)

    monkeypatch.setattr(packing, "pack", spy)
    packed = PackedLinears.install(model, FREE)
    assert packed is not None and packed.fused == 2
    assert seen and seen[0] < size - 0.9 * layer_bytes
    assert packed.released > 0.9 * layer_bytes
    ids = torch.tensor([[5, 9, 17, 3, 40]])
    with torch.inference_mode():  # what packing read is what the file holds
        assert torch.allclose(model(ids).logits.float(), plain(ids).logits.float(),
                              rtol=2e-2, atol=2e-2)


def panel_calls(monkeypatch) -> list[tuple[int, str]]:
    """Every call of the panel kernel, as (output width, what it stored: "y", "gated" or
    "added" into the residual stream, "+norm" where it normed the rows after)."""
    calls = []
    real = packed_linear._call_panels

    def spy(rows, packed, y, gated=False, bias=None, add=False, norm=None):
        kind = "gated" if gated else "added" if add else "y"
        calls.append((y.shape[1], kind + ("+norm" if norm is not None else "")))
        return real(rows, packed, y, gated=gated, bias=bias, add=add, norm=norm)

    monkeypatch.setattr(packed_linear, "_call_panels", spy)
    return calls


def test_llama_layers_run_fused_projections(monkeypatch):
    model = helpers.tiny_llama()
    plain = helpers.tiny_llama()
    assert all(fused_layer.fusable(layer) for layer in model.model.layers)
    packed = PackedLinears.install(model, FREE)
    assert packed.fused == 2
    calls = panel_calls(monkeypatch)
    ids = torch.tensor([[5, 9, 17, 3, 40, 41], [6, 2, 88, 31, 7, 12]])
    with torch.inference_mode():
        assert torch.allclose(model(ids).logits, plain(ids).logits, rtol=1e-4, atol=1e-5)
    # Per layer q|k|v (64 + 32 + 32) as one product; o added into the residual stream and
    # the post-attention norm taken in the same call; silu(gate) * up (128) as one gated
    # product; down added into the residual stream; the head last.
    assert calls == [(128, "y"), (64, "added+norm"), (128, "gated"), (64, "added")] * 2 + \
        [(96, "y")]


def test_layers_of_another_layout_keep_their_own_projections():
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                         num_attention_heads=4, num_key_value_heads=2, mlp_bias=True)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    up = model.model.layers[0].mlp.up_proj
    weight, bias = up.weight.detach().clone(), up.bias.detach().clone()
    assert fused_layer.why_not(model.model.layers[0]) == \
        "its MLP's gate and up projections have biases"
    stock = model.model.layers[0].forward
    packed = PackedLinears.install(model, FREE)
    assert packed is not None and model.model.layers[0].forward == stock
    assert packed.fused == 0 and packed.unfused == {
        "its MLP's gate and up projections have biases": 1}
    x = torch.randn(8, 64)
    packed_up = model.model.layers[0].mlp.up_proj
    assert type(packed_up) is PackedLinear
    with torch.inference_mode():
        assert torch.allclose(packed_up(x), torch.nn.functional.linear(x, weight, bias),
                              rtol=1e-5, atol=1e-6)


def test_nothing_is_packed_beyond_the_memory_budget():
    model = helpers.tiny_llama()
    before = model.model.layers[0].mlp.up_proj
    assert PackedLinears.install(model, free_bytes=1024) is None
    assert model.model.layers[0].mlp.up_proj is before and before.weight is not None
    assert "over the 0.0 GiB allowed" in packing.why_not(model, free_bytes=1024)
    assert packing.why_not(model, free_bytes=FREE) is None


# Qwen2.5-Coder-1.5B-Instruct as the GGUF file evalpipe converts carries it (config.json of
# the converted folder): its own output matrix, not tied to the embedding.
QWEN_1_5B = {"hidden_size": 1536, "intermediate_size": 8960, "num_hidden_layers": 28,
             "num_attention_heads": 12, "num_key_value_heads": 2, "vocab_size": 151936,
             "tie_word_embeddings": False, "max_position_embeddings": 32768,
             "rms_norm_eps": 1e-6, "rope_theta": 1000000.0}
GIB = 2**30


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_1_5b_takes_the_packed_path_on_a_24_gb_machine(dtype):
    """The 1.5B's architecture, built on the meta device from its config (nothing
    allocated): on a 24 GiB machine holding the loaded model, 2 GiB for the system and
    the rest free, packing is not refused for memory. Before the packed copy replaced
    the weights, its copies (5.7 GiB in float32) were over the quarter of the free
    memory allowed, and it ran without fused layers."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    with torch.device("meta"):
        model = Qwen2ForCausalLM(Qwen2Config(**QWEN_1_5B)).to(dtype)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    assert sum(p.numel() for p in model.parameters()) == 1_777_088_000  # as models.py says
    free = 24 * GIB - weights - 2 * GIB
    assert packing.why_not(model, free) is None, packing.why_not(model, free)
    # What packing needs beside the weights: the largest copy being made, the output
    # layer's (151,936 x 1,536), well under a quarter of the free memory.
    needed = packing.memory_needed(model)
    assert needed == 151936 * 1536 * dtype.itemsize
    assert needed < free * packing.MEMORY_SHARE


def test_a_tied_output_layer_keeps_its_panels_beside_the_embedding():
    tied = helpers.tiny_qwen2(tied=True)
    untied = helpers.tiny_qwen2(tied=False)
    lib = packed_linear.panel_kernel()
    width = lib.panel_width() if lib is not None else packed_linear.WIDEST_PANEL
    head = -(-96 // width) * width * 448 * 4  # the output layer's panels, float32
    assert packing.memory_needed(tied) - packing.memory_needed(untied) == head
    assert packing.memory_needed(untied) >= head


def test_the_log_says_why_a_model_keeps_its_stock_linears():
    from evalpipe.backends.transformers_backend import engine_line

    line = engine_line("m", {"path": "batching loop", "why": "full caches", "linear": "stock",
                             "linear_why": "packing needs 6.6 GiB beside the weights"})
    assert line.endswith("; linears stock, no fused layers (packing needs 6.6 GiB beside "
                         "the weights)")


def test_engine_forward_runs_on_packed_layers_and_equals_generate(monkeypatch):
    model = helpers.tiny_llama()
    reference = helpers.tiny_llama()  # never packed
    gen = BatchGenerator(model, [7], 0, PrefixStore())
    assert gen.packed is not None
    calls = []
    real = packed_linear._packed_matmul
    monkeypatch.setattr(packed_linear, "_packed_matmul",
                        lambda *a: calls.append(a[0].numel() // a[0].shape[-1]) or real(*a))
    torch.manual_seed(1)
    prompts = [torch.randint(3, 96, (n,)).tolist() for n in (5, 9, 14, 30, 31, 44)]
    rows = gen.generate(prompts, max_new_tokens=16, batch_size=6)
    assert calls and min(calls) >= 1  # prefill, then decode steps of every size
    for prompt, row in zip(prompts, rows):
        assert row.tokens == helpers.greedy_reference(reference, prompt, 16, 7)


@pytest.mark.slow
def test_embedded_model_replies_equal_generate_one_at_a_time(default_backend):
    from transformers import AutoModelForCausalLM

    backend = default_backend
    assert backend.batcher.packed is not None
    assert backend.describe()["linear_kernel"] == "panel"
    reference = AutoModelForCausalLM.from_pretrained(backend.path).eval()  # never packed
    tok = backend.tokenizer
    prompts = [tok(backend.render([{"role": "user", "content": f"What is {a} times {b}?"}],
                                  None))["input_ids"] for a, b in [(3, 7), (12, 11), (45, 6),
                                                                   (8, 125), (99, 99), (7, 0)]]
    eos = backend.eos_ids[0]  # the model's only end token
    assert backend.eos_ids == [eos]
    rows = backend.batcher.generate(prompts, max_new_tokens=32, batch_size=8)
    for prompt, row in zip(prompts, rows):
        assert row.tokens == helpers.greedy_reference(reference, prompt, 32, eos)


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


U32 = 2.0**-24  # float32's unit roundoff (24 significant bits)
U16 = 2.0**-8  # bfloat16's (8 significant bits)


def bf16_bounds(x: torch.Tensor, weight: torch.Tensor):
    """What a bfloat16 product must meet: (the exact sums of the rounded operands in
    float64, the bound of the kernel's error against them, the bound against torch's
    bfloat16 F.linear).

    The kernel rounds x to bfloat16 (to nearest even, as torch) and multiplies it by the
    bfloat16 weights: each product of two 8-bit significands fits float32's 24 bits, so
    it is exact, and only the float32 sums round. Any order of K additions is within
    (K - 1) u32 sum|x_k w_k| of the exact sum (the recursive summation bound; a pair
    summed inside the dot-product instruction is two such additions). torch's bfloat16
    linear accumulates in float32 too (its own order: the same bound) and rounds its
    output to bfloat16 (half an ulp: u16 |y|), so the two differ by at most
    2 (K - 1) u32 sum|x w| + u16 |y| (|y| taken with u16 of slack for that rounding)."""
    xr, wr = x.bfloat16().double(), weight.bfloat16().double()
    exact = xr @ wr.t()
    magnitude = xr.abs() @ wr.abs().t()
    k = x.shape[-1]
    own = (k - 1) * U32 * magnitude
    return exact, own, 2 * own + U16 * (1 + U16) * exact.abs()


@pytest.mark.parametrize("rows, inner, out", [(1, 64, 128), (5, 37, 96), (13, 576, 200),
                                              (64, 100, 64), (700, 1536, 200)])
def test_bfloat16_panel_product_meets_its_bound(rows, inner, out, vector_width):
    """bfloat16 panels at every vector width (the dot-product instruction where the CPU
    has AVX512_BF16, widened pairs elsewhere): odd inner sizes (a pair half zero), output
    widths that are no whole number of panels, prefill sizes taken in chunks; against
    the exact sums of the rounded operands and against torch's bfloat16 F.linear, within
    the bounds `bf16_bounds` derives."""
    torch.manual_seed(rows + inner)
    weight, x = torch.randn(out, inner), torch.randn(rows, inner)
    packed = packed_linear.pack(weight.bfloat16())
    assert isinstance(packed, packed_linear.Panels) and packed.data.dtype == torch.bfloat16
    got = packed_linear.matmul(x, packed)
    assert got.shape == (rows, out) and got.dtype == torch.float32
    exact, own, against_torch = bf16_bounds(x, weight)
    assert ((got.double() - exact).abs() <= own).all()
    torch_bf16 = torch.nn.functional.linear(x.bfloat16(), weight.bfloat16()).double()
    assert ((got.double() - torch_bf16).abs() <= against_torch).all()
    # The bound is not loose: rounding x to bfloat16 alone is far outside it.
    unrounded = x.double() @ weight.bfloat16().double().t()
    assert ((unrounded - exact).abs() > own).any()


def test_bfloat16_products_do_not_depend_on_the_rows_beside_them(vector_width):
    """Each output is the same sum in the same order whatever the number of rows and
    however a large input is chunked, so a row's bfloat16 product (and greedy reply)
    does not depend on the batch: the reason bfloat16 replies on oneDNN's kernels
    differed between batched and one-at-a-time runs."""
    torch.manual_seed(3)
    weight = torch.randn(200, 1536).bfloat16()
    x = torch.randn(1000, 1536)
    packed = packed_linear.pack(weight)
    whole = packed_linear.matmul(x, packed)
    for rows in (1, 5, 60):
        assert torch.equal(whole[:rows], packed_linear.matmul(x[:rows], packed))
    assert torch.equal(whole, torch.cat([packed_linear.matmul(x[i: i + 60], packed)
                                         for i in range(0, 1000, 60)]))


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


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows, inner, out", [(1, 64, 128), (7, 37, 96), (1000, 576, 200)])
def test_gated_product_is_silu_of_gate_times_up(rows, inner, out, dtype, vector_width):
    """The gate/up product with SwiGLU's activation applied in the kernel equals
    torch's silu(x gate^T) * (x up^T), for output widths that are no whole number of
    panels, a remainder of rows and a prefill-sized input taken in chunks; on bfloat16
    panels, torch's on the bfloat16 operands in float64 (the activation's own error, an
    ulp or so of float32, is within the products' bound)."""
    torch.manual_seed(rows)
    gate, up = torch.randn(out, inner) * 0.2, torch.randn(out, inner) * 0.2
    x = torch.randn(rows, inner)
    packed = packed_linear.pack_gated(gate.to(dtype), up.to(dtype))
    assert isinstance(packed.data, packed_linear.Panels)
    got = packed_linear.gated(x, packed)
    assert got.shape == (rows, out)
    if dtype == torch.float32:
        want = torch.nn.functional.silu(x @ gate.t()) * (x @ up.t())
        assert torch.allclose(got, want, rtol=1e-5, atol=1e-3)  # sums in another order
        return
    g, g_err, _ = bf16_bounds(x, gate)
    u, u_err, _ = bf16_bounds(x, up)
    want = torch.nn.functional.silu(g) * u
    # |silu'| <= 1.1, so silu(g) moves by at most 1.1 g_err; the product by that times |u|
    # plus |silu(g)| u_err; then a few float32 roundings of the result.
    slack = 1.1 * g_err * u.abs() + torch.nn.functional.silu(g).abs() * u_err + \
        8 * U32 * want.abs() + 1e-30
    assert ((got.double() - want).abs() <= slack).all()


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


def test_bfloat16_rounding_of_the_inputs_is_torchs(vector_width):
    """The kernel rounds x to bfloat16 as torch does: to nearest even, ties included,
    NaN kept and infinities kept (a weight of 1 passes each rounded input through)."""
    one = packed_linear.pack(torch.ones(1, 1, dtype=torch.bfloat16))
    ties = torch.tensor([1.0 + 2**-8, 1.0 + 3 * 2**-8, 1.0 + 2**-9, -(1.0 + 2**-8), 3.0e38,
                         float("inf"), float("-inf"), 1.0e-40])
    got = packed_linear.matmul(ties[:, None], one)[:, 0]
    want = ties.bfloat16().float()
    assert torch.equal(got[:7], want[:7])
    # a denormal input may be flushed to zero by the dot-product instruction
    assert float(got[7]) in (float(want[7]), 0.0)
    nan = packed_linear.matmul(torch.tensor([[float("nan")]]), one)
    assert nan.isnan().all()


def test_without_a_compiler_weights_take_onednn(monkeypatch):
    if not packed_linear.onednn_available():
        pytest.skip("no oneDNN in this torch")
    weight = torch.randn(96, 64)
    monkeypatch.setenv("EVALPIPE_NATIVE_KERNELS", "0")
    assert packed_linear.kernel_for(torch.float32) == "onednn-packed"
    packed = packed_linear.pack(weight)
    assert not isinstance(packed, packed_linear.Panels)
    x = torch.randn(8, 64)
    assert torch.allclose(packed_linear.matmul(x, packed), x @ weight.t(), atol=1e-5)
    gate, up = weight[:48], weight[48:]
    both = packed_linear.pack_gated(gate, up)
    assert not isinstance(both.data, packed_linear.Panels)
    assert torch.allclose(packed_linear.gated(x, both),
                          torch.nn.functional.silu(x @ gate.t()) * (x @ up.t()), atol=1e-5)
    # bfloat16 weights there: the model's own dtype throughout, on oneDNN where it packs
    model = helpers.tiny_llama()
    for p in model.parameters():
        p.data = p.data.bfloat16()
    packed_model = PackedLinears.install(model, FREE)
    if packed_linear.onednn_available(torch.bfloat16):
        assert packed_model.kernel == "onednn-packed"
        assert packed_model.activations == torch.bfloat16
        assert model.model.norm.weight.dtype == torch.bfloat16
    else:  # an AVX2-only CPU: oneDNN refuses bfloat16, the stock layers stay
        assert packed_model is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("rows, inner, out", [(1, 64, 128), (7, 37, 96), (700, 1536, 200)])
def test_a_product_added_into_the_residual_stream_then_normed(rows, inner, out, dtype,
                                                              vector_width):
    """o and down add their products into the residual stream as they store them (with
    a bias where the layer has one) and the next norm is taken in the same call: the
    stream equals torch's h + (x W^T + b) bit for bit on float32 panels (the sum of the
    product rounds once, then the bias, then the addition, as torch's passes round), and
    the normed rows equal the model's RMS norm within float32's rounding of a mean."""
    torch.manual_seed(rows + out)
    weight, bias = torch.randn(out, inner).to(dtype), torch.randn(out)
    x, h = torch.randn(rows, inner), torch.randn(rows, out)
    norm = torch.randn(out).abs() + 0.5
    packed = packed_linear.pack(weight)
    stream = h.clone()
    normed = packed_linear.add_product(stream, x, packed, bias, norm=(norm, 1e-6))
    want = h + packed_linear.product(x, packed, bias)  # the product alone, then torch's add
    assert torch.equal(stream, want)
    model_norm = want * torch.rsqrt(want.pow(2).mean(-1, keepdim=True) + 1e-6) * norm
    # The mean of squares sums in another order: each output within a few float32 ulps.
    assert torch.allclose(normed, model_norm, rtol=8 * U32 * 16, atol=0)
    assert packed_linear.add_product(stream, x, packed) is None  # no norm asked for


@pytest.mark.parametrize("rows, width", [(1, 576), (5, 1000), (64, 37)])
def test_rms_norm_is_the_models(rows, width, vector_width):
    torch.manual_seed(width)
    x, weight = torch.randn(rows, width) * 3, torch.randn(width)
    got = packed_linear.rms_norm(x, weight, 1e-5)
    want = torch.nn.functional.rms_norm(x, (width,), weight, 1e-5)
    # mean(x^2) over `width` terms in another order: within width u32 relative (the
    # recursive summation bound), which the reciprocal square root halves.
    assert torch.allclose(got, want, rtol=width * U32, atol=1e-30)


def test_greedy_choice_is_torchs_argmax(vector_width):
    """The first of equal largest values, a NaN counting as the largest, -inf rows, rows
    shorter than a vector and the tail past the last whole vector."""
    torch.manual_seed(0)
    logits = torch.randn(9, 151_937)
    logits[1, 70_000] = logits[1, 140_000] = logits[1].max() + 1  # a tie: the first
    logits[2, 151_936] = 1e9  # in the tail
    logits[3, 5] = float("nan")
    logits[3, 90_000] = float("nan")
    logits[4] = float("-inf")
    logits[5, :] = 0.0
    logits[6, 17] = float("inf")
    logits[7, 0] = 1e9  # the very first
    assert torch.equal(packed_linear.argmax(logits), logits.argmax(dim=-1))
    short = torch.tensor([[0.5, 2.0, 2.0], [float("nan"), 1.0, 3.0]])
    assert torch.equal(packed_linear.argmax(short), short.argmax(dim=-1))
