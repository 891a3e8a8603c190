"""MXFP8 training: autograd for linear layers and grouped experts, and converting a model.

Each GEMM quantizes its operands from their high-precision source along its own contraction
dimension (see `mx_reference` for the blockings), never by transposing a quantized tensor:

    forward  Y  = X · Wᵀ     X along K,   W along K
    dgrad    dX = dY · W     dY along N,  W along N
    wgrad    dW = dYᵀ · X    dY along M,  X along M   (tokens; per expert, padded to 32)

The operations run through `MXOps`: the Triton kernels on a CUDA device, the PyTorch
reference elsewhere (on the CPU the interpreter is far too slow to train with; the two agree
to ≥ 80 dB, see tests/kernels). Outputs come back in the input's dtype; the accumulation is
fp32.
"""

from __future__ import annotations

import functools
from types import SimpleNamespace

import torch
from torch import nn

from etude.kernels import mx_reference as ref
from etude.model.model import Transformer
from etude.model.moe import DenseMLP, GroupedExperts

Quantized = tuple[torch.Tensor, torch.Tensor]


@functools.cache
def _triton_kernels() -> SimpleNamespace:
    from etude.kernels.mx_gemm import mx_gemm, mx_grouped_gemm, mx_grouped_wgrad
    from etude.kernels.mx_quantize import mx_quantize, mx_quantize_experts

    return SimpleNamespace(
        quantize=mx_quantize, experts=mx_quantize_experts, gemm=mx_gemm,
        grouped_gemm=mx_grouped_gemm, grouped_wgrad=mx_grouped_wgrad,
    )  # fmt: skip


class MXOps:
    """The MXFP8 operations for tensors on one kind of device: the Triton kernels on CUDA,
    the reference elsewhere. Autocast is off inside the GEMMs: the operands are already
    quantized, and a bf16 recast would change the numerics."""

    def __init__(self, device: torch.device) -> None:
        self.kernels = _triton_kernels() if device.type == "cuda" else None
        self.no_autocast = torch.autocast(device.type, enabled=False)

    def rowwise(self, x: torch.Tensor) -> Quantized:
        if self.kernels:
            return self.kernels.quantize(x, mode="rowwise")
        return ref.quantize_rowwise(x)

    def colwise(self, x: torch.Tensor) -> Quantized:
        if self.kernels:
            return self.kernels.quantize(x, mode="colwise")
        return ref.quantize_colwise(x)

    def experts(self, w: torch.Tensor, along: str) -> Quantized:
        if self.kernels:
            return self.kernels.experts(w, along=along)
        return ref.quantize_experts(w, along)

    def gemm(self, a: Quantized, b: Quantized) -> torch.Tensor:
        with self.no_autocast:
            if self.kernels:
                return self.kernels.gemm(*a, *b, out_dtype=torch.float32)
            return ref.mx_gemm(a, b)

    def grouped_gemm(self, a: Quantized, b: Quantized, offsets: torch.Tensor) -> torch.Tensor:
        with self.no_autocast:
            if self.kernels:
                return self.kernels.grouped_gemm(*a, *b, offsets, out_dtype=torch.float32)
            return ref.mx_grouped_gemm(a, b, offsets)

    def grouped_wgrad(self, dy: torch.Tensor, x: torch.Tensor, offsets: torch.Tensor):
        """Each expert's token group padded to a multiple of 32, then quantized along it."""
        dy_p, padded = ref.pad_groups(dy, offsets)
        x_p, _ = ref.pad_groups(x, offsets)
        dy_t, x_t = self.colwise(dy_p), self.colwise(x_p)
        with self.no_autocast:
            if self.kernels:
                return self.kernels.grouped_wgrad(*dy_t, *x_t, padded)
            return ref.mx_grouped_wgrad(dy_t, x_t, padded)


class Bf16Ops:
    """The same operations with operands rounded to bf16 and fp32 accumulation: what a bf16
    GEMM computes, emulated in fp32 (CPU bf16 matmuls are slow). The baseline MXFP8 training
    is compared against."""

    def __init__(self, device: torch.device) -> None:
        self.no_autocast = torch.autocast(device.type, enabled=False)

    @staticmethod
    def _round(x: torch.Tensor) -> tuple[torch.Tensor, None]:
        return x.to(torch.bfloat16).float(), None

    def rowwise(self, x):
        return self._round(x)

    def colwise(self, x):
        return self._round(x.t())

    def experts(self, w, along):
        return self._round(w if along == "K" else w.transpose(-2, -1))

    def gemm(self, a, b):
        with self.no_autocast:
            return a[0] @ b[0].t()

    def grouped_gemm(self, a, b, offsets):
        with self.no_autocast:
            return torch._grouped_mm(a[0], b[0].transpose(-2, -1).contiguous(), offs=offsets)

    def grouped_wgrad(self, dy, x, offsets):
        with self.no_autocast:
            dy_t, x_t = self.colwise(dy)[0], self.colwise(x)[0]
            return ref.grouped_outer_products(dy_t, x_t, offsets)


_OPS = {"mxfp8": MXOps, "bf16": Bf16Ops}


