"""MXFP8 GEMM kernels against the reference numerics.

Two references per GEMM: the dequantized oracle (reference `dequantize`, then an fp32
matmul; the kernels must agree to ≥ 80 dB) and the bf16-input one (the unquantized
operands multiplied in fp32: what MXFP8 costs, ≥ 27 dB forward, 25 dgrad, 24 wgrad).
Operands are quantized the way training does: forward Y = X·Wᵀ along K, dgrad dX = dY·W
along N, wgrad dW = dYᵀ·X along the tokens.

Without a GPU everything runs under the Triton interpreter (set up in tests/conftest.py),
which runs all three paths; shapes stay small (and not multiples of the 64-wide tiles).
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton", reason="the MXFP8 GEMM kernels need triton (the `triton` extra)")

from etude.kernels.mx_gemm import (
    PATHS,
    mx_gemm,
    mx_grouped_gemm,
    mx_grouped_wgrad,
    pad_groups,
)
from etude.kernels.mx_reference import (
    dequantize,
    quantize_colwise,
    quantize_experts,
    quantize_rowwise,
    sqnr_db,
)

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
ORACLE_DB = 80.0
BF16_DB = {"forward": 27.0, "dgrad": 25.0, "wgrad": 24.0}
# Group sizes 37, 0, 5, 64, 3, 0, 41, 30 (ragged, empty, smaller than and equal to a tile)
# over 200 tokens: the last 20 belong to no expert.
RAGGED_8 = (37, 37, 42, 106, 109, 109, 150, 180)
T_RAGGED = 200


def _bf16_values(*shape: int, seed: int, device: str = DEVICE) -> torch.Tensor:
    """bf16-representable fp32 values with magnitudes that vary by row (so scales do)."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=generator)
    x = x * torch.exp2(torch.randint(-6, 7, (*shape[:-1], 1), generator=generator).float())
    return x.bfloat16().float().to(device)


def _offsets(ends: tuple[int, ...]) -> torch.Tensor:
    return torch.tensor(ends, dtype=torch.int32, device=DEVICE)


