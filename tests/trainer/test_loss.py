"""GRPO advantages and the clipped, importance-weighted policy loss."""

from __future__ import annotations

import math

import pytest
import torch

from etude.common.run_config import LossSettings
from etude.trainer.loss import group_advantages, policy_loss


def test_group_advantages_centre_on_the_group_and_optionally_normalise():
    rewards = torch.tensor([1.0, 0.0, 0.0, 1.0])
    assert group_advantages(rewards).tolist() == [0.5, -0.5, -0.5, 0.5]
    assert group_advantages(torch.ones(4)).abs().sum() == 0  # nothing to learn from a tie
    normalised = group_advantages(torch.tensor([2.0, 0.0, 1.0]), normalize_std=True)
    assert normalised.mean().abs() < 1e-6
    assert normalised.std(unbiased=False).item() == pytest.approx(1.0, abs=1e-4)


def _grad(logprobs, behaviour, advantages, mask, config=None, **kwargs):
    logprobs = logprobs.clone().requires_grad_()
    loss, stats = policy_loss(
        logprobs, behaviour, advantages, mask, config or LossSettings(), **kwargs
    )
    loss.backward()
    return logprobs.grad, stats


def test_on_policy_gradient_is_the_advantage_over_the_token_count_and_masks_tool_results():
    logprobs = torch.log(torch.tensor([[0.5, 0.25, 0.5], [0.1, 0.2, 0.3]]))
    mask = torch.tensor([[1, 1, 0], [1, 0, 1]])  # 0: a tool-result token
    advantages = torch.tensor([1.0, -2.0])
    grad, stats = _grad(logprobs, logprobs, advantages, mask)
    expected = -(advantages[:, None] * mask) / mask.sum()
    assert torch.allclose(grad, expected)
    assert grad[0, 2] == 0 and grad[1, 1] == 0
    assert stats.clip_fraction == 0 and stats.mismatch_kl == pytest.approx(0.0, abs=1e-7)


def test_clipping_stops_the_gradient_only_where_the_ratio_has_moved_too_far():
    proximal = torch.log(torch.tensor([[0.2, 0.2, 0.2, 0.2]]))
    # Ratios 2.0, 1.1, 0.5, 0.9 against the proximal policy.
    logprobs = proximal + torch.log(torch.tensor([[2.0, 1.1, 0.5, 0.9]]))
    mask = torch.ones(1, 4)
    grad_pos, stats = _grad(logprobs, proximal, torch.tensor([1.0]), mask,
                            proximal_logprobs_BT=proximal)  # fmt: skip
    # A > 0: the token already 2x more likely is clipped (no push further); the rest are not.
    assert grad_pos[0, 0] == 0 and (grad_pos[0, 1:] != 0).all()
    assert stats.clip_fraction == 0.25
    grad_neg, _ = _grad(logprobs, proximal, torch.tensor([-1.0]), mask,
                        proximal_logprobs_BT=proximal)  # fmt: skip
    # A < 0: the token already halved is clipped; the 2x token keeps its (negative) push.
    assert grad_neg[0, 2] == 0 and grad_neg[0, 0] != 0


def test_truncated_importance_weight_corrects_and_bounds_the_mismatch():
    logprobs = torch.log(torch.tensor([[0.4, 0.4]]))
    behaviour = torch.log(torch.tensor([[0.1, 0.3]]))  # weights 4 (capped at 2) and 4/3
    mask = torch.ones(1, 2)
    grad, stats = _grad(logprobs, behaviour, torch.tensor([1.0]), mask, LossSettings(tis_cap=2.0))
    assert torch.allclose(grad, torch.tensor([[-2.0, -4.0 / 3.0]]) / 2)
    assert stats.tis_truncated_fraction == 0.5
    expected_kl = sum(r - 1 - math.log(r) for r in (4.0, 4.0 / 3.0)) / 2
    assert stats.mismatch_kl == pytest.approx(expected_kl, rel=1e-5)
    uncapped, _ = _grad(logprobs, behaviour, torch.tensor([1.0]), mask, LossSettings(tis_cap=None))
    assert torch.allclose(uncapped, torch.tensor([[-1.0, -1.0]]) / 2)  # w = 1: no correction


def test_aggregations_weigh_tokens_and_sequences_differently():
    logprobs = torch.zeros(2, 4)
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0]])
    advantages = torch.tensor([1.0, 1.0])
    token, _ = _grad(logprobs, logprobs, advantages, mask, LossSettings(aggregation="token_mean"))
    sequence, _ = _grad(logprobs, logprobs, advantages, mask,
                        LossSettings(aggregation="sequence_mean"))  # fmt: skip
    dr, _ = _grad(logprobs, logprobs, advantages, mask,
                  LossSettings(aggregation="dr_grpo"), max_tokens=8)  # fmt: skip
    assert torch.allclose(token[0], torch.full((4,), -1 / 5))  # every token alike
    assert sequence[1, 0] == pytest.approx(-1 / 2) and sequence[0, 0] == pytest.approx(-1 / 8)
    assert torch.allclose(dr[mask.bool()], torch.full((5,), -1 / 16))  # constant normaliser
    with pytest.raises(ValueError, match="aggregation"):  # the run config refuses it
        LossSettings(aggregation="bogus")


def test_kl_to_a_reference_adds_a_penalty_and_is_reported():
    logprobs = torch.log(torch.tensor([[0.5, 0.5]]))
    reference = torch.log(torch.tensor([[0.25, 0.5]]))
    mask = torch.ones(1, 2)
    config = LossSettings(kl_coef=0.1)
    _, with_ref = _grad(logprobs, logprobs, torch.tensor([0.0]), mask, config,
                        reference_logprobs_BT=reference)  # fmt: skip
    expected = (0.5 - 1 - math.log(0.5)) / 2  # k3 of the first token; the second is 0
    assert with_ref.kl == pytest.approx(expected, rel=1e-5)
    assert with_ref.loss == pytest.approx(0.1 * expected, rel=1e-5)
