"""Linear layers on weights packed once, for the batching loop on CPU.

A decode step multiplies a few dozen rows by every weight matrix of the model,
and the weights come cold from memory each step. torch's default CPU path
repacks a weight into the blocked layout its kernel wants on every call; with
so few rows that repacking costs about as much as the multiply itself.

float32 and bfloat16 weights are packed into panels of outputs (64 with AVX-512,
16 with AVX2: the kernel's `panel_width`) for the C kernel in `panel_linear.c`,
which streams them faster than oneDNN's packed kernel at decode sizes and is
level with it or faster at prefill sizes. bfloat16 panels are half the bytes to
read; their products take float32 inputs (rounded to bfloat16 inside the
kernel) and give float32 outputs, so a model on bfloat16 panels computes
everything else (norms, residuals, rotary embedding, attention, its key/value
cache) in float32 (`Engine arithmetic` in docs/speed.md). Where the kernel
cannot be built (native.py), weights take oneDNN's packed kernel and the model
keeps its own dtype throughout.

A packed weight replaces the model's (`PackedLinear` holds only its panels;
packing.py packs a whole model). The kernels sum in other orders than torch's,
so logits differ in the last bits, as the stock kernel's own results differ
between batch sizes; greedy replies are tested identical.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

import torch

from evalpipe.backends.local import native

SOURCE = native.KERNELS / "panel_linear.c"
PANEL_DTYPES = (torch.float32, torch.bfloat16)
# Where no kernel is built to ask, the widest panels a build makes (AVX-512).
WIDEST_PANEL = 64


def panel_kernel() -> ctypes.CDLL | None:
    """The built panel kernel library, or None where it cannot be had (native.py)."""
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


def kernel_for(dtype: torch.dtype) -> str:
    """The packed kernel weights of `dtype` run on: "panel", "onednn-packed" or "stock"
    (nothing here packs them)."""
    if dtype in PANEL_DTYPES and panel_kernel() is not None:
        return "panel"
    return "onednn-packed" if onednn_available(dtype) else "stock"


def available(dtype: torch.dtype = torch.float32) -> bool:
    """Weights of `dtype` can be packed here."""
    return kernel_for(dtype) != "stock"


def bf16_path() -> str:
    """How the panel kernel multiplies bfloat16 here: "dot" (the CPU's AVX512_BF16
    dot-product instruction) or "widened" (pairs widened to float32), for the manifest."""
    lib = panel_kernel()
    return "dot" if lib is not None and lib.bf16_dot() else "widened"


@dataclass(frozen=True)
class Panels:
    """A weight [out, in] packed for the panel kernel of `lib` (its products are the only
    ones that read this layout), w = its `panel_width`: float32 as [ceil(out / w), in, w];
    bfloat16 as [ceil(out / w), ceil(in / 2), w, 2], the inputs in pairs. Zeros past
    `out` and `in`."""

    data: torch.Tensor
    out_features: int
    in_features: int
    lib: ctypes.CDLL

    @property
    def nbytes(self) -> int:
        return self.data.numel() * self.data.element_size()


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


def panel_shape(out: int, inner: int, dtype: torch.dtype, width: int) -> tuple[int, ...]:
    """The shape of the panels of a weight [out, inner] of `dtype` (see `Panels`)."""
    panels = -(-out // width)
    if dtype == torch.bfloat16:
        return (panels, -(-inner // 2), width, 2)
    return (panels, inner, width)


def _panels_into(data: torch.Tensor, weight: torch.Tensor) -> None:
    """Write `weight` [out, in] into zeroed panels `data` (`panel_shape`): strided copies,
    no transposed copy of the whole weight on the way."""
    out, inner = weight.shape
    width = data.shape[2]  # both layouts keep the outputs of a panel in dimension 2
    full = out // width
    parts = [(data[:full], weight[: full * width].view(full, width, inner))]
    if out % width:
        parts.append((data[full:][:, :, : out % width], weight[full * width:][None]))
    for dst, src in parts:  # src [panels, outputs, inner]
        if weight.dtype != torch.bfloat16:
            dst.copy_(src.transpose(1, 2))
            continue
        even = inner - inner % 2
        n, w = src.shape[:2]
        dst[:, : even // 2].copy_(src[:, :, :even].reshape(n, w, even // 2, 2)
                                  .permute(0, 2, 1, 3))
        if inner % 2:  # the last pair's second weight stays zero
            dst[:, even // 2, :, 0].copy_(src[:, :, even])


def pack(weight: torch.Tensor) -> Panels | torch.Tensor:
    """`weight` [out, in] packed for `matmul` in the layout of `kernel_for` its dtype."""
    lib = panel_kernel()
    if weight.dtype not in PANEL_DTYPES or lib is None:
        return pack_onednn(weight)
    weight = weight.detach()
    out, inner = weight.shape
    data = torch.zeros(panel_shape(out, inner, weight.dtype, int(lib.panel_width())),
                       dtype=weight.dtype)
    _panels_into(data, weight)
    return Panels(data, out, inner, lib)


def pack_gated(gate: torch.Tensor, up: torch.Tensor) -> Gated:
    """`gate` and `up` [out, in] packed for `gated`."""
    if gate.shape != up.shape:
        raise ValueError(f"gate and up projections differ in shape: {tuple(gate.shape)} "
                         f"and {tuple(up.shape)}")
    if kernel_for(gate.dtype) != "panel":
        return Gated(pack_onednn(torch.cat([gate, up]).detach()), gate.shape[0])
    lib = panel_kernel()
    assert lib is not None
    out, inner = gate.shape
    shape = panel_shape(out, inner, gate.dtype, int(lib.panel_width()))
    data = torch.zeros((shape[0], 2, *shape[1:]), dtype=gate.dtype)  # gate, up per panel
    _panels_into(data[:, 0], gate.detach())
    _panels_into(data[:, 1], up.detach())
    return Gated(Panels(data.flatten(0, 1), out, inner, lib), out)


def gated(x: torch.Tensor, packed: Gated) -> torch.Tensor:
    """silu(x gate^T) * (x up^T), SwiGLU's inner activations: with the panel kernel in one
    pass (the activation applied as each output tile is stored), else one product of the
    stacked weights and torch's SiLU."""
    if not isinstance(packed.data, Panels):
        y = _packed_matmul(x, packed.data, None)
        return torch.nn.functional.silu(y[..., : packed.out_features]).mul_(
            y[..., packed.out_features:])
    return _panel_product(x, packed.data, packed.out_features, gated=True)


