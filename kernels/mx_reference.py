"""MXFP8 numerics in plain PyTorch: the definition the Triton kernels are tested against.

OCP Microscaling (MX) v1.0, MXFP8 (E4M3):

- a block is 32 consecutive elements along the contraction dimension of a GEMM;
- each element is an E4M3 float (max ±448, no infinities, NaN kept);
- each block has one shared E8M0 scale stored as a uint8 byte b meaning 2^(b − 127); byte
  255 is NaN.

Scale rules (the exponent e of a block whose largest magnitude is `amax`):

- RCEIL (default): e = ceil(log2(amax / 448)), the smallest power of two that brings every
  element inside ±448 — what cuBLAS, TransformerEngine and torchao's MoE recipe use.
- FLOOR (OCP's rule): e = floor(log2(amax)) − 8 (8 is E4M3's largest exponent); elements
  above 448 · 2^e then saturate.

Both are computed from the bits of amax (exact, no rounding of amax / 448): with
amax = 1.m · 2^E, RCEIL is E − 8, plus one when 1.m > 1.75 (448 = 1.75 · 2^8). The byte
is clamped to 0..254. An all-zero block gets byte 0; a block holding NaN or ±Inf gets 255.
torch's own cast to float8_e8m0fnu rounds to nearest, which is neither rule, so it is not
used.

Element cast: round-to-nearest-even of x · 2^−e, saturated to ±448, NaN kept. x · 2^−e is
exact in fp32 (2^−e is a normal fp32 for every byte a finite block can get: 0..247). In a
block with byte 255 the elements are cast unscaled (x · 1): the NaN scale voids them anyway,
but the bytes are defined so kernels can be compared bit for bit.

Layouts (X is [M, K], scales uint8):

- rowwise (1×32, along the last dim): data [M, K] float8_e4m3fn, scales [M, K/32];
- colwise (32×1, along the first dim), written transposed: data [K, M], scales [K, M/32] —
  i.e. `quantize_rowwise(X.T)`;
- 3D expert weights W [E, N, K]: along K as rowwise per expert; along N written transposed
  ([E, K, N], scales [E, K, N/32]).

GEMM blockings (Y = X · Wᵀ with X [M, K], W [N, K]): forward quantizes X and W along K;
dgrad dX = dY · W quantizes dY and W along N; wgrad dW = dYᵀ · X quantizes dY and X along M.
Each quantization starts from the high-precision tensor; a quantized tensor is never
transposed.
"""

from __future__ import annotations

from enum import StrEnum

import torch

BLOCK = 32
E4M3_MAX = 448.0
E4M3_EMAX = 8
SCALE_NAN = 255
_EXPONENT_MASK = 0xFF
_MANTISSA_MASK = 0x7FFFFF
_MANTISSA_OF_1_75 = 0x600000  # 1.75 = 448 / 2^8


class ScaleRule(StrEnum):
    RCEIL = "rceil"
    FLOOR = "floor"


def scale_bytes(amax: torch.Tensor, rule: ScaleRule = ScaleRule.RCEIL) -> torch.Tensor:
    """E8M0 scale bytes (uint8) of blocks with largest magnitudes `amax` (any float dtype;
    NaN where a block holds a NaN)."""
    bits = amax.float().view(torch.int32)
    exponent = (bits >> 23) & _EXPONENT_MASK  # biased; amax ≥ 0 so the sign bit is 0
    biased = exponent - E4M3_EMAX  # = (E − 8) + 127
    if rule == ScaleRule.RCEIL:
        biased = biased + ((bits & _MANTISSA_MASK) > _MANTISSA_OF_1_75).to(torch.int32)
    biased = biased.clamp(0, 254)
    biased = torch.where(exponent == 0, 0, biased)  # zero or subnormal amax
    biased = torch.where(exponent == _EXPONENT_MASK, SCALE_NAN, biased)  # NaN or Inf
    return biased.to(torch.uint8)


def scale_values(scales: torch.Tensor) -> torch.Tensor:
    """2^(b − 127) as fp32 (NaN for 255), built from bits: exact for b in 1..254; b = 0
    (2^−127) is an fp32 subnormal and built as one too."""
    b = scales.to(torch.int32)
    normal = (b << 23).view(torch.float32)
    values = torch.where(b == 0, torch.tensor(2.0**-127), normal)
    return torch.where(b == SCALE_NAN, torch.tensor(float("nan")), values)


