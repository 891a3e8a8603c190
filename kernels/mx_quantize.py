"""MXFP8 quantize / dequantize in Triton, bit for bit equal to `etude.kernels.mx_reference`.

The numerics (blocks of 32, E8M0 scale bytes under RCEIL or FLOOR, saturating RNE E4M3
cast, byte 255 for NaN/Inf blocks whose elements are cast unscaled) are defined by the
reference; these kernels reproduce them from the bits:

- inputs are loaded as integer bits (fp32 as int32, bf16 as int16 widened by `<< 16`), so
  every value, subnormals included, reaches fp32 exactly;
- a block's amax is the integer max of |bits| (`bits & 0x7FFFFFFF`): NaN patterns sort above
  Inf above every finite value, so a block holding NaN or ±Inf gets an exponent of 0xFF and
  byte 255 without a NaN-aware float max;
- elements are scaled by 2^−e (an exact fp32 multiply), clamped to ±448 with comparisons
  (which keep NaN, unlike min/max) and cast to E4M3 either natively or, under
  `SOFTWARE_CAST`, by integer round-to-nearest-even (`_e4m3_bits`).

`SOFTWARE_CAST` is on under the Triton interpreter (TRITON_INTERPRET=1, CPU tensors), whose
fp32→fp8 cast rounds half up, does not saturate and loses the mantissa carry
(31.875 → 16); on a GPU the native cast runs after the clamp, with NaN's sign restored.
Dequantize decodes E4M3 from bits on both paths and multiplies by 2^(b − 127) built from
bits; a bf16 output is rounded to nearest even from the fp32 bits (the interpreter's
fp32→bf16 cast truncates).

fp8 and uint8 tensors go into the kernels as uint8 (the interpreter cannot take
float8_e8m0fnu, and the data is handled as bytes anyway); results are allocated as
float8_e4m3fn / uint8 and the kernels write into `.view(torch.uint8)`.

Shapes (suffixes in names): M, K of a 2D input (blocked along K for rowwise, along M for
colwise); E, N, K of expert weights; R, C the rows and columns a kernel sees, B the batch.
"""

from __future__ import annotations

from typing import Literal

import torch
import triton
import triton.language as tl

from etude.kernels.mx_reference import BLOCK, ScaleRule

__all__ = ["mx_dequantize", "mx_quantize", "mx_quantize_experts"]

# --------------------------------------------------------------------------------------------
# Device functions
# --------------------------------------------------------------------------------------------


@triton.jit
def _load_fp32(ptrs, mask, IS_BF16: tl.constexpr):
    """fp32 values from fp32 (int32 bits) or bf16 (int16 bits) memory, exact for every
    pattern: the interpreter's own bf16 upcast mangles subnormals."""
    if IS_BF16:
        bits = (tl.load(ptrs, mask=mask, other=0).to(tl.int32) & 0xFFFF) << 16
    else:
        bits = tl.load(ptrs, mask=mask, other=0)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _scale_bytes(amax_bits, RCEIL: tl.constexpr):
    """E8M0 bytes (int32) from the bits of |amax|, as `mx_reference.scale_bytes`."""
    exponent = (amax_bits >> 23) & 0xFF
    biased = exponent - 8
    if RCEIL:
        biased += ((amax_bits & 0x7FFFFF) > 0x600000).to(tl.int32)
    biased = tl.minimum(tl.maximum(biased, 0), 254)
    biased = tl.where(exponent == 0, 0, biased)
    return tl.where(exponent == 0xFF, 255, biased)


