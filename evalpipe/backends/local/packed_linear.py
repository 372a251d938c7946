"""Linear layers on weights packed once, for the batching loop on CPU.

A decode step multiplies a few dozen rows by every weight matrix of the model,
and the weights come cold from memory each step. torch's default CPU path
repacks a weight into the blocked layout its kernel wants on every call; with
so few rows that repacking costs about as much as the multiply itself. Packed
once, the linears of a loop shaped like SmolLM2's 30 layers took 106 instead of
163 ms at 64 rows (float32) on oneDNN's packed kernel (docs/speed.md).

float32 weights are packed into panels of outputs (64 with AVX-512, 16 with AVX2:
the kernel's `panel_width`) for the C kernel in `panel_linear.c`, which streams them faster
than oneDNN's kernel at decode sizes (the 30 layers at 16 rows: 22.0 against
27.5 ms, 36.9 against 44.7 on an AVX2 CPU) and is level with it or faster at
prefill sizes. bfloat16 weights, and float32 ones where the kernel cannot be
built (native.py), take oneDNN's packed kernel.

The packed path is on only inside `active()`, which the engine wraps around its
own forward calls, so `model.generate` (the reference the engine's greedy
replies are tested against) still runs the model's stock layers. The kernels
sum in different orders, so logits differ in the last bits, as the stock
kernel's own results differ between batch sizes; greedy replies are tested
identical. Decoder layers of the plain Llama layout get their q/k/v and
gate/up projections fused into one packed product each (`fused_layer`).
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch

from evalpipe.backends.local import fused_layer, native

# Rows from which a product takes the packed weights: below 4, oneDNN's packed kernel is
# no faster than the stock one; the panel kernel is faster from one row (the layers of
# SmolLM2-135M at one row: 16.0 against 36.2 ms).
MIN_ROWS = {"panel": 1, "onednn-packed": 4}
SOURCE = native.KERNELS / "panel_linear.c"


def _panel_kernel() -> ctypes.CDLL | None:
    return native.load(SOURCE)


@functools.cache
def onednn_available(dtype: torch.dtype = torch.float32) -> bool:
    """This torch has oneDNN's packed linear kernels and this CPU runs them for `dtype`
    (bfloat16 packing needs avx512bw/vl/dq or avx_ne_convert: on an AVX2-only CPU oneDNN
    refuses it)."""
    if not (torch.backends.mkldnn.is_available()
            and hasattr(torch.ops.mkldnn, "_reorder_linear_weight")):
        return False
    try:
        pack_onednn(torch.zeros(64, 64, dtype=dtype))
    except RuntimeError:
        return False
    return True


def available(dtype: torch.dtype = torch.float32) -> bool:
    """Weights of `dtype` can be packed here."""
    return kernel_for(dtype) == "panel" or onednn_available(dtype)


@dataclass(frozen=True)
class Panels:
    """A float32 weight [out, in] as [ceil(out / w), in, w] panels (zeros past out), w
    the `panel_width` of `lib`, the kernel library they were packed for (its products
    are the only ones that read this layout)."""

    data: torch.Tensor
    out_features: int
    lib: ctypes.CDLL


@dataclass(frozen=True)
class Gated:
    """The gate and up projections of a SwiGLU MLP, [out, in] each, packed together: for
    the panel kernel each gate panel followed by the up panel of the same outputs, else
    the two stacked for one packed product."""

    data: Panels | torch.Tensor
    out_features: int


def pack_onednn(weight: torch.Tensor) -> torch.Tensor:
    """`weight` [out, in] in oneDNN's blocked layout."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, 64)


def kernel_for(dtype: torch.dtype) -> str:
    """The packed kernel weights of `dtype` run on: "panel" or "onednn-packed"."""
    return "panel" if dtype == torch.float32 and _panel_kernel() is not None \
        else "onednn-packed"


def pack(weight: torch.Tensor) -> Panels | torch.Tensor:
    """`weight` [out, in] packed for `matmul` in the layout of `kernel_for` its dtype."""
    lib = _panel_kernel()
    if weight.dtype != torch.float32 or lib is None:
        return pack_onednn(weight)
    out, inner = weight.shape
    width = int(lib.panel_width())
    padded = torch.nn.functional.pad(weight.detach(), (0, 0, 0, -out % width))
    return Panels(padded.view(-1, width, inner).transpose(1, 2).contiguous(), out, lib)


def pack_gated(gate: torch.Tensor, up: torch.Tensor) -> Gated:
    """`gate` and `up` [out, in] packed for `gated`."""
    if gate.shape != up.shape:
        raise ValueError(f"gate and up projections differ in shape: {tuple(gate.shape)} "
                         f"and {tuple(up.shape)}")
    if kernel_for(gate.dtype) != "panel":
        return Gated(pack_onednn(torch.cat([gate, up]).detach()), gate.shape[0])
    g, u = pack(gate), pack(up)
    assert isinstance(g, Panels) and isinstance(u, Panels)
    return Gated(Panels(torch.stack([g.data, u.data], dim=1).flatten(0, 1), gate.shape[0],
                        g.lib), gate.shape[0])


def gated(x: torch.Tensor, packed: Gated) -> torch.Tensor:
    """silu(x gate^T) * (x up^T), SwiGLU's inner activations: with the panel kernel in one
    pass (the activation applied as each output tile is stored), else one product of the
    stacked weights and torch's SiLU."""
    if not isinstance(packed.data, Panels):
        y = _packed_matmul(x, packed.data, None)
        return torch.nn.functional.silu(y[..., : packed.out_features]).mul_(
            y[..., packed.out_features:])
    return _panel_product(x, packed.data, "panel_swiglu")