class _LinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_MK: torch.Tensor, w_NK: torch.Tensor, precision: str) -> torch.Tensor:
        ops = _OPS[precision](x_MK.device)
        ctx.save_for_backward(x_MK, w_NK)
        ctx.precision = precision
        return ops.gemm(ops.rowwise(x_MK), ops.rowwise(w_NK)).to(x_MK.dtype)

    @staticmethod
    def backward(ctx, dy_MN: torch.Tensor):
        x_MK, w_NK = ctx.saved_tensors
        ops = _OPS[ctx.precision](dy_MN.device)
        dy_MN = dy_MN.contiguous()
        dx = ops.gemm(ops.rowwise(dy_MN), ops.colwise(w_NK)).to(x_MK.dtype)
        # wgrad contracts over tokens, quantized in blocks of 32 along them: any token count
        # (a batch of ragged episodes) is padded with zero rows, which add nothing to dW.
        dy_PN, x_PK = _pad_rows(dy_MN), _pad_rows(x_MK.contiguous())
        dw = ops.gemm(ops.colwise(dy_PN), ops.colwise(x_PK)).to(w_NK.dtype)
        return dx, dw, None


def _pad_rows(t: torch.Tensor) -> torch.Tensor:
    missing = -t.shape[0] % ref.BLOCK
    return torch.nn.functional.pad(t, (0, 0, 0, missing)) if missing else t


class _GroupedFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x_TD, w_EFD, offsets, precision: str):
        ops = _OPS[precision](x_TD.device)
        ctx.save_for_backward(x_TD, w_EFD, offsets)
        ctx.precision = precision
        out = ops.grouped_gemm(ops.rowwise(x_TD), ops.experts(w_EFD, "K"), offsets)
        return out.to(x_TD.dtype)

    @staticmethod
    def backward(ctx, dy_TF: torch.Tensor):
        x_TD, w_EFD, offsets = ctx.saved_tensors
        ops = _OPS[ctx.precision](dy_TF.device)
        dy_TF = dy_TF.contiguous()
        dx = ops.grouped_gemm(ops.rowwise(dy_TF), ops.experts(w_EFD, "N"), offsets)
        dw = ops.grouped_wgrad(dy_TF, x_TD, offsets)
        return dx.to(x_TD.dtype), dw.to(w_EFD.dtype), None, None


def mxfp8_grouped_mm(x_TD: torch.Tensor, w_EFD: torch.Tensor, offsets_E: torch.Tensor):
    """The grouped-GEMM entry point's contract (`etude.model.moe.grouped_mm`) in MXFP8."""
    return _GroupedFn.apply(x_TD, w_EFD, offsets_E, "mxfp8")


def bf16_grouped_mm(x_TD: torch.Tensor, w_EFD: torch.Tensor, offsets_E: torch.Tensor):
    return _GroupedFn.apply(x_TD, w_EFD, offsets_E, "bf16")


class MXFP8Linear(nn.Linear):
    """nn.Linear (no bias) whose forward and backward GEMMs run in MXFP8 (or, with
    precision "bf16", in emulated bf16)."""

    precision = "mxfp8"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        y = _LinearFn.apply(x.reshape(-1, shape[-1]), self.weight, self.precision)
        return y.reshape(*shape[:-1], self.out_features)

    @classmethod
    def from_linear(cls, linear: nn.Linear, precision: str = "mxfp8") -> MXFP8Linear:
        if linear.bias is not None:
            raise ValueError("MXFP8Linear has no bias")
        if linear.in_features % ref.BLOCK or linear.out_features % ref.BLOCK:
            raise ValueError("MXFP8 needs both dimensions to be multiples of 32")
        converted = cls.__new__(cls)
        nn.Module.__init__(converted)
        converted.in_features, converted.out_features = linear.in_features, linear.out_features
        converted.weight = linear.weight  # the same parameter: optimizer state is unaffected
        converted.register_parameter("bias", None)
        converted.precision = precision
        return converted


PRECISIONS = ("bf16", "mxfp8")


def set_precision(model: Transformer, precision: str) -> Transformer:
    """Run the model's attention projections, dense MLPs and routed experts in `precision`
    ("mxfp8", or "bf16" emulated in fp32 — the comparison baseline), in place. Embeddings,
    the router and the LM head stay in the model's dtype (the usual recipe: they are small
    and the most sensitive)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    grouped = mxfp8_grouped_mm if precision == "mxfp8" else bf16_grouped_mm
    for module in list(model.modules()):
        if isinstance(module, GroupedExperts):
            module.matmul = grouped
        targets = []
        if hasattr(module, "q_proj"):
            targets = ["q_proj", "k_proj", "v_proj", "o_proj"]
        elif isinstance(module, DenseMLP):
            targets = ["gate_proj", "up_proj", "down_proj"]
        for name in targets:
            layer = getattr(module, name)
            if isinstance(layer, MXFP8Linear):
                layer.precision = precision
            else:
                setattr(module, name, MXFP8Linear.from_linear(layer, precision))
    return model


def export_mxfp8_weights(model: Transformer) -> dict[str, Quantized]:
    """The exact weights the MXFP8 forward multiplies by: each converted weight quantized
    along its contraction dimension (data float8_e4m3fn, scales uint8), by parameter name.
    A sampler that loads these runs the trainer's forward numerics."""
    out: dict[str, Quantized] = {}
    for name, module in model.named_modules():
        if isinstance(module, MXFP8Linear) and module.precision == "mxfp8":
            ops = MXOps(module.weight.device)
            out[f"{name}.weight"] = ops.rowwise(module.weight.detach())
        elif isinstance(module, GroupedExperts) and module.matmul is mxfp8_grouped_mm:
            ops = MXOps(module.gate_proj.device)
            for proj in ("gate_proj", "up_proj", "down_proj"):
                out[f"{name}.{proj}"] = ops.experts(getattr(module, proj).detach(), "K")
    return out