def matmul(x: torch.Tensor, packed: Panels | torch.Tensor) -> torch.Tensor:
    """x [..., in] times the weight's transpose, as `F.linear` without a bias: a weight
    packed by `pack` or `pack_onednn`, or a plain [out, in] one (which oneDNN reorders in
    the call)."""
    return _packed_matmul(x, packed, None)


def product(x: torch.Tensor, packed: Panels | torch.Tensor, bias=None) -> torch.Tensor:
    """x [..., in] times the weight's transpose plus `bias` (added as the panel kernel
    stores each output), as `F.linear`."""
    return _packed_matmul(x, packed, bias)


def add_linear(h: torch.Tensor, x: torch.Tensor, linear: torch.nn.Module,
               norm: tuple[torch.Tensor, float] | None = None) -> torch.Tensor | None:
    """`add_product` through a layer's linear module: its packed weight where it is a
    PackedLinear, else its own forward."""
    if isinstance(linear, PackedLinear):
        return add_product(h, x, linear.packed, linear.bias, norm)
    h += linear(x)
    return None if norm is None else rms_norm(h, *norm)


def add_product(h: torch.Tensor, x: torch.Tensor, packed: Panels | torch.Tensor, bias=None,
                norm: tuple[torch.Tensor, float] | None = None) -> torch.Tensor | None:
    """h += x W^T (+ bias), h being the residual stream [..., out] (contiguous float32),
    updated in place; with `norm` (an RMS norm's weight and epsilon) the rows of the new
    h normed, else None. On panels one kernel call: the sum added as each tile is stored,
    the norm taken after; each value rounds as torch's separate product, addition and
    norm round it (the norm's mean in another order)."""
    if isinstance(packed, Panels) and h.is_contiguous() and h.dtype == torch.float32:
        rows = x.reshape(-1, x.shape[-1])
        normed = torch.empty_like(h) if norm is not None else None
        _call_panels(rows, packed, h.view(-1, h.shape[-1]), bias=bias, add=True,
                     norm=None if norm is None else (norm[0], norm[1], normed))
        return normed
    h += _packed_matmul(x, packed, bias)
    return None if norm is None else rms_norm(h, *norm)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """The RMS norm of x's last dimension times `weight` (the Llama and Qwen2 norms): in the
    panel kernel's library where it is built and x is float32, else torch's."""
    lib = panel_kernel()
    if lib is None or x.dtype != torch.float32 or weight.dtype != torch.float32 \
            or x.device.type != "cpu":
        return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps)
    rows = x.reshape(-1, x.shape[-1]).contiguous()
    out = torch.empty(x.shape, dtype=torch.float32)
    lib.rms_norm(rows.data_ptr(), rows.shape[0], rows.shape[1], weight.contiguous().data_ptr(),
                 eps, out.data_ptr(), torch.get_num_threads())
    return out


