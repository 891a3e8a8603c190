"""The MXFP8 reference itself: scale rules from first principles, edge values, layouts."""

from __future__ import annotations

import math

import pytest
import torch

from etude.kernels.mx_reference import (
    E4M3_MAX,
    ScaleRule,
    dequantize,
    mx_gemm,
    quantize_colwise,
    quantize_experts,
    quantize_rowwise,
    scale_bytes,
    sqnr_db,
)


def _exact_rceil(amax: float) -> int:
    """ceil(log2(amax / 448)) + 127 in exact rational arithmetic, clamped."""
    e = math.floor(math.log2(amax)) - 9
    while amax > 448 * 2.0**e:  # the smallest e with amax ≤ 448 · 2^e
        e += 1
    while e > -127 and amax <= 448 * 2.0 ** (e - 1):
        e -= 1
    return min(max(e + 127, 0), 254)


def test_rceil_and_floor_follow_their_definitions_on_many_magnitudes():
    generator = torch.Generator().manual_seed(0)
    mantissas = torch.rand(4000, generator=generator) + 1
    exponents = torch.randint(-120, 120, (4000,), generator=generator).float()
    amax = mantissas * torch.exp2(exponents)
    special = torch.tensor([448.0, 448.0 * 2**5, 449.0, 447.9, 1.75, 1.7500001, 2.0**-126])
    amax = torch.cat([amax, special])
    rceil = scale_bytes(amax, ScaleRule.RCEIL).tolist()
    floor = scale_bytes(amax, ScaleRule.FLOOR).tolist()
    for value, r, f in zip(amax.tolist(), rceil, floor, strict=True):
        assert r == _exact_rceil(value), value
        assert f == min(max(math.floor(math.log2(value)) - 8 + 127, 0), 254), value


def test_special_blocks():
    rows = torch.tensor(
        [[0.0] * 32, [float("nan")] + [1.0] * 31, [float("-inf")] + [1.0] * 31, [1e-40] * 32]
    )
    data, scales = quantize_rowwise(rows)
    assert scales.flatten().tolist() == [0, 255, 255, 0]
    values = dequantize(data, scales)
    assert (values[0] == 0).all() and values[1:3].isnan().all()
    # A subnormal amax gets the smallest scale, 2^-127, which still represents it closely.
    assert torch.allclose(values[3], rows[3], rtol=0.07, atol=0)


@pytest.mark.parametrize("rule", list(ScaleRule))
def test_elements_round_to_nearest_even_and_saturate(rule):
    # One block with amax 448 (scale 2^0 under both rules) and chosen values: E4M3 has 3
    # mantissa bits, so 17 and 19 are ties between 16/18 and 18/20; 464 saturates.
    values = [448.0, 17.0, 19.0, -17.0, 0.0009765625, 0.00146484375, 31.875, -448.0]
    block = torch.tensor(values + [0.0] * 24)
    data, scales = quantize_rowwise(block[None], rule)
    assert scales.item() == 127
    got = data.float()[0, : len(values)].tolist()
    # 2^-10 is the tie between 0 and E4M3's smallest subnormal 2^-9: even is 0.
    assert got == [448.0, 16.0, 20.0, -16.0, 0.0, 0.001953125, 32.0, -448.0]
    if rule == ScaleRule.FLOOR:  # FLOOR keeps the scale and saturates what is above 448
        data, scales = quantize_rowwise(torch.tensor([[464.0] + [0.0] * 31]), rule)
        assert (scales.item(), data.float()[0, 0].item()) == (127, E4M3_MAX)


def test_layouts():
    x = torch.randn(64, 96)
    data, scales = quantize_colwise(x)
    assert data.shape == (96, 64) and scales.shape == (96, 2)
    assert torch.equal(
        data.view(torch.uint8), quantize_rowwise(x.t().contiguous())[0].view(torch.uint8)
    )
    w = torch.randn(3, 64, 96)
    assert quantize_experts(w, "K")[1].shape == (3, 64, 3)
    data_n, scales_n = quantize_experts(w, "N")
    assert data_n.shape == (3, 96, 64) and scales_n.shape == (3, 96, 2)
    with pytest.raises(ValueError, match="multiple of 32"):
        quantize_rowwise(torch.randn(4, 33))


def test_round_trip_and_gemm_quality():
    torch.manual_seed(0)
    x, w = torch.randn(128, 256), torch.randn(64, 256)
    assert sqnr_db(x, dequantize(*quantize_rowwise(x))) >= 18
    y = mx_gemm(quantize_rowwise(x), quantize_rowwise(w))
    assert sqnr_db(x @ w.t(), y) >= 27
