"""Linear layers on weights packed once into oneDNN's layout, for the batching loop on CPU.

A decode step multiplies a few dozen rows by every weight matrix of the model,
and the weights come cold from memory each step. torch's default CPU path
repacks a weight into the blocked layout its kernel wants on every call; with
so few rows that repacking costs about as much as the multiply itself. Packed
once, the linears of a loop shaped like SmolLM2's 30 layers took 106 instead of
163 ms at 64 rows (float32), a whole decode step of the model 210-228 instead of
236-274 ms, and a prefill-sized multiply (560 x 576 x 1536) ran at 190 instead of
135 GFLOP/s (docs/speed.md).

The packed path is on only inside `active()`, which the engine wraps around its
own forward calls, so `model.generate` (the reference the engine's greedy
replies are tested against) still runs the model's stock layers. The two
kernels sum in different orders, so logits differ in the last bits, as the
stock kernel's own results differ between batch sizes; greedy replies are
tested identical. Decoder layers of the plain Llama layout get their q/k/v and
gate/up projections fused into one packed product each (`fused_layer`).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager

import torch

from evalpipe.backends import fused_layer

MIN_ROWS = 4  # below this many rows the stock kernel is as fast (one-request decode)


def available() -> bool:
    """This torch has oneDNN's packed linear kernels."""
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn,
                                                            "_reorder_linear_weight")


def pack(weight: torch.Tensor) -> torch.Tensor:
    """`weight` [out, in] in oneDNN's blocked layout, for `matmul`."""
    return torch.ops.mkldnn._reorder_linear_weight(weight, 64)


def matmul(x: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    """x [..., in] times the weight's transpose, as `F.linear` without a bias: a weight
    packed by `pack`, or a plain [out, in] one (which oneDNN reorders in the call)."""
    return _packed_matmul(x, packed, None)


def _packed_matmul(x: torch.Tensor, packed: torch.Tensor, bias) -> torch.Tensor:
    y = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, x.shape[-1]), packed, bias,
                                           "none", [], "")
    return y.reshape(*x.shape[:-1], y.shape[-1])


class PackedLinears:
    """The model's CPU linear layers, each also holding a packed copy of its weight."""

    def __init__(self) -> None:
        self.on = False
        self.layers = 0
        self.nbytes = 0  # memory the packed copies take

    @classmethod
    def install(cls, model, budget_bytes: int) -> PackedLinears | None:
        """Pack every plain float32/bfloat16 `nn.Linear` of `model` on the CPU; None (and
        nothing changed) where oneDNN is missing, its result disagrees with the stock
        layer, or the copies would take more than `budget_bytes`."""
        linears = [m for m in model.modules() if type(m) is torch.nn.Linear
                   and m.weight.device.type == "cpu"
                   and m.weight.dtype in (torch.float32, torch.bfloat16)]
        size = sum(m.weight.numel() * m.weight.element_size() for m in linears)
        if not linears or size > budget_bytes or not available():
            return None
        self = cls()
        with torch.inference_mode():
            try:
                first = linears[0]
                probe = torch.randn(8, first.in_features, generator=torch.Generator().manual_seed(0)
                                    ).to(first.weight.dtype)
                got = _packed_matmul(probe, pack(first.weight.detach()), first.bias)
                if not torch.allclose(got.float(), first(probe).float(), rtol=2e-2, atol=1e-3):
                    return None  # a kernel this build gets wrong: keep the stock layers
                # Decoder layers of the Llama layout run their q/k/v and gate/up projections
                # as two fused products; their linears need no packed copy of their own.
                fused = {id(m) for layer in model.modules() if fused_layer.fusable(layer)
                         for m in fused_layer.fuse(layer, pack, matmul, self._packed_for)}
                packs = [(m, pack(m.weight.detach())) for m in linears if id(m) not in fused]
            except RuntimeError:
                return None
        for m, packed in packs:
            m.forward = functools.partial(self._forward, m.forward, packed, m.bias)
        self.layers, self.nbytes = len(linears), size
        return self

    def _packed_for(self, x: torch.Tensor) -> bool:
        """Whether `x` takes the packed weights: inside `active()`, with enough rows."""
        return self.on and x.numel() >= MIN_ROWS * x.shape[-1]

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
