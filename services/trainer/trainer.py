"""One GRPO step on the policy, plain PyTorch (no queues, no gRPC): groups of trajectories
in, an optimizer step and its statistics out.

    advantages per group → padded batch → micro-batches: logprobs, loss, backward
    → clip the gradient norm → AdamW step

Loss per micro-batch = policy loss (decoupled PPO with truncated importance weights, see
loss.py) + aux_loss_coef · MoE load balancing − entropy_coef · entropy, each weighted by the
micro-batch's share of the step (tokens for token_mean, sequences otherwise), so the
accumulated gradient equals one pass over the whole batch.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass

import torch

from etude.common.allocator import release_free_memory
from etude.common.payloads import Trajectory
from etude.common.run_config import TrainerConfig
from etude.model.model import Transformer
from etude.trainer.batch import Batch, collate, token_logprobs, token_logprobs_and_entropy
from etude.trainer.freezing import train_last_layers, trainable_parameters
from etude.trainer.loss import group_advantages, policy_loss
from etude.trainer.precision import autocast


@dataclass(frozen=True, slots=True)
class StepStats:
    loss: float
    policy_loss: float
    aux_loss: float
    entropy: float
    grad_norm: float
    clip_fraction: float
    tis_truncated_fraction: float
    mismatch_kl: float
    """k3 KL(behaviour ‖ trainer) over sampled tokens: the train/inference mismatch."""
    kl: float
    reward_mean: float
    reward_std: float
    pass_rate: float
    tokens: int
    """Sampled (trained-on) tokens in the step."""
    sequences: int
    seconds: float

    def as_dict(self) -> dict[str, float]:
        return {k: float(v) for k, v in asdict(self).items()}


def build_optimizer(model: Transformer, lr: float, weight_decay: float) -> torch.optim.AdamW:
    """AdamW over the parameters that train (`trainer.trainable_layers`)."""
    return torch.optim.AdamW(trainable_parameters(model), lr=lr, weight_decay=weight_decay)


def advantages_of(groups: list[list[Trajectory]], normalize_std: bool) -> torch.Tensor:
    return torch.cat([
        group_advantages(torch.tensor([t.reward for t in g]), normalize_std=normalize_std)
        for g in groups
    ])  # fmt: skip


def _rows(batch: Batch, rows: slice) -> Batch:
    return Batch(*(getattr(batch, f)[rows] for f in Batch.__dataclass_fields__))


class PolicyTrainer:
    def __init__(
        self, model: Transformer, config: TrainerConfig, reference: Transformer | None = None
    ) -> None:
        self.model = model
        self.config = config
        self.reference = reference
        self.trainable = train_last_layers(model, config.trainable_layers)
        self.optimizer = build_optimizer(model, config.lr, config.weight_decay)

    def step(self, groups: list[list[Trajectory]]) -> StepStats:
        started = time.perf_counter()
        trajectories = [t for g in groups for t in g]
        advantages_B = advantages_of(groups, self.config.loss.normalize_std)
        batch = collate(trajectories)
        B = len(trajectories)
        total_tokens = float(batch.mask_BT.sum().clamp(min=1))
        by_tokens = self.config.loss.aggregation == "token_mean"
        max_tokens = batch.mask_BT.shape[1]  # dr_grpo's constant, one for the whole step
        sums = dict.fromkeys(("loss", "policy", "aux", "entropy", "clip", "tis", "mm", "kl"), 0.0)
        self.model.train()
        for start in range(0, B, self.config.micro_batch):
            rows = slice(start, min(B, start + self.config.micro_batch))
            micro = _rows(batch, rows)
            tokens = float(micro.mask_BT.sum())
            weight = tokens / total_tokens if by_tokens else (rows.stop - rows.start) / B
            if tokens == 0 and by_tokens:
                continue
            with autocast(self.config.autocast):
                logprobs, entropy_BT, aux = token_logprobs_and_entropy(
                    self.model, micro, policy_tokens_only=self.config.policy_token_logits,
                    shared_prefix=self.config.shared_prefix,
                )  # fmt: skip
            reference = self._reference_logprobs(micro)
            policy, stats = policy_loss(
                logprobs, micro.behaviour_logprobs_BT, advantages_B[rows], micro.mask_BT,
                self.config.loss, max_tokens=max_tokens, reference_logprobs_BT=reference,
            )  # fmt: skip
            entropy = (entropy_BT * micro.mask_BT).sum() / max(tokens, 1.0)
            aux = aux if aux is not None else torch.zeros(())
            total = policy + self.config.loss.aux_loss_coef * aux
            total = total - self.config.loss.entropy_coef * entropy
            (total * weight).backward()
            token_share = tokens / total_tokens
            for key, value in (
                ("loss", total.item() * weight), ("policy", policy.item() * weight),
                ("aux", aux.item() * weight), ("entropy", entropy.item() * token_share),
                ("clip", stats.clip_fraction * token_share),
                ("tis", stats.tis_truncated_fraction * token_share),
                ("mm", stats.mismatch_kl * token_share), ("kl", stats.kl * token_share),
            ):  # fmt: skip
                sums[key] += value
        grad_norm = torch.nn.utils.clip_grad_norm_(
            trainable_parameters(self.model), self.config.grad_clip
        )
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        release_free_memory()  # the step's activations, fragmented in the heap otherwise
        rewards = batch.rewards_B
        return StepStats(
            loss=sums["loss"], policy_loss=sums["policy"], aux_loss=sums["aux"],
            entropy=sums["entropy"], grad_norm=float(grad_norm), clip_fraction=sums["clip"],
            tis_truncated_fraction=sums["tis"], mismatch_kl=sums["mm"], kl=sums["kl"],
            reward_mean=float(rewards.mean()), reward_std=float(rewards.std(unbiased=False)),
            # Correctness, not reward ≥ 1: a turn cost takes a solved episode's reward below 1.
            pass_rate=sum(t.correctness >= 1.0 for t in trajectories) / B,
            tokens=int(batch.mask_BT.sum()), sequences=B, seconds=time.perf_counter() - started,
        )  # fmt: skip

    @torch.no_grad()
    def _reference_logprobs(self, micro: Batch) -> torch.Tensor | None:
        if self.reference is None or not self.config.loss.kl_coef:
            return None
        c = self.config
        with autocast(c.autocast):
            return token_logprobs(
                self.reference, micro, policy_tokens_only=c.policy_token_logits,
                shared_prefix=c.shared_prefix,
            )[0]  # fmt: skip
