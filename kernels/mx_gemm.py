"""MXFP8 GEMMs in Triton: dense A · Bᵀ, grouped 2D×3D (MoE forward and dgrad) and grouped
2D×2D (MoE wgrad). The numerics are `etude.kernels.mx_reference`'s.

Every operand is MXFP8 blocked along the contraction dimension: data float8_e4m3fn, scales
uint8 E8M0 bytes (float8_e8m0fnu is accepted and viewed as uint8), one per 32 elements.

Shape suffixes: M, N output rows and columns; K the contraction; T tokens (rows sorted by
expert); E experts; Kb = K / 32 scale blocks (likewise Tb).

Three ways to multiply one tile (`path`, a compile-time constant of the kernels):

- "dequant" (portable): data · scale into bf16 (exact: 4 significant bits times a power
  of two) and `tl.dot` into fp32. Under the interpreter the tiles stay fp32 and the dot is
  `input_precision="ieee"`: the interpreter mangles bf16 subnormals and truncates fp32 to
  bf16, and on a GPU an fp32 `tl.dot` would otherwise be tf32.
- "fp8_promote" (the Hopper experiment): an fp8 `tl.dot` per 32-wide K chunk into fp32,
  times the outer product of the two blocks' scales, accumulated in fp32.
- "dot_scaled": `tl.dot_scaled` — native MX on sm_100, emulated through bf16 elsewhere; the
  interpreter runs it too (in fp32).

Under the interpreter the kernels write fp32 and the launcher rounds to `out_dtype` with
torch (round to nearest even), since the interpreter's own fp32 → bf16 cast truncates.
Data is passed as its uint8 bits and bitcast inside the kernels.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from etude.kernels.mx_reference import BLOCK, pad_groups  # noqa: F401  (pad_groups: this API)

PATHS = ("dequant", "fp8_promote", "dot_scaled")


# --------------------------------------------------------------------------- device code


@triton.jit
def _scale_values(s):
    """uint8 E8M0 bytes to fp32 2^(b − 127), from bits: b = 0 is the subnormal 2^−127 and
    b = 255 is NaN, as in `mx_reference.scale_values`."""
    b = s.to(tl.int32)
    bits = tl.where(b == 0, 0x00400000, b << 23)
    bits = tl.where(b == 255, 0x7FC00000, bits)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _e4m3_values(bits, INTERPRETED: tl.constexpr):
    """uint8 E4M3 bits to fp32. The interpreter decodes ±0x7F (NaN) as ±480: fixed here."""
    x = bits.to(tl.float8e4nv, bitcast=True).to(tl.float32)
    if INTERPRETED:
        x = tl.where((bits & 0x7F) == 0x7F, float("nan"), x)
    return x


@triton.jit
def _mx_tile(
    a_ptr,
    a_s_ptr,
    b_ptr,
    b_s_ptr,
    offs_m,
    offs_n,
    mask_m,
    mask_n,
    k_lo,
    k_hi,
    stride_am,
    stride_ak,
    stride_asm,
    stride_ask,
    stride_bn,
    stride_bk,
    stride_bsn,
    stride_bsk,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PATH: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    """fp32 [BLOCK_M, BLOCK_N] = Σ_{k_lo ≤ k < k_hi} A[m, k] · B[n, k]; k_lo is a multiple
    of 32 (scale index k // 32). Rows and columns outside their masks come out zero."""
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(k_lo, k_hi, BLOCK_K):
        if PATH == "fp8_promote":
            for c in tl.static_range(BLOCK_K // 32):
                kc = k0 + c * 32
                offs_k = kc + tl.arange(0, 32)
                mask_k = offs_k < k_hi
                a = tl.load(
                    a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak,
                    mask=mask_m[:, None] & mask_k[None, :],
                    other=0,
                ).to(tl.float8e4nv, bitcast=True)
                b = tl.load(
                    b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                    mask=mask_k[:, None] & mask_n[None, :],
                    other=0,
                ).to(tl.float8e4nv, bitcast=True)
                a_s = tl.load(
                    a_s_ptr + offs_m * stride_asm + (kc // 32) * stride_ask,
                    mask=mask_m & (offs_m * 0 + kc < k_hi),
                    other=127,
                )
                b_s = tl.load(
                    b_s_ptr + offs_n * stride_bsn + (kc // 32) * stride_bsk,
                    mask=mask_n & (offs_n * 0 + kc < k_hi),
                    other=127,
                )
                part = tl.dot(a, b, out_dtype=tl.float32)
                acc += part * (_scale_values(a_s)[:, None] * _scale_values(b_s)[None, :])
        else:
            offs_k = k0 + tl.arange(0, BLOCK_K)
            mask_k = offs_k < k_hi
            mask_a = mask_m[:, None] & mask_k[None, :]
            mask_b = mask_k[:, None] & mask_n[None, :]
            a = tl.load(
                a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak,
                mask=mask_a,
                other=0,
            )
            b = tl.load(
                b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn,
                mask=mask_b,
                other=0,
            )
            if PATH == "dot_scaled":
                offs_kb = k0 // 32 + tl.arange(0, BLOCK_K // 32)
                mask_kb = offs_kb * 32 < k_hi
                a_s = tl.load(
                    a_s_ptr + offs_m[:, None] * stride_asm + offs_kb[None, :] * stride_ask,
                    mask=mask_m[:, None] & mask_kb[None, :],
                    other=127,
                )
                b_s = tl.load(
                    b_s_ptr + offs_n[:, None] * stride_bsn + offs_kb[None, :] * stride_bsk,
                    mask=mask_n[:, None] & mask_kb[None, :],
                    other=127,
                )
                acc = tl.dot_scaled(
                    a.to(tl.float8e4nv, bitcast=True),
                    a_s,
                    "e4m3",
                    b.to(tl.float8e4nv, bitcast=True),
                    b_s,
                    "e4m3",
                    acc=acc,
                )
            else:  # "dequant": one scale byte per element (a gather that hits L1)
                a_s = tl.load(
                    a_s_ptr + offs_m[:, None] * stride_asm + (offs_k[None, :] // 32) * stride_ask,
                    mask=mask_a,
                    other=127,
                )
                b_s = tl.load(
                    b_s_ptr + (offs_k[:, None] // 32) * stride_bsk + offs_n[None, :] * stride_bsn,
                    mask=mask_b,
                    other=127,
                )
                a = _e4m3_values(a, INTERPRETED) * _scale_values(a_s)
                b = _e4m3_values(b, INTERPRETED) * _scale_values(b_s)
                if INTERPRETED:
                    acc = tl.dot(a, b, acc, input_precision="ieee")
                else:
                    acc = tl.dot(a.to(tl.bfloat16), b.to(tl.bfloat16), acc)
    return acc


@triton.jit
def _mx_gemm_kernel(
    a_ptr,
    a_s_ptr,
    b_ptr,
    b_s_ptr,
    c_ptr,
    M,
    N,
    K,
    stride_am,
    stride_ak,
    stride_asm,
    stride_ask,
    stride_bn,
    stride_bk,
    stride_bsn,
    stride_bsk,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PATH: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < M
    mask_n = offs_n < N
    acc = _mx_tile(
        a_ptr, a_s_ptr, b_ptr, b_s_ptr, offs_m, offs_n, mask_m, mask_n, 0, K,
        stride_am, stride_ak, stride_asm, stride_ask,
        stride_bn, stride_bk, stride_bsn, stride_bsk,
        BLOCK_M, BLOCK_N, BLOCK_K, PATH, INTERPRETED,
    )  # fmt: skip
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _mx_grouped_gemm_kernel(
    a_ptr,
    a_s_ptr,
    b_ptr,
    b_s_ptr,
    offsets_ptr,
    c_ptr,
    T,
    N,
    K,
    E,
    stride_am,
    stride_ak,
    stride_asm,
    stride_ask,
    stride_be,
    stride_bn,
    stride_bk,
    stride_bse,
    stride_bsn,
    stride_bsk,
    stride_cm,
    stride_cn,
    GROUPS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PATH: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    """Program (i, j) finds its (group, row tile) from `offsets` on the device: group g < E
    is expert g's rows, group E the rows past offsets[-1] (written as zeros); the grid's
    cdiv(T, BLOCK_M) + E + 1 row programs cover Σ_g cdiv(rows_g, BLOCK_M), the rest idle."""
    pid_m = tl.program_id(0)
    g = tl.arange(0, GROUPS)  # GROUPS: a power of two ≥ E + 1
    ends = tl.load(offsets_ptr + g, mask=g < E, other=T)
    starts = tl.load(offsets_ptr + g - 1, mask=(g > 0) & (g <= E), other=T)
    starts = tl.where(g == 0, 0, starts)
    ends = tl.minimum(ends, T)
    starts = tl.minimum(starts, ends)
    tiles = (ends - starts + BLOCK_M - 1) // BLOCK_M
    tiles_end = tl.cumsum(tiles, 0)
    group = tl.sum((tiles_end <= pid_m).to(tl.int32), 0)
    if group <= E:
        here = g == group
        start = tl.sum(tl.where(here, starts, 0), 0)
        end = tl.sum(tl.where(here, ends, 0), 0)
        tile = pid_m - tl.sum(tl.where(here, tiles_end - tiles, 0), 0)
        offs_m = start + tile * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
        mask_m = offs_m < end
        mask_n = offs_n < N
        if group < E:
            expert = group.to(tl.int64)
            acc = _mx_tile(
                a_ptr, a_s_ptr, b_ptr + expert * stride_be, b_s_ptr + expert * stride_bse,
                offs_m, offs_n, mask_m, mask_n, 0, K,
                stride_am, stride_ak, stride_asm, stride_ask,
                stride_bn, stride_bk, stride_bsn, stride_bsk,
                BLOCK_M, BLOCK_N, BLOCK_K, PATH, INTERPRETED,
            )  # fmt: skip
        else:
            acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


@triton.jit
def _mx_grouped_wgrad_kernel(
    dy_ptr,
    dy_s_ptr,
    x_ptr,
    x_s_ptr,
    offsets_ptr,
    dw_ptr,
    N,
    K,
    stride_dyn,
    stride_dyt,
    stride_dysn,
    stride_dyst,
    stride_xk,
    stride_xt,
    stride_xsk,
    stride_xst,
    stride_dwe,
    stride_dwn,
    stride_dwk,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_K: tl.constexpr,
    PATH: tl.constexpr,
    INTERPRETED: tl.constexpr,
):
    """Program (e, i, j) writes dW[e] tile (i, j), contracting over expert e's tokens."""
    expert = tl.program_id(0)
    start = tl.load(offsets_ptr + expert - 1, mask=expert > 0, other=0)
    end = tl.load(offsets_ptr + expert)
    offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(2) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask_m = offs_m < N
    mask_n = offs_n < K
    acc = _mx_tile(
        dy_ptr, dy_s_ptr, x_ptr, x_s_ptr, offs_m, offs_n, mask_m, mask_n, start, end,
        stride_dyn, stride_dyt, stride_dysn, stride_dyst,
        stride_xk, stride_xt, stride_xsk, stride_xst,
        BLOCK_M, BLOCK_N, BLOCK_K, PATH, INTERPRETED,
    )  # fmt: skip
    dw_ptrs = (
        dw_ptr
        + expert.to(tl.int64) * stride_dwe
        + offs_m[:, None] * stride_dwn
        + offs_n[None, :] * stride_dwk
    )
    tl.store(dw_ptrs, acc.to(dw_ptr.dtype.element_ty), mask=mask_m[:, None] & mask_n[None, :])


# --------------------------------------------------------------------------- host code


def _interpreted() -> bool:
    # How the kernels were decorated (TRITON_INTERPRET at import), not the variable now.
    return isinstance(_mx_gemm_kernel, InterpretedFunction)


def _config(path: str, interpreted: bool) -> dict[str, int]:
    # The interpreter pays per program and per op, not per element: few, large tiles.
    if interpreted:
        return {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 64}
    # "dequant" holds both tiles in fp32 before the bf16 dot: a narrower K step.
    block_k = 64 if path == "dequant" else 128
    return {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": block_k, "num_warps": 8, "num_stages": 3}


def _bits(data: torch.Tensor, scales: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    if data.dtype != torch.float8_e4m3fn:
        raise TypeError(f"MXFP8 data must be float8_e4m3fn, got {data.dtype}")
    if scales.dtype == torch.float8_e8m0fnu:
        scales = scales.view(torch.uint8)
    if scales.dtype != torch.uint8:
        raise TypeError(f"MX scales must be uint8 (E8M0 bytes), got {scales.dtype}")
    if data.shape[-1] != scales.shape[-1] * BLOCK or data.shape[:-1] != scales.shape[:-1]:
        raise ValueError(f"scales {tuple(scales.shape)} do not block data {tuple(data.shape)}")
    return data.view(torch.uint8), scales


def _check_path(path: str) -> None:
    if path not in PATHS:
        raise ValueError(f"path must be one of {PATHS}, got {path!r}")


def _output(shape: tuple[int, ...], out_dtype: torch.dtype, device, interpreted: bool):
    return torch.empty(shape, dtype=torch.float32 if interpreted else out_dtype, device=device)


@torch.library.custom_op("etude::mx_gemm", mutates_args=())
def mx_gemm(
    a_data: torch.Tensor,
    a_scales: torch.Tensor,
    b_data: torch.Tensor,
    b_scales: torch.Tensor,
    *,
    out_dtype: torch.dtype = torch.bfloat16,
    path: str = "dequant",
) -> torch.Tensor:
    """C [M, N] = A · Bᵀ for A [M, K] and B [N, K], both MXFP8 blocked along K."""
    _check_path(path)
    a, a_s = _bits(a_data, a_scales)
    b, b_s = _bits(b_data, b_scales)
    (M, K), N = a.shape, b.shape[0]
    if b.shape[1] != K:
        raise ValueError(f"contraction sizes differ: A {tuple(a.shape)}, B {tuple(b.shape)}")
    interpreted = _interpreted()
    config = _config(path, interpreted)
    c = _output((M, N), out_dtype, a.device, interpreted)
    grid = (triton.cdiv(M, config["BLOCK_M"]), triton.cdiv(N, config["BLOCK_N"]))
    _mx_gemm_kernel[grid](
        a, a_s, b, b_s, c, M, N, K,
        *a.stride(), *a_s.stride(), *b.stride(), *b_s.stride(), *c.stride(),
        PATH=path, INTERPRETED=interpreted, **config,
    )  # fmt: skip
    return c.to(out_dtype)


@mx_gemm.register_fake
def _(a_data, a_scales, b_data, b_scales, *, out_dtype=torch.bfloat16, path="dequant"):
    return a_data.new_empty((a_data.shape[0], b_data.shape[0]), dtype=out_dtype)


@torch.library.custom_op("etude::mx_grouped_gemm", mutates_args=())
def mx_grouped_gemm(
    a_data: torch.Tensor,
    a_scales: torch.Tensor,
    b_data: torch.Tensor,
    b_scales: torch.Tensor,
    offsets: torch.Tensor,
    *,
    out_dtype: torch.dtype = torch.bfloat16,
    path: str = "dequant",
) -> torch.Tensor:
    """out [T, N]: out[group e] = A[group e] · B[e]ᵀ for A [T, K] (rows sorted by expert)
    and B [E, N, K], both MXFP8 blocked along K. `offsets` int32 [E] holds the groups'
    cumulative ends (as `torch._grouped_mm` takes them); groups may be empty or ragged.
    Rows past offsets[-1] come out zero. The tile → expert map is computed on the device."""
    _check_path(path)
    a, a_s = _bits(a_data, a_scales)
    b, b_s = _bits(b_data, b_scales)
    (T, K), (E, N) = a.shape, b.shape[:2]
    if b.shape[2] != K:
        raise ValueError(f"contraction sizes differ: A {tuple(a.shape)}, B {tuple(b.shape)}")
    if offsets.shape != (E,) or offsets.dtype != torch.int32:
        raise ValueError(f"offsets must be int32 [{E}], got {offsets.dtype} {offsets.shape}")
    interpreted = _interpreted()
    config = _config(path, interpreted)
    c = _output((T, N), out_dtype, a.device, interpreted)
    grid = (triton.cdiv(T, config["BLOCK_M"]) + E + 1, triton.cdiv(N, config["BLOCK_N"]))
    _mx_grouped_gemm_kernel[grid](
        a, a_s, b, b_s, offsets, c, T, N, K, E,
        *a.stride(), *a_s.stride(), *b.stride(), *b_s.stride(), *c.stride(),
        GROUPS=triton.next_power_of_2(E + 1), PATH=path, INTERPRETED=interpreted, **config,
    )  # fmt: skip
    return c.to(out_dtype)


@mx_grouped_gemm.register_fake
def _(a_data, a_scales, b_data, b_scales, offsets, *, out_dtype=torch.bfloat16, path="dequant"):
    return a_data.new_empty((a_data.shape[0], b_data.shape[1]), dtype=out_dtype)


@torch.library.custom_op("etude::mx_grouped_wgrad", mutates_args=())
def mx_grouped_wgrad(
    dy_t_data: torch.Tensor,
    dy_t_scales: torch.Tensor,
    x_t_data: torch.Tensor,
    x_t_scales: torch.Tensor,
    offsets: torch.Tensor,
    *,
    out_dtype: torch.dtype = torch.float32,
    path: str = "dequant",
) -> torch.Tensor:
    """dW [E, N, K]: dW[e] = dYᵀ[:, group e] · X[group e], from dY [T, N] and X [T, K]
    quantized colwise (blocked along tokens, written transposed: dy_t [N, T], x_t [K, T]).
    `offsets` int32 [E] are the groups' cumulative ends, each a multiple of 32 so blocks
    never straddle experts (see `pad_groups`); an empty group's dW[e] is zero."""
    _check_path(path)
    dy, dy_s = _bits(dy_t_data, dy_t_scales)
    x, x_s = _bits(x_t_data, x_t_scales)
    (N, T), K = dy.shape, x.shape[0]
    if x.shape[1] != T:
        raise ValueError(f"token counts differ: dY {tuple(dy.shape)}, X {tuple(x.shape)}")
    if offsets.ndim != 1 or offsets.dtype != torch.int32:
        raise ValueError(f"offsets must be int32 [E], got {offsets.dtype} {offsets.shape}")
    E = offsets.shape[0]
    interpreted = _interpreted()
    config = _config(path, interpreted)
    dw = _output((E, N, K), out_dtype, dy.device, interpreted)
    grid = (E, triton.cdiv(N, config["BLOCK_M"]), triton.cdiv(K, config["BLOCK_N"]))
    _mx_grouped_wgrad_kernel[grid](
        dy, dy_s, x, x_s, offsets, dw, N, K,
        *dy.stride(), *dy_s.stride(), *x.stride(), *x_s.stride(), *dw.stride(),
        PATH=path, INTERPRETED=interpreted, **config,
    )  # fmt: skip
    return dw.to(out_dtype)


@mx_grouped_wgrad.register_fake
def _(
    dy_t_data,
    dy_t_scales,
    x_t_data,
    x_t_scales,
    offsets,
    *,
    out_dtype=torch.float32,
    path="dequant",
):
    return dy_t_data.new_empty(
        (offsets.shape[0], dy_t_data.shape[0], x_t_data.shape[0]), dtype=out_dtype
    )