def _blocks(x: torch.Tensor) -> torch.Tensor:
    if x.shape[-1] % BLOCK:
        raise ValueError(f"the blocked dimension ({x.shape[-1]}) must be a multiple of {BLOCK}")
    return x.reshape(*x.shape[:-1], x.shape[-1] // BLOCK, BLOCK)


def quantize_rowwise(
    x: torch.Tensor, rule: ScaleRule = ScaleRule.RCEIL
) -> tuple[torch.Tensor, torch.Tensor]:
    """Blocks of 32 along the last dimension: (float8_e4m3fn data shaped like x, uint8
    scales [..., K/32])."""
    blocks = _blocks(x.float())
    # max propagates NaN; on the CPU it is ~30x faster than amax over a 32-wide last dim.
    amax = blocks.abs().max(dim=-1).values
    scales = scale_bytes(amax, rule)
    # 2^−e from bits; scales never reach 248..254 for finite data, so 254 − b ≥ 1 is normal.
    # A NaN/Inf block (byte 255) casts its elements unscaled: its scale makes them NaN anyway.
    b = scales.to(torch.int32)
    inverse = ((254 - b).clamp(min=1) << 23).view(torch.float32)
    inverse = torch.where(b == SCALE_NAN, 1.0, inverse)
    scaled = blocks * inverse.unsqueeze(-1)
    data = scaled.clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return data.reshape(x.shape), scales


def quantize_colwise(
    x: torch.Tensor, rule: ScaleRule = ScaleRule.RCEIL
) -> tuple[torch.Tensor, torch.Tensor]:
    """Blocks of 32 along the first dimension of a 2D tensor, written transposed."""
    return quantize_rowwise(x.t(), rule)


def quantize_experts(
    w: torch.Tensor, along: str = "K", rule: ScaleRule = ScaleRule.RCEIL
) -> tuple[torch.Tensor, torch.Tensor]:
    """Expert weights [E, N, K] along K ([E, N, K], scales [E, N, K/32]) or along N
    (written transposed: [E, K, N], scales [E, K, N/32])."""
    if along == "K":
        return quantize_rowwise(w, rule)
    if along == "N":
        return quantize_rowwise(w.transpose(-2, -1), rule)
    raise ValueError("along must be 'K' or 'N'")


def dequantize(data: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """fp32 values of MXFP8 data blocked along its last dimension."""
    blocks = _blocks(data.float())
    return (blocks * scale_values(scales).unsqueeze(-1)).reshape(data.shape)


def mx_gemm(
    a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor]
) -> torch.Tensor:
    """A · Bᵀ for A [M, K] and B [N, K], both blocked along K, in fp32."""
    return dequantize(*a) @ dequantize(*b).t()


def sqnr_db(reference: torch.Tensor, actual: torch.Tensor) -> float:
    """Signal-to-quantization-noise ratio in dB (torchao's measure)."""
    reference, actual = reference.double(), actual.double()
    noise = (reference - actual).pow(2).sum()
    if noise == 0:
        return float("inf")
    return float(10 * torch.log10(reference.pow(2).sum() / noise))


def pad_groups(x: torch.Tensor, offsets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Pad each expert's rows of x [T, ...] (sorted by expert, `offsets` int32 [E] the
    cumulative ends) to a multiple of 32 with zero rows, for `mx_grouped_wgrad`.

    Returns (padded [P, ...], padded_offsets int32 [E]) with P = 32 · floor((T + 31·E) / 32),
    an upper bound of the padded total known without reading `offsets` on the host: no host
    sync. Rows past padded_offsets[-1] are zero, and so are x's rows past offsets[-1],
    which no group holds and which are dropped."""
    T, E = x.shape[0], offsets.shape[0]
    P = (T + (BLOCK - 1) * E) // BLOCK * BLOCK
    offsets = offsets.to(torch.int64)
    starts = torch.cat([offsets.new_zeros(1), offsets[:-1]])
    padded_ends = torch.cumsum((offsets - starts + BLOCK - 1) // BLOCK * BLOCK, 0)
    padded_starts = torch.cat([offsets.new_zeros(1), padded_ends[:-1]])
    rows = torch.arange(T, device=x.device)
    group = torch.searchsorted(offsets, rows, right=True)  # E for rows past offsets[-1]
    group_c = group.clamp(max=E - 1)
    dest = torch.where(group < E, rows - starts[group_c] + padded_starts[group_c], P)
    padded = x.new_zeros((P + 1, *x.shape[1:]))
    padded.index_copy_(0, dest, x)
    return padded[:P], padded_ends.to(torch.int32)


def mx_grouped_gemm(
    a: tuple[torch.Tensor, torch.Tensor],
    b: tuple[torch.Tensor, torch.Tensor],
    offsets: torch.Tensor,
) -> torch.Tensor:
    """Rows of group e of A [T, K] times B[e]ᵀ for B [E, N, K], both blocked along K, fp32;
    rows past the last group are zero."""
    out = torch._grouped_mm(dequantize(*a), dequantize(*b).transpose(-2, -1), offs=offsets)
    rows = torch.arange(out.shape[0], device=out.device)
    return out.masked_fill((rows >= offsets[-1])[:, None], 0.0)


def mx_grouped_wgrad(
    dy_t: tuple[torch.Tensor, torch.Tensor],
    x_t: tuple[torch.Tensor, torch.Tensor],
    offsets: torch.Tensor,
) -> torch.Tensor:
    """dW[e] = dYᵀ[:, group e] · X[group e] from operands blocked along tokens (dy_t
    [N, T], x_t [K, T]; groups padded to multiples of 32); fp32 [E, N, K]."""
    return grouped_outer_products(dequantize(*dy_t), dequantize(*x_t), offsets)


def grouped_outer_products(
    dy_t: torch.Tensor, x_t: torch.Tensor, offsets: torch.Tensor
) -> torch.Tensor:
    """[E, N, K]: dy_t[:, group e] · x_t[:, group e]ᵀ for dy_t [N, T], x_t [K, T]."""
    ends = offsets.tolist()
    starts = [0, *ends[:-1]]
    return torch.stack([dy_t[:, s:e] @ x_t[:, s:e].t() for s, e in zip(starts, ends, strict=True)])