def argmax(logits: torch.Tensor) -> torch.Tensor:
    """Each row's greedy token: torch.argmax's choice (the first of equal values, a NaN
    the largest), in one vectorised pass of the kernel library where it is built."""
    lib = panel_kernel()
    if lib is None or logits.dtype != torch.float32 or logits.device.type != "cpu":
        return logits.argmax(dim=-1)
    rows = logits.reshape(-1, logits.shape[-1]).contiguous()
    out = torch.empty(rows.shape[0], dtype=torch.int64)
    lib.argmax_rows(rows.data_ptr(), rows.shape[0], rows.shape[1], out.data_ptr(),
                    torch.get_num_threads())
    return out.view(logits.shape[:-1])


def _packed_matmul(x: torch.Tensor, packed: Panels | torch.Tensor, bias) -> torch.Tensor:
    if isinstance(packed, Panels):
        return _panel_product(x, packed, packed.out_features, bias=bias)
    y = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, x.shape[-1]), packed, bias,
                                           "none", [], "")
    return y.reshape(*x.shape[:-1], y.shape[-1])


def _panel_product(x: torch.Tensor, packed: Panels, out: int, gated: bool = False,
                   bias=None) -> torch.Tensor:
    """x [..., in] float32 through the panel kernel: the product (+ bias), or on
    interleaved gate/up panels SwiGLU's; [..., out]."""
    rows = x.reshape(-1, x.shape[-1])
    y = torch.empty(rows.shape[0], out, dtype=torch.float32)
    _call_panels(rows, packed, y, gated=gated, bias=bias)
    return y.view(*x.shape[:-1], out)


def _call_panels(rows: torch.Tensor, packed: Panels, y: torch.Tensor, gated: bool = False,
                 bias=None, add: bool = False, norm=None) -> None:
    """The kernel's `panel_product` on rows [m, in] into y [m, out] (see panel_linear.c)."""
    if rows.dtype != torch.float32 or rows.device.type != "cpu":
        raise TypeError(f"panel weights take float32 CPU inputs, got {rows.dtype} on "
                        f"{rows.device}")
    rows = rows.contiguous()
    if bias is not None:
        bias = bias.float().contiguous()
    weight, eps, normed = norm if norm is not None else (None, 0.0, None)
    failed = packed.lib.panel_product(
        rows.data_ptr(), rows.shape[0], rows.shape[1], packed.data.data_ptr(),
        packed.data.shape[0], int(packed.data.dtype == torch.bfloat16), y.data_ptr(),
        y.shape[1], int(gated), 0 if bias is None else bias.data_ptr(), int(add),
        0 if weight is None else weight.data_ptr(), eps,
        0 if normed is None else normed.data_ptr(), torch.get_num_threads())
    if failed:
        raise MemoryError(f"panel_product: no memory for the bfloat16 copy of {rows.shape[0]} "
                          "input rows")


class PackedLinear(torch.nn.Module):
    """An `nn.Linear` whose weight lives only in its packed form."""

    def __init__(self, packed: Panels | torch.Tensor, bias: torch.Tensor | None,
                 in_features: int, out_features: int):
        super().__init__()
        self.packed = packed
        self.bias = None if bias is None else torch.nn.Parameter(bias.detach(),
                                                                 requires_grad=False)
        self.in_features, self.out_features = in_features, out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _packed_matmul(x, self.packed, self.bias)


def packed_bytes(packed) -> int:
    """Memory a packed weight takes (Panels, Gated or a oneDNN tensor)."""
    if isinstance(packed, Gated):
        return packed_bytes(packed.data)
    if isinstance(packed, Panels):
        return packed.nbytes
    return packed.numel() * packed.element_size()
