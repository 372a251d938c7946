"""Packing a model for the engine: its decoder layers fused, its other linears on
packed weights, in place of the model's own, and the memory that takes.

The packed copy replaces the model's weight: each linear becomes a
`packed_linear.PackedLinear` holding only its panels, and the decoder layers
that `fused_layer` takes hold their q/k/v and gate/up panels instead of those
five linears. A model's resident size is then its packed size: beside its own
weights, the 1.5B's packed copies (5.7 GiB in float32) were over the quarter of
the free memory packing allowed itself on a 24 GB machine, and it ran without
fused layers. The model is the engine's from then on: the backend packs only
where the batching loop runs it, and `model.generate`, the reference the engine
is tested against, runs on a model that was never packed.

On bfloat16 panels the model computes in float32 around them (`_float32_around`):
the residual stream, norms, rotary embedding, attention and key/value cache keep
float32's 24 bits, and the products' inputs are rounded to bfloat16 in the kernel.
"""

from __future__ import annotations

import torch

from evalpipe.backends.local import allocator, fused_layer
from evalpipe.backends.local.packed_linear import (
    WIDEST_PANEL,
    PackedLinear,
    Panels,
    available,
    kernel_for,
    pack,
    packed_bytes,
    panel_kernel,
    panel_shape,
    product,
)

# Packing needs at most this share of the free memory beyond the model's own weights:
# the copies that stay beside them and the largest one being made (the rest is for
# key/value caches and activations).
MEMORY_SHARE = 0.25
# The model attribute that holds its PackedLinears once packed.
PACKED_ATTRIBUTE = "_evalpipe_packed"


def is_packed(model) -> bool:
    """`model`'s linears were replaced by packed copies (it is an engine's now)."""
    return getattr(model, PACKED_ATTRIBUTE, None) is not None


def _packable(model) -> list[tuple[str, torch.nn.Linear]]:
    return [(name, m) for name, m in model.named_modules() if type(m) is torch.nn.Linear
            and m.weight.device.type in ("cpu", "meta")
            and m.weight.dtype in (torch.float32, torch.bfloat16)]


def memory_needed(model) -> int:
    """Bytes packing `model`'s linears needs beyond its own weights, from their shapes
    alone (a model on the meta device will do): the panels that stay beside a weight the
    model keeps (an output layer tied to the embedding) and the largest panels being
    made while the weight they replace is still there (the gate/up pair of a layer, the
    output layer), padding included."""
    lib = panel_kernel()
    width = int(lib.panel_width()) if lib is not None else WIDEST_PANEL

    def size(weight: torch.Tensor, copies: int = 1) -> int:
        out, inner = weight.shape
        shape = panel_shape(out, inner, weight.dtype, width)
        return copies * int(torch.Size(shape).numel()) * weight.dtype.itemsize

    kept = _held_elsewhere(model)
    stays, largest = 0, 0
    for _, m in _packable(model):
        one = size(m.weight)
        if id(m.weight) in kept:
            stays += one
        largest = max(largest, one)
    for layer in model.modules():
        if type(layer).__name__.endswith("DecoderLayer") and fused_layer.fusable(layer):
            largest = max(largest, size(layer.mlp.gate_proj.weight, copies=2))
    return stays + largest


def _held_elsewhere(model) -> set[int]:
    """Ids of the parameters that modules other than linears hold (a tied output layer's
    weight is the embedding's)."""
    return {id(p) for m in model.modules() if type(m) is not torch.nn.Linear
            for p in m.parameters(recurse=False)}


def why_not(model, free_bytes: int) -> str | None:
    """Why `PackedLinears.install` leaves `model`'s linears as they are, before it tries
    the kernel (None: it will try), given `free_bytes` of free memory; the run's log and
    manifest say it. Decided from the linears' shapes and dtypes alone."""
    linears = _packable(model)
    if not linears:
        return "no float32 or bfloat16 linear layers on the CPU"
    needed, budget = memory_needed(model), int(free_bytes * MEMORY_SHARE)
    if needed > budget:
        return (f"packing needs {needed / 2**30:.1f} GiB beside the weights, over the "
                f"{budget / 2**30:.1f} GiB allowed (a quarter of the free memory)")
    missing = sorted({str(m.weight.dtype) for _, m in linears if not available(m.weight.dtype)})
    if missing:
        return f"no packing kernel for {', '.join(missing)} on this CPU"
    return None


def _replace(model, name: str, module: torch.nn.Module | None) -> None:
    parent, _, attr = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, attr, module)