def _grouped_mm(a: torch.Tensor, b: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """torch._grouped_mm in fp32, on the CPU (CUDA's takes bf16 only on some versions)."""
    return torch._grouped_mm(a.cpu(), b.cpu(), offs=offsets.cpu()).to(a.device)


def _check(oracle: torch.Tensor, bf16_ref: torch.Tensor, out: torch.Tensor, bf16_db: float):
    assert out.dtype == torch.float32 and out.shape == oracle.shape
    assert sqnr_db(oracle, out) >= ORACLE_DB, sqnr_db(oracle, out)
    assert sqnr_db(bf16_ref, out) >= bf16_db, sqnr_db(bf16_ref, out)


# --------------------------------------------------------------------------- dense


def _dense_operands(gemm: str, M: int, N: int, K: int):
    """(A, B, bf16-input reference) of one training GEMM of a layer Y [M, N] = X [M, K] · Wᵀ."""
    x, w, dy = _bf16_values(M, K, seed=1), _bf16_values(N, K, seed=2), _bf16_values(M, N, seed=3)
    if gemm == "forward":  # Y = X · Wᵀ, contraction over K
        return quantize_rowwise(x), quantize_rowwise(w), x @ w.t()
    if gemm == "dgrad":  # dX = dY · W, contraction over N
        return quantize_rowwise(dy), quantize_colwise(w), dy @ w
    # wgrad: dW = dYᵀ · X, contraction over M
    return quantize_colwise(dy), quantize_colwise(x), dy.t() @ x


@pytest.mark.parametrize("gemm", ["forward", "dgrad", "wgrad"])
@pytest.mark.parametrize("path", PATHS)
def test_mx_gemm(path, gemm):
    a, b, bf16_ref = _dense_operands(gemm, M=96, N=160, K=224)
    out = mx_gemm(*a, *b, out_dtype=torch.float32, path=path)
    oracle = dequantize(*a) @ dequantize(*b).t()
    _check(oracle, bf16_ref, out, BF16_DB[gemm])


def test_mx_gemm_rounds_to_out_dtype():
    a, b, _ = _dense_operands("forward", M=64, N=96, K=64)
    out = mx_gemm(*a, *b)  # bf16 by default
    assert out.dtype == torch.bfloat16
    oracle = (dequantize(*a) @ dequantize(*b).t()).bfloat16()
    # Round to nearest even of (almost) the same fp32 sums: at most one bf16 ulp apart.
    torch.testing.assert_close(out, oracle, rtol=2**-8, atol=0)


@pytest.mark.parametrize("path", PATHS)
def test_special_blocks(path):
    """A NaN scale (byte 255) voids its row; a zero block (byte 0) contributes zero; scales
    may come as float8_e8m0fnu."""
    x = _bf16_values(32, 64, seed=4)
    x[0, 3] = float("nan")
    x[1] = 0.0
    a, b = quantize_rowwise(x), quantize_rowwise(_bf16_values(64, 64, seed=5))
    assert a[1][0, 0] == 255 and (a[1][1] == 0).all()
    out = mx_gemm(a[0], a[1].view(torch.float8_e8m0fnu), *b, out_dtype=torch.float32, path=path)
    oracle = dequantize(*a) @ dequantize(*b).t()
    assert out[0].isnan().all() and (out[1] == 0).all()
    torch.testing.assert_close(out, oracle, rtol=1e-5, atol=1e-5, equal_nan=True)


def test_rejects_bad_operands():
    a = quantize_rowwise(_bf16_values(32, 64, seed=6))
    with pytest.raises(ValueError, match="path"):
        mx_gemm(*a, *a, path="fp4")
    with pytest.raises(TypeError, match="float8_e4m3fn"):
        mx_gemm(a[0].float(), a[1], *a)
    with pytest.raises(ValueError, match="do not block"):
        mx_gemm(a[0], a[1][:, :1], *a)


# --------------------------------------------------------------------------- grouped 2D × 3D


def _grouped_operands(gemm: str, T: int, E: int, N: int, K: int, offsets: torch.Tensor):
    """(A, B, bf16-input reference) of an MoE layer Y [T, N] = X [T, K] · W[e]ᵀ per group."""
    x, dy = _bf16_values(T, K, seed=7), _bf16_values(T, N, seed=8)
    w = _bf16_values(E, N, K, seed=9)
    if gemm == "forward":
        ref = _grouped_mm(x, w.transpose(-2, -1), offsets)
        return quantize_rowwise(x), quantize_experts(w, "K"), ref
    ref = _grouped_mm(dy, w, offsets)  # dgrad: dX = dY · W[e]
    return quantize_rowwise(dy), quantize_experts(w, "N"), ref


@pytest.mark.parametrize(
    ("path", "gemm", "ends", "T"),
    [
        *[(path, gemm, RAGGED_8, T_RAGGED) for path in PATHS for gemm in ("forward", "dgrad")],
        ("dequant", "forward", (0, 70, 96), 96),  # an empty first group, no rows left over
        ("dequant", "dgrad", (96,), 96),  # a single expert
    ],
)
def test_mx_grouped_gemm(path, gemm, ends, T):
    offsets = _offsets(ends)
    a, b, bf16_ref = _grouped_operands(gemm, T, E=len(ends), N=96, K=128, offsets=offsets)
    out = mx_grouped_gemm(*a, *b, offsets, out_dtype=torch.float32, path=path)
    oracle = _grouped_mm(dequantize(*a), dequantize(*b).transpose(-2, -1), offsets)
    used = ends[-1]  # _grouped_mm leaves the rows past offsets[-1] unwritten
    _check(oracle[:used], bf16_ref[:used], out[:used], BF16_DB[gemm])
    assert (out[used:] == 0).all()


# --------------------------------------------------------------------------- grouped wgrad


def test_pad_groups():
    x = torch.arange(T_RAGGED, device=DEVICE, dtype=torch.float32)[:, None].repeat(1, 4)
    padded, padded_offsets = pad_groups(x, _offsets(RAGGED_8))
    sizes = [e - s for s, e in zip((0, *RAGGED_8[:-1]), RAGGED_8, strict=True)]
    expected_ends = torch.tensor([-(-s // 32) * 32 for s in sizes]).cumsum(0)
    assert padded_offsets.dtype == torch.int32
    assert padded_offsets.tolist() == expected_ends.tolist()
    assert padded.shape[0] % 32 == 0 and padded.shape[0] >= expected_ends[-1]
    expected = torch.zeros_like(padded)
    at = 0
    for (s, e), end in zip(
        zip((0, *RAGGED_8[:-1]), RAGGED_8, strict=True), expected_ends.tolist(), strict=True
    ):
        expected[at : at + e - s] = x[s:e]
        at = end
    assert torch.equal(padded, expected)


@pytest.mark.parametrize("path", PATHS)
def test_mx_grouped_wgrad(path):
    offsets = _offsets(RAGGED_8)
    dy, x = _bf16_values(T_RAGGED, 96, seed=10), _bf16_values(T_RAGGED, 160, seed=11)
    dy_p, padded_offsets = pad_groups(dy, offsets)
    x_p, _ = pad_groups(x, offsets)
    dy_t, x_t = quantize_colwise(dy_p), quantize_colwise(x_p)
    out = mx_grouped_wgrad(*dy_t, *x_t, padded_offsets, path=path)
    oracle = _grouped_mm(dequantize(*dy_t), dequantize(*x_t).t(), padded_offsets)  # [E, N, K]
    bf16_ref = _grouped_mm(dy_p.t().contiguous(), x_p, padded_offsets)
    _check(oracle, bf16_ref, out, BF16_DB["wgrad"])
    assert (out[1] == 0).all() and (out[5] == 0).all()  # the empty groups


# --------------------------------------------------------------------------- op registration


def test_opcheck():
    """Fake-tensor, autograd-registration and AOT-dispatch checks. The schema check is left
    out: its mutation detector compares the inputs with a multiply that torch has no CPU
    kernel for on float8_e4m3fn; the inputs are compared bit for bit here instead."""
    checks = ("test_faketensor", "test_autograd_registration", "test_aot_dispatch_dynamic")
    a = quantize_rowwise(_bf16_values(32, 64, seed=12))
    b = quantize_rowwise(_bf16_values(32, 64, seed=13))
    w = quantize_experts(_bf16_values(2, 32, 64, seed=14), "K")
    x_t = quantize_colwise(_bf16_values(64, 32, seed=15))
    calls = [
        (mx_gemm, (*a, *b), {"out_dtype": torch.float32}),
        (mx_grouped_gemm, (*a, *w, _offsets((10, 30))), {}),
        (mx_grouped_wgrad, (*x_t, *x_t, _offsets((32, 64))), {}),
    ]
    for op, args, kwargs in calls:
        before = [t.view(torch.uint8).clone() if t.is_floating_point() else t.clone() for t in args]
        torch.library.opcheck(op, args, kwargs, test_utils=checks)
        after = [t.view(torch.uint8) if t.is_floating_point() else t for t in args]
        assert all(torch.equal(x, y) for x, y in zip(before, after, strict=True))


# --------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("path", PATHS)
def test_gpu_sizes(path):
    """Tile-sized and larger shapes with the GPU's 128-wide tiles and every path."""
    a, b, bf16_ref = _dense_operands("forward", M=1000, N=768, K=2048)
    out = mx_gemm(*a, *b, out_dtype=torch.float32, path=path)
    _check(dequantize(*a) @ dequantize(*b).t(), bf16_ref, out, BF16_DB["forward"])
    ends = (300, 300, 301, 900, 1000)
    offsets = _offsets(ends)
    a, b, bf16_ref = _grouped_operands("forward", 1024, E=5, N=768, K=512, offsets=offsets)
    out = mx_grouped_gemm(*a, *b, offsets, out_dtype=torch.float32, path=path)
    oracle = _grouped_mm(dequantize(*a), dequantize(*b).transpose(-2, -1), offsets)
    _check(oracle[:1000], bf16_ref[:1000], out[:1000], BF16_DB["forward"])
    assert (out[1000:] == 0).all()
