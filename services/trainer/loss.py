"""GRPO advantages and the clipped policy-gradient loss, on plain tensors.

Shape suffixes: G completions of one task (a group), B sequences, T tokens.

The loss is the decoupled PPO objective used for asynchronous RL, where three policies meet:
the behaviour policy that sampled the tokens (inference: its logprobs come with the
trajectory), the proximal policy (the trainer's weights when the step began) and the policy
being optimised. Per token, with advantage A,

    ρ = π_θ / π_prox                         (PPO ratio; clipped to [1 − ε_low, 1 + ε_high])
    w = min(π_prox / π_behaviour, C)         (truncated importance weight, not differentiated)
    loss = −w · min(ρ·A, clip(ρ)·A)

w corrects both the train/inference numerics mismatch and staleness (tokens sampled by an
older version); truncating it at C bounds the variance. With one optimiser step per batch
the proximal policy is θ itself (ρ = 1 in value, its gradient ∇ log π_θ). Tool-result tokens
carry mask 0 and contribute nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from etude.common.run_config import LossSettings

_DEFAULT_SETTINGS = LossSettings()  # frozen, so one instance can be every call's default


def group_advantages(
    rewards_G: torch.Tensor, *, normalize_std: bool = False, eps: float = 1e-6
) -> torch.Tensor:
    """GRPO: each completion's reward minus its group's mean; optionally divided by the
    group's standard deviation (Dr. GRPO argues against it: it up-weights groups whose
    rewards barely differ). A group whose rewards are all equal gets advantages of 0."""
    centred = rewards_G - rewards_G.mean()
    if normalize_std:
        centred = centred / (rewards_G.std(unbiased=False) + eps)
    return centred


@dataclass(frozen=True, slots=True)
class LossStats:
    loss: float
    clip_fraction: float
    """Share of unmasked tokens whose ratio was clipped where it mattered."""
    tis_truncated_fraction: float
    """Share of unmasked tokens whose importance weight hit the cap."""
    mismatch_kl: float
    """k3 estimate of KL(behaviour ‖ proximal) over unmasked tokens: how far inference and
    trainer disagree (numerics, staleness)."""
    kl: float
    """k3 estimate of KL(θ ‖ reference), when reference logprobs were given."""


def _k3(log_ratio: torch.Tensor) -> torch.Tensor:
    """Schulman's unbiased, non-negative KL estimator from log(q/p) samples."""
    return torch.exp(log_ratio) - log_ratio - 1


def importance_weights(
    proximal_logprobs: torch.Tensor, behaviour_logprobs: torch.Tensor, cap: float | None
) -> torch.Tensor:
    """w per token: π_prox / π_behaviour, truncated at `cap` (None: 1, no correction). Each
    token is weighed by the logprob of the version that sampled it, so a partial rollout —
    its tokens from two versions — is corrected token by token."""
    log_weight = (proximal_logprobs - behaviour_logprobs).detach()
    if cap is None:
        return torch.ones_like(log_weight)
    return torch.exp(log_weight).clamp(max=cap)


def policy_loss(
    logprobs_BT: torch.Tensor,
    behaviour_logprobs_BT: torch.Tensor,
    advantages_B: torch.Tensor,
    mask_BT: torch.Tensor,
    config: LossSettings = _DEFAULT_SETTINGS,
    *,
    max_tokens: int | None = None,
    proximal_logprobs_BT: torch.Tensor | None = None,
    reference_logprobs_BT: torch.Tensor | None = None,
) -> tuple[torch.Tensor, LossStats]:
    """`config` is the run config's `trainer.loss`; `max_tokens` the constant of dr_grpo
    (default: this batch's padded length; the trainer passes its step's, so every
    micro-batch divides by the same)."""
    mask = mask_BT.to(logprobs_BT.dtype)
    proximal = (proximal_logprobs_BT if proximal_logprobs_BT is not None else logprobs_BT).detach()
    ratio = torch.exp(logprobs_BT - proximal)
    advantages = advantages_B[:, None].to(logprobs_BT.dtype)
    unclipped = ratio * advantages
    clipped = ratio.clamp(1 - config.clip_low, 1 + config.clip_high) * advantages
    surrogate = torch.minimum(unclipped, clipped)
    log_weight = (proximal - behaviour_logprobs_BT).detach()
    weight = importance_weights(proximal, behaviour_logprobs_BT, config.tis_cap)
    per_token = -weight * surrogate
    if config.kl_coef and reference_logprobs_BT is not None:
        per_token = per_token + config.kl_coef * _k3(reference_logprobs_BT - logprobs_BT)
    loss = _aggregate(per_token, mask, config.aggregation, max_tokens)

    tokens = mask.sum().clamp(min=1)
    with torch.no_grad():
        clip_active = (unclipped != clipped) & (clipped < unclipped)
        kl = (
            float((_k3(reference_logprobs_BT - logprobs_BT) * mask).sum() / tokens)
            if reference_logprobs_BT is not None
            else 0.0
        )
        stats = LossStats(
            loss=float(loss),
            clip_fraction=float((clip_active.to(mask.dtype) * mask).sum() / tokens),
            tis_truncated_fraction=(
                0.0 if config.tis_cap is None
                else float(((torch.exp(log_weight) > config.tis_cap).to(mask.dtype) * mask).sum()
                           / tokens)
            ),
            mismatch_kl=float((_k3(log_weight) * mask).sum() / tokens),
            kl=kl,
        )  # fmt: skip
    return loss, stats


def _aggregate(
    per_token_BT: torch.Tensor, mask_BT: torch.Tensor, aggregation: str, max_tokens: int | None
):
    masked = per_token_BT * mask_BT
    if aggregation == "token_mean":
        return masked.sum() / mask_BT.sum().clamp(min=1)
    if aggregation == "sequence_mean":
        per_sequence = masked.sum(-1) / mask_BT.sum(-1).clamp(min=1)
        return per_sequence.mean()
    if aggregation == "dr_grpo":
        constant = max_tokens or per_token_BT.shape[-1]
        return masked.sum() / (per_token_BT.shape[0] * constant)
    raise ValueError(f"unknown aggregation {aggregation!r}")
