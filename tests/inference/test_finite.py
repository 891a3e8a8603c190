"""The finiteness check every weight update passes: it must catch any NaN or infinity,
wherever it sits and whatever the dtype, and accept finite weights whose sum overflows."""

from __future__ import annotations

import pytest
import torch

from etude.inference.finite import all_finite


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_one_bad_element_anywhere_is_caught(dtype, bad):
    weights = torch.randn(4096, dtype=torch.float32).to(dtype)
    assert all_finite(weights)
    for position in (0, 1234, 4095):
        poisoned = weights.clone()
        poisoned[position] = bad
        assert not all_finite(poisoned), (dtype, bad, position)


def test_infinities_of_both_signs_are_caught_though_their_sum_is_nan():
    assert not all_finite(torch.tensor([1.0, float("inf"), float("-inf")]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_finite_weights_whose_sum_overflows_are_accepted(dtype):
    largest = torch.finfo(dtype).max
    assert all_finite(torch.full((8,), largest, dtype=dtype))


def test_integer_and_float8_tensors():
    assert all_finite(torch.arange(10, dtype=torch.int32))
    scales = torch.tensor([1.0, 2.0, 448.0]).to(torch.float8_e4m3fn)
    assert all_finite(scales)
    assert not all_finite(torch.tensor([1.0, float("nan")]).to(torch.float8_e4m3fn))