@triton.jit
def _e4m3_bits(v, sign, SOFTWARE_CAST: tl.constexpr):
    """E4M3 bytes (int32 0..255) of fp32 values already clamped to ±448 (NaN kept), rounded
    to nearest even; NaN becomes sign | 0x7F. `sign` (0 or 0x80) is the unscaled input's:
    on a GPU, scaling and clamping return a NaN without its sign bit."""
    bits = v.to(tl.int32, bitcast=True)
    if SOFTWARE_CAST:
        a = bits & 0x7FFFFFFF
        # Normal E4M3 (|v| ≥ 2^−6): drop 20 mantissa bits with RNE; a carry into the
        # exponent is the integer add's; rebias 127 → 7. |v| ≤ 448 cannot round past 0x7E.
        rounded = (a + 0x7FFFF + ((a >> 20) & 1)) >> 20
        normal = rounded - (120 << 3)
        # Subnormal E4M3 (|v| < 2^−6): the byte is RNE(|v| / 2^−9); |v| = m · 2^(E − 150),
        # so shift m right by 141 − E. Shifts past 25 give 0 (m < 2^24); capping at 26 keeps
        # them defined and also sends fp32 subnormals (E = 0) to 0.
        exponent = a >> 23
        m = (a & 0x7FFFFF) | 0x800000
        shift = tl.minimum(141 - exponent, 26)
        q = m >> shift
        rest = m & ((1 << shift) - 1)
        half = 1 << (shift - 1)
        up = (rest > half) | ((rest == half) & ((q & 1) == 1))
        subnormal = q + up.to(tl.int32)
        magnitude = tl.where(a >= 0x3C800000, normal, subnormal)  # 0x3C800000 = 2^−6
        magnitude = tl.where(a > 0x7F800000, 0x7F, magnitude)
    else:
        magnitude = v.to(tl.float8e4nv).to(tl.uint8, bitcast=True).to(tl.int32) & 0x7F
        magnitude = tl.where(v != v, 0x7F, magnitude)
    return sign | magnitude