class PackedLinears:
    """The model's CPU linear layers, replaced by their packed copies."""

    def __init__(self) -> None:
        self.layers = 0
        self.nbytes = 0  # memory the packed copies take
        self.kernel = ""  # "panel" (panel_linear.c) or "onednn-packed"
        self.dtype = torch.float32  # the weights' dtype
        # What the model computes in between the products: float32 around bfloat16
        # panels, else the model's own dtype.
        self.activations = torch.float32
        self.fused = 0  # decoder layers running fused projections (fused_layer)
        self.unfused: dict[str, int] = {}  # why the other decoder layers do not, counted
        self.released = 0  # bytes of a mapped weights file let go as the copies were made

    @classmethod
    def install(cls, model, free_bytes: int) -> PackedLinears | None:
        """Replace every plain float32/bfloat16 `nn.Linear` of `model` on the CPU by its
        packed copy, layer by layer (each weight freed as its copy is made); None, and
        nothing changed, where `why_not` says so or the packed product disagrees with the
        stock layer on a probe. On bfloat16 panels the rest of the model is widened to
        float32 (`_float32_around`)."""
        done = getattr(model, PACKED_ATTRIBUTE, None)
        if done is not None:  # another engine on the same model packed it already
            return done
        if why_not(model, free_bytes) is not None:
            return None
        linears = _packable(model)
        first = linears[0][1]
        self = cls()
        self.dtype = first.weight.dtype
        self.kernel = kernel_for(self.dtype)
        with torch.inference_mode():
            probe = torch.randn(8, first.in_features,
                                generator=torch.Generator().manual_seed(0))
            try:
                packed = pack(first.weight)
                inputs = probe if isinstance(packed, Panels) else probe.to(self.dtype)
                got = product(inputs, packed, first.bias)
            except RuntimeError:
                return None
            want = torch.nn.functional.linear(probe.to(self.dtype), first.weight, first.bias)
            if not torch.allclose(got.float(), want.float(), rtol=2e-2, atol=1e-2):
                return None  # a kernel this build gets wrong: keep the stock layers
            del packed, got
            self.layers = len(linears)
            del linears, first
            # A weight read from a mapped file leaves its pages resident when it is freed:
            # they are dropped as its copy is made, so the file is not counted beside the
            # packed copy (the 1.5B's 7.1 GB in float32).
            mappings, held = allocator.file_mappings(), _held_elsewhere(model)

            def let_go(weights: list[torch.Tensor]) -> None:
                for weight in weights:
                    if id(weight) not in held:
                        self.released += allocator.release_file_pages(weight, mappings)

            # Decoder layers of the Llama and Qwen2 layouts run their q/k/v and gate/up
            # projections as two fused products and drop those five linears.
            for layer in model.modules():
                if not type(layer).__name__.endswith("DecoderLayer"):
                    continue
                why = fused_layer.why_not(layer)
                if why is not None:
                    self.unfused[why] = self.unfused.get(why, 0) + 1
                    continue
                self.fused += 1
                weights = [m.weight for m in fused_layer.covered(layer)]
                self.nbytes += fused_layer.fuse(layer)
                let_go(weights)
            for name, m in _packable(model):
                packed = pack(m.weight)
                self.nbytes += packed_bytes(packed)
                _replace(model, name, PackedLinear(packed, m.bias, m.in_features,
                                                   m.out_features))
                let_go([m.weight])
                m.weight = None  # freed here unless another module holds it (tied)
            if self.kernel == "panel" and self.dtype == torch.bfloat16:
                _float32_around(model)
            else:
                self.activations = self.dtype
        _own_memory(model)  # outside inference mode: the copies stay usable under autograd
        setattr(model, PACKED_ATTRIBUTE, self)
        return self


def _own_memory(model) -> None:
    """Copy what is left of the model (the embedding, the norms, the biases) into the
    process's own memory. A safetensors file is loaded as a mapping of the whole file,
    and one tensor left viewing it keeps every page read while packing resident: the
    1.5B's 3.6 GB file in bfloat16 (7.1 GB in float32) stayed counted beside its
    packed copy until the run's end (docs/speed.md)."""
    with torch.no_grad():
        for module in model.modules():
            for _, tensor in [*module.named_parameters(recurse=False),
                              *module.named_buffers(recurse=False)]:
                if tensor is not None:
                    tensor.data = tensor.data.clone()


def _float32_around(model) -> None:
    """Around bfloat16 panels the model computes in float32: its remaining floating
    parameters and buffers (norms, biases, the rotary frequencies) are widened, exactly,
    and the embedding, kept in bfloat16 (the largest tensor left: 0.47 GB of the 1.5B's),
    hands its rows on as float32."""
    embedding = model.get_input_embeddings()
    for module in model.modules():
        if module is embedding:
            continue
        for _, tensor in [*module.named_parameters(recurse=False),
                          *module.named_buffers(recurse=False)]:
            if tensor is not None and tensor.dtype == torch.bfloat16:
                tensor.data = tensor.data.float()
    if embedding is not None:
        embedding.register_forward_hook(lambda module, args, out: out.float())