def matmul(x: torch.Tensor, packed: Panels | torch.Tensor) -> torch.Tensor:
    """x [..., in] times the weight's transpose, as `F.linear` without a bias: a weight
    packed by `pack` or `pack_onednn`, or a plain [out, in] one (which oneDNN reorders in
    the call)."""
    return _packed_matmul(x, packed, None)


def _packed_matmul(x: torch.Tensor, packed: Panels | torch.Tensor, bias) -> torch.Tensor:
    if isinstance(packed, Panels):
        y = _panel_product(x, packed, "panel_linear")
        return y if bias is None else y + bias
    y = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, x.shape[-1]), packed, bias,
                                           "none", [], "")
    return y.reshape(*x.shape[:-1], y.shape[-1])


def _panel_product(x: torch.Tensor, packed: Panels, function: str) -> torch.Tensor:
    """x [..., in] through the panel kernel's `function` (panel_linear, or panel_swiglu
    on interleaved gate/up panels, which gives one output panel per pair)."""
    rows = x.reshape(-1, x.shape[-1])
    if rows.dtype != torch.float32 or rows.device.type != "cpu":
        raise TypeError(f"panel weights take float32 CPU inputs, got {rows.dtype} on "
                        f"{rows.device}")
    rows = rows.contiguous()
    panels, width = packed.data.shape[0], packed.data.shape[2]  # width: lib.panel_width()
    outs = panels // 2 if function == "panel_swiglu" else panels
    y = torch.empty(rows.shape[0], outs * width, dtype=torch.float32)
    getattr(packed.lib, function)(rows.data_ptr(), rows.shape[0], rows.shape[1],
                           packed.data.data_ptr(), panels, y.data_ptr(), torch.get_num_threads())
    if packed.out_features != y.shape[1]:
        y = y[:, : packed.out_features]
    return y.reshape(*x.shape[:-1], y.shape[-1])


def _packable(model) -> list[torch.nn.Linear]:
    return [m for m in model.modules() if type(m) is torch.nn.Linear
            and m.weight.device.type == "cpu" and m.weight.dtype in (torch.float32, torch.bfloat16)]


def why_not(model, budget_bytes: int) -> str | None:
    """Why `PackedLinears.install` leaves `model`'s linears as they are, before it tries
    the kernel (None: it will try); the run's log and manifest say it."""
    linears = _packable(model)
    if not linears:
        return "no float32 or bfloat16 linear layers on the CPU"
    size = sum(m.weight.numel() * m.weight.element_size() for m in linears)
    if size > budget_bytes:
        return (f"their packed copies would take {size / 2**30:.1f} GiB, over the "
                f"{budget_bytes / 2**30:.1f} GiB allowed (a quarter of the free memory)")
    missing = sorted({str(m.weight.dtype) for m in linears if not available(m.weight.dtype)})
    if missing:
        return f"no packing kernel for {', '.join(missing)} on this CPU"
    return None


class PackedLinears:
    """The model's CPU linear layers, each also holding a packed copy of its weight."""

    def __init__(self) -> None:
        self.on = False
        self.layers = 0
        self.nbytes = 0  # memory the packed copies take
        self.kernel = ""  # "panel" (panel_linear.c) or "onednn-packed"
        self.fused = 0  # decoder layers running fused projections (fused_layer)
        self.unfused: dict[str, int] = {}  # why the other decoder layers do not, counted

    @classmethod
    def install(cls, model, budget_bytes: int) -> PackedLinears | None:
        """Pack every plain float32/bfloat16 `nn.Linear` of `model` on the CPU; None (and
        nothing changed) where no kernel takes their dtype, its result disagrees with the
        stock layer, or the copies would take more than `budget_bytes`."""
        if why_not(model, budget_bytes) is not None:
            return None
        linears = _packable(model)
        size = sum(m.weight.numel() * m.weight.element_size() for m in linears)
        self = cls()
        with torch.inference_mode():
            try:
                first = linears[0]
                probe = torch.randn(8, first.in_features, generator=torch.Generator().manual_seed(0)
                                    ).to(first.weight.dtype)
                got = _packed_matmul(probe, pack(first.weight.detach()), first.bias)
                if not torch.allclose(got.float(), first(probe).float(), rtol=2e-2, atol=1e-3):
                    return None  # a kernel this build gets wrong: keep the stock layers
                # Decoder layers of the Llama and Qwen2 layouts run their q/k/v and gate/up
                # projections as two fused products; their linears need no packed copy of
                # their own.
                fused: set[int] = set()
                for layer in model.modules():
                    if not type(layer).__name__.endswith("DecoderLayer"):
                        continue
                    why = fused_layer.why_not(layer)
                    if why is not None:
                        self.unfused[why] = self.unfused.get(why, 0) + 1
                        continue
                    self.fused += 1
                    fused |= {id(m) for m in fused_layer.fuse(layer, pack, matmul, pack_gated,
                                                              gated, self._packed_for)}
                packs = [(m, pack(m.weight.detach())) for m in linears if id(m) not in fused]
            except RuntimeError:
                return None
        for m, packed in packs:
            m.forward = functools.partial(self._forward, m.forward, packed, m.bias)
        self.layers, self.nbytes = len(linears), size
        self.kernel = kernel_for(first.weight.dtype)
        return self

    def _packed_for(self, x: torch.Tensor) -> bool:
        """Whether `x` takes the packed weights: inside `active()`, with enough rows."""
        return self.on and x.numel() >= MIN_ROWS[self.kernel] * x.shape[-1]

    def _forward(self, stock, packed: torch.Tensor, bias, x: torch.Tensor) -> torch.Tensor:
        if not self._packed_for(x):
            return stock(x)
        return _packed_matmul(x, packed, bias)

    @contextmanager
    def active(self) -> Iterator[None]:
        self.on = True
        try:
            yield
        finally:
            self.on = False