@triton.jit
def _quantize_tile(x, RCEIL: tl.constexpr, SOFTWARE_CAST: tl.constexpr):
    """Quantize an fp32 tile [R, C] in blocks of 32 along C: (E4M3 bytes [R, C] as uint8,
    scale bytes [R, C // 32] as uint8)."""
    R: tl.constexpr = x.shape[0]
    C: tl.constexpr = x.shape[1]
    sign = (x.to(tl.int32, bitcast=True) >> 24) & 0x80
    x_blocks = tl.reshape(x, (R, C // 32, 32))
    amax_bits = tl.max(x_blocks.to(tl.int32, bitcast=True) & 0x7FFFFFFF, axis=2)
    scales = _scale_bytes(amax_bits, RCEIL)
    # 2^−e from bits (254 − b ≥ 1 for every finite block); a NaN/Inf block is cast unscaled.
    inverse = (tl.maximum(254 - scales, 1) << 23).to(tl.float32, bitcast=True)
    inverse = tl.where(scales == 255, 1.0, inverse)
    scaled = tl.reshape(x_blocks * inverse[:, :, None], (R, C))
    # Comparisons, not min/max: they leave NaN alone on every backend.
    clamped = tl.where(scaled > 448.0, 448.0, tl.where(scaled < -448.0, -448.0, scaled))
    return _e4m3_bits(clamped, sign, SOFTWARE_CAST).to(tl.uint8), scales.to(tl.uint8)


# --------------------------------------------------------------------------------------------
# Kernels
# --------------------------------------------------------------------------------------------


@triton.jit
def _quantize_kernel(
    x_ptr,  # [B, R, C] fp32 as int32, or bf16 as int16
    row_data_ptr,  # [B, R, C] uint8
    row_scales_ptr,  # [B, R, C // 32] uint8
    col_data_ptr,  # [B, C, R] uint8 (transposed)
    col_scales_ptr,  # [B, C, R // 32] uint8
    R,
    C,
    IS_BF16: tl.constexpr,
    ROWWISE: tl.constexpr,
    COLWISE: tl.constexpr,
    RCEIL: tl.constexpr,
    SOFTWARE_CAST: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    """One [BLOCK_R, BLOCK_C] tile; rowwise blocks along C, colwise along R (written
    transposed), or both."""
    pid_r = tl.program_id(0)
    pid_c = tl.program_id(1)
    pid_b = tl.program_id(2).to(tl.int64)
    # int64: offsets such as rows · C or cols · R pass 2^31 on large tensors.
    rows = pid_r * BLOCK_R + tl.arange(0, BLOCK_R).to(tl.int64)
    cols = pid_c * BLOCK_C + tl.arange(0, BLOCK_C).to(tl.int64)
    mask_rc = (rows[:, None] < R) & (cols[None, :] < C)
    x_rc = _load_fp32(x_ptr + pid_b * R * C + rows[:, None] * C + cols[None, :], mask_rc, IS_BF16)

    if ROWWISE:
        data_rc, scales_rc = _quantize_tile(x_rc, RCEIL, SOFTWARE_CAST)
        tl.store(row_data_ptr + pid_b * R * C + rows[:, None] * C + cols[None, :], data_rc, mask_rc)
        blocks = pid_c * (BLOCK_C // 32) + tl.arange(0, BLOCK_C // 32)
        tl.store(
            row_scales_ptr + pid_b * R * (C // 32) + rows[:, None] * (C // 32) + blocks[None, :],
            scales_rc,
            (rows[:, None] < R) & (blocks[None, :] < C // 32),
        )
    if COLWISE:
        # The tile again, transposed by its addresses (a cache hit), not by tl.trans: compiled
        # for an H200 by Triton 3.6, tl.trans feeding the blocked reshape gave wrong bytes in
        # every column but the first (measured on bf16; right scales, and right interpreted).
        mask_cr = (cols[:, None] < C) & (rows[None, :] < R)
        x_cr = _load_fp32(
            x_ptr + pid_b * R * C + rows[None, :] * C + cols[:, None], mask_cr, IS_BF16
        )
        data_cr, scales_cr = _quantize_tile(x_cr, RCEIL, SOFTWARE_CAST)
        tl.store(col_data_ptr + pid_b * R * C + cols[:, None] * R + rows[None, :], data_cr, mask_cr)
        blocks = pid_r * (BLOCK_R // 32) + tl.arange(0, BLOCK_R // 32)
        tl.store(
            col_scales_ptr + pid_b * C * (R // 32) + cols[:, None] * (R // 32) + blocks[None, :],
            scales_cr,
            (cols[:, None] < C) & (blocks[None, :] < R // 32),
        )


@triton.jit
def _dequantize_kernel(
    data_ptr,  # [R, C] uint8 (E4M3 bytes)
    scales_ptr,  # [R, C // 32] uint8
    out_ptr,  # [R, C] fp32 as int32, or bf16 as int16
    R,
    C,
    OUT_BF16: tl.constexpr,
    BLOCK_R: tl.constexpr,
    BLOCK_C: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = (rows[:, None] < R) & (cols[None, :] < C)
    byte = tl.load(data_ptr + rows[:, None] * C + cols[None, :], mask=mask, other=0).to(tl.int32)
    b = tl.load(scales_ptr + rows[:, None] * (C // 32) + cols[None, :] // 32, mask=mask, other=0)
    b = b.to(tl.int32)

    # E4M3 → fp32 from bits: normals rebias 7 → 127, subnormals are m · 2^−9, 0x7F is NaN.
    exponent = (byte >> 3) & 0xF
    mantissa = byte & 0x7
    normal = ((exponent + 120) << 23) | (mantissa << 20)
    normal = tl.where((byte & 0x7F) == 0x7F, 0x7FC00000, normal)
    magnitude = tl.where(
        exponent == 0, mantissa.to(tl.float32) * 0.001953125, normal.to(tl.float32, bitcast=True)
    )
    value = tl.where((byte & 0x80) != 0, -magnitude, magnitude)
    # 2^(b − 127) from bits: b = 0 is the fp32 subnormal 2^−127, 255 is NaN.
    scale_bits = tl.where(b == 0, 0x400000, b << 23)
    scale_bits = tl.where(b == 255, 0x7FC00000, scale_bits)
    out = value * scale_bits.to(tl.float32, bitcast=True)

    out_bits = out.to(tl.int32, bitcast=True)
    if OUT_BF16:
        rounded = (out_bits + 0x7FFF + ((out_bits >> 16) & 1)) >> 16
        out_bits = tl.where(out != out, 0x7FC0, rounded).to(tl.int16)
    tl.store(out_ptr + rows[:, None] * C + cols[None, :], out_bits, mask)


@triton.jit
def _cast_kernel(x_ptr, out_ptr, n, SOFTWARE_CAST: tl.constexpr, BLOCK_N: tl.constexpr):
    """Clamp to ±448 and cast to E4M3 bytes: the element cast alone, for tests."""
    offsets = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = offsets < n
    bits = tl.load(x_ptr + offsets, mask=mask, other=0)
    x = bits.to(tl.float32, bitcast=True)
    clamped = tl.where(x > 448.0, 448.0, tl.where(x < -448.0, -448.0, x))
    sign = (bits >> 24) & 0x80
    tl.store(out_ptr + offsets, _e4m3_bits(clamped, sign, SOFTWARE_CAST).to(tl.uint8), mask)


# --------------------------------------------------------------------------------------------
# Launchers
# --------------------------------------------------------------------------------------------

_INTERPRETED = not isinstance(_quantize_kernel, triton.runtime.JITFunction)


def _software_cast(device: torch.device) -> bool:
    if device.type == "cpu" and not _INTERPRETED:
        raise RuntimeError(
            "MXFP8 kernels on CPU tensors need the Triton interpreter: set TRITON_INTERPRET=1 "
            "before etude.kernels.mx_quantize is imported"
        )
    return _INTERPRETED


def _tile(n: int, gpu_tile: int) -> int:
    """A tile edge (a power of two ≥ 32). The interpreter runs each program in numpy, so it
    gets few large programs; GPU tiles are modest and untuned."""
    if _INTERPRETED:
        return max(32, min(256, triton.next_power_of_2(n)))
    return gpu_tile


def _as_bits(x: torch.Tensor) -> torch.Tensor:
    if x.dtype == torch.bfloat16:
        return x.view(torch.int16)
    if x.dtype == torch.float32:
        return x.view(torch.int32)
    raise TypeError(f"MXFP8 quantization takes bfloat16 or float32, not {x.dtype}")


def _rceil(rule: str) -> bool:
    return ScaleRule(rule) == ScaleRule.RCEIL


def _check_blocked(name: str, size: int) -> None:
    if size % BLOCK:
        raise ValueError(f"the blocked dimension {name} ({size}) must be a multiple of {BLOCK}")


def _quantize(
    x_BRC: torch.Tensor, rule: str, *, rowwise: bool, colwise: bool
) -> tuple[torch.Tensor, ...]:
    """Launch `_quantize_kernel` on [B, R, C]; returns the requested (data, scales) pairs."""
    B, R, C = x_BRC.shape
    if rowwise:
        _check_blocked("K", C)
    if colwise:
        _check_blocked("M" if B == 1 else "N", R)
    if colwise and x_BRC.dtype == torch.float32 and not _INTERPRETED:
        # Compiled by Triton 3.6 for an H200, the colwise blocks of fp32 input came out wrong
        # whatever the tile's layout (a transposed load, or blocks along the tile's rows),
        # while bf16 and every rowwise case were exact (measured). fp32 colwise therefore goes
        # through a transposed copy and the rowwise path; bf16, what training feeds, does not.
        row = _quantize(x_BRC, rule, rowwise=True, colwise=False) if rowwise else ()
        return row + _quantize(x_BRC.transpose(-2, -1), rule, rowwise=True, colwise=False)
    x_BRC = x_BRC.contiguous()
    software = _software_cast(x_BRC.device)
    new = x_BRC.new_empty
    empty = new(0, dtype=torch.uint8)
    row = (new((B, R, C), dtype=torch.float8_e4m3fn), new((B, R, C // BLOCK), dtype=torch.uint8))
    col = (new((B, C, R), dtype=torch.float8_e4m3fn), new((B, C, R // BLOCK), dtype=torch.uint8))
    if not rowwise:
        row = (empty.view(torch.float8_e4m3fn), empty)
    if not colwise:
        col = (empty.view(torch.float8_e4m3fn), empty)
    block_r, block_c = _tile(R, 64), _tile(C, 64)
    grid = (triton.cdiv(R, block_r), triton.cdiv(C, block_c), B)
    if x_BRC.numel():
        _quantize_kernel[grid](
            _as_bits(x_BRC),
            row[0].view(torch.uint8),
            row[1],
            col[0].view(torch.uint8),
            col[1],
            R,
            C,
            IS_BF16=x_BRC.dtype == torch.bfloat16,
            ROWWISE=rowwise,
            COLWISE=colwise,
            RCEIL=_rceil(rule),
            SOFTWARE_CAST=software,
            BLOCK_R=block_r,
            BLOCK_C=block_c,
        )
    return (row if rowwise else ()) + (col if colwise else ())


def _check_2d(x: torch.Tensor) -> None:
    if x.dim() != 2:
        raise ValueError(f"expected a 2D tensor, got shape {tuple(x.shape)}")


@torch.library.custom_op("etude::mx_quantize_rowwise", mutates_args=())
def _quantize_rowwise_op(x: torch.Tensor, rule: str) -> tuple[torch.Tensor, torch.Tensor]:
    _check_2d(x)
    data, scales = _quantize(x[None], rule, rowwise=True, colwise=False)
    return data[0], scales[0]


@torch.library.custom_op("etude::mx_quantize_colwise", mutates_args=())
def _quantize_colwise_op(x: torch.Tensor, rule: str) -> tuple[torch.Tensor, torch.Tensor]:
    _check_2d(x)
    data, scales = _quantize(x[None], rule, rowwise=False, colwise=True)
    return data[0], scales[0]


@torch.library.custom_op("etude::mx_quantize_dual", mutates_args=())
def _quantize_dual_op(
    x: torch.Tensor, rule: str
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    _check_2d(x)
    outputs = _quantize(x[None], rule, rowwise=True, colwise=True)
    return tuple(t[0] for t in outputs)  # type: ignore[return-value]


@torch.library.custom_op("etude::mx_quantize_experts", mutates_args=())
def _quantize_experts_op(
    w: torch.Tensor, along: str, rule: str
) -> tuple[torch.Tensor, torch.Tensor]:
    if w.dim() != 3:
        raise ValueError(f"expected expert weights [E, N, K], got shape {tuple(w.shape)}")
    if along not in ("K", "N"):
        raise ValueError("along must be 'K' or 'N'")
    data, scales = _quantize(w, rule, rowwise=along == "K", colwise=along == "N")
    return data, scales


@torch.library.custom_op("etude::mx_dequantize", mutates_args=())
def _dequantize_op(
    data: torch.Tensor, scales: torch.Tensor, out_dtype: torch.dtype
) -> torch.Tensor:
    if out_dtype not in (torch.float32, torch.bfloat16):
        raise TypeError(f"out_dtype must be float32 or bfloat16, not {out_dtype}")
    if data.dtype != torch.float8_e4m3fn or scales.dtype != torch.uint8:
        raise TypeError("expected float8_e4m3fn data and uint8 scales")
    C = data.shape[-1]
    _check_blocked("last", C)
    if scales.shape != (*data.shape[:-1], C // BLOCK):
        raise ValueError(f"scales {tuple(scales.shape)} do not fit data {tuple(data.shape)}")
    _software_cast(data.device)
    out = data.new_empty(data.shape, dtype=out_dtype)
    R = data.numel() // C if C else 0
    if out.numel():
        block_r, block_c = _tile(R, 64), _tile(C, 64)
        grid = (triton.cdiv(R, block_r), triton.cdiv(C, block_c))
        _dequantize_kernel[grid](
            data.contiguous().view(torch.uint8),
            scales.contiguous(),
            out.view(torch.int16 if out_dtype == torch.bfloat16 else torch.int32),
            R,
            C,
            OUT_BF16=out_dtype == torch.bfloat16,
            BLOCK_R=block_r,
            BLOCK_C=block_c,
        )
    return out


def _cast_e4m3(x: torch.Tensor, *, software: bool | None = None) -> torch.Tensor:
    """E4M3 bytes (uint8) of fp32 x clamped to ±448: the element cast alone, one launch for
    the interpreter. `software` forces a path (the native one needs a GPU)."""
    software = _software_cast(x.device) if software is None else software
    x = x.contiguous()
    out = torch.empty_like(x, dtype=torch.uint8)
    block_n = max(32, triton.next_power_of_2(x.numel())) if _INTERPRETED else 1024
    grid = (triton.cdiv(x.numel(), block_n),)
    _cast_kernel[grid](x.view(torch.int32), out, x.numel(), SOFTWARE_CAST=software, BLOCK_N=block_n)
    return out


# Fake (meta) implementations: shapes and dtypes only.


def _fake_pair(x: torch.Tensor, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    *lead, n = shape
    data = x.new_empty(shape, dtype=torch.float8_e4m3fn)
    return data, x.new_empty((*lead, n // BLOCK), dtype=torch.uint8)


@_quantize_rowwise_op.register_fake
def _(x: torch.Tensor, rule: str) -> tuple[torch.Tensor, torch.Tensor]:
    return _fake_pair(x, tuple(x.shape))


@_quantize_colwise_op.register_fake
def _(x: torch.Tensor, rule: str) -> tuple[torch.Tensor, torch.Tensor]:
    return _fake_pair(x, (x.shape[1], x.shape[0]))


@_quantize_dual_op.register_fake
def _(x: torch.Tensor, rule: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _fake_pair(x, tuple(x.shape)) + _fake_pair(x, (x.shape[1], x.shape[0]))


@_quantize_experts_op.register_fake
def _(w: torch.Tensor, along: str, rule: str) -> tuple[torch.Tensor, torch.Tensor]:
    E, N, K = w.shape
    return _fake_pair(w, (E, N, K) if along == "K" else (E, K, N))


@_dequantize_op.register_fake
def _(data: torch.Tensor, scales: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    return data.new_empty(data.shape, dtype=out_dtype)


# --------------------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------------------

Pair = tuple[torch.Tensor, torch.Tensor]


def mx_quantize(
    x: torch.Tensor,
    *,
    mode: Literal["rowwise", "colwise", "dual"] = "rowwise",
    rule: ScaleRule | str = ScaleRule.RCEIL,
) -> Pair | tuple[Pair, Pair]:
    """MXFP8-quantize a 2D bf16/fp32 tensor x [M, K].

    - rowwise: blocks along K → (data [M, K], scales [M, K/32]);
    - colwise: blocks along M, written transposed → (data [K, M], scales [K, M/32]);
    - dual: both, in one launch for bf16 → ((rowwise data, scales), (colwise data, scales)).

    Data is float8_e4m3fn, scales uint8 E8M0 bytes; equal to `mx_reference.quantize_rowwise`
    / `quantize_colwise` bit for bit.
    """
    rule = str(ScaleRule(rule))
    if mode == "rowwise":
        return torch.ops.etude.mx_quantize_rowwise(x, rule)
    if mode == "colwise":
        return torch.ops.etude.mx_quantize_colwise(x, rule)
    if mode == "dual":
        row_data, row_scales, col_data, col_scales = torch.ops.etude.mx_quantize_dual(x, rule)
        return (row_data, row_scales), (col_data, col_scales)
    raise ValueError("mode must be 'rowwise', 'colwise' or 'dual'")


def mx_quantize_experts(
    w: torch.Tensor,
    *,
    along: Literal["K", "N"] = "K",
    rule: ScaleRule | str = ScaleRule.RCEIL,
) -> Pair:
    """MXFP8-quantize expert weights w [E, N, K] along K (data [E, N, K], scales
    [E, N, K/32]) or along N, written transposed (data [E, K, N], scales [E, K, N/32]);
    equal to `mx_reference.quantize_experts`."""
    return torch.ops.etude.mx_quantize_experts(w, along, str(ScaleRule(rule)))


def mx_dequantize(
    data: torch.Tensor, scales: torch.Tensor, *, out_dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """Values of MXFP8 data (float8_e4m3fn [..., K]) with scales (uint8 [..., K/32]), in
    float32 (equal to `mx_reference.dequantize`) or bfloat16 (that, rounded to nearest
    even)."""
    return torch.ops.etude.mx_dequantize(data, scales, out_dtype)
