"""The SFT warm start's training: next-token training on the turns a scripted solver wrote,
so RL starts from a policy that follows the tool-call format and works from what it sees.

The demonstrations come from the rollout (etude.rollout.client.InProcessEpisodes
.demonstrations: honest scripted episodes at every hint tier, real sessions, real grading).
The loss is the mean negative log-likelihood per token of the demonstrated turns (mask 1: the
assistant turns with their end-of-turn token); the prompt and tool results are context only.
A share of the tasks (all their tiers and variants) is held out, and the held-out NLL is
measured before, during and after training.

The warm start in three calls:

    demos = await episodes.demonstrations(tasks, tiers=(0, 1, 2, 3), variants=sft.variants)
    history = sft_train(model, demos, sft, seed=seed, on_step=..., on_held_out=...)
    summary = {**demos.summary(), **history.summary()}
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from etude.common.allocator import release_free_memory
from etude.common.payloads import Trajectory
from etude.common.run_config import SftConfig
from etude.model.model import Transformer
from etude.trainer.batch import collate, token_logprobs
from etude.trainer.freezing import train_last_layers
from etude.trainer.precision import autocast

AUX_LOSS_COEF = 0.01
HELD_OUT_BATCH = 4


@dataclass(frozen=True, slots=True)
class SftStep:
    step: int
    loss: float
    tokens: int


@dataclass(frozen=True, slots=True)
class HeldOutLoss:
    step: int
    """Optimizer steps taken when it was measured (0: before training)."""
    nll: float
    """Mean negative log-likelihood per demonstrated token of the held-out tasks."""
    tokens: int


@dataclass(frozen=True, slots=True)
class SftHistory(Sequence[SftStep]):
    """The training steps (a sequence of them) and the held-out losses, with the tasks on
    either side of the split."""

    steps: list[SftStep]
    held_out: list[HeldOutLoss]
    train_tasks: list[str]
    held_out_tasks: list[str]
    trainable: list[str]
    """Names of the parameters SFT trained."""

    def __getitem__(self, index):
        return self.steps[index]

    def __len__(self) -> int:
        return len(self.steps)

    def summary(self) -> dict[str, float]:
        out: dict[str, float] = {"sft_steps": len(self.steps)}
        if self.steps:
            out["sft_first_loss"], out["sft_final_loss"] = self.steps[0].loss, self.steps[-1].loss
        if self.held_out:
            out["sft_held_out_first_nll"] = self.held_out[0].nll
            out["sft_held_out_final_nll"] = self.held_out[-1].nll
        return out


def split_by_task(
    trajectories: Sequence[Trajectory], held_out_fraction: float, seed: int = 0
) -> tuple[list[Trajectory], list[Trajectory]]:
    """(train, held out): a share of the *tasks* goes to the held-out side with all their
    demonstrations (every tier and variant), so the held-out loss measures tasks the model
    did not train on. At least one task stays on each side once there are two tasks and the
    fraction is above 0."""
    if not 0 <= held_out_fraction < 1:
        raise ValueError(f"held_out_fraction must be in [0, 1), got {held_out_fraction}")
    tasks = sorted({t.task_id for t in trajectories})
    random.Random(seed).shuffle(tasks)
    count = round(held_out_fraction * len(tasks))
    if held_out_fraction > 0 and len(tasks) >= 2:
        count = min(max(count, 1), len(tasks) - 1)
    held = set(tasks[:count])
    train = [t for t in trajectories if t.task_id not in held]
    return train, [t for t in trajectories if t.task_id in held]


def nll_loss(model: Transformer, trajectories: list[Trajectory]) -> tuple[torch.Tensor, int]:
    """Mean NLL per demonstrated token (mask 1) and the number of those tokens; the output
    layer runs only at those tokens."""
    batch = collate(trajectories)
    # Demonstrations of one batch share at least the system prompt: it runs once.
    logprobs, aux = token_logprobs(model, batch, shared_prefix=True)
    tokens = batch.mask_BT.sum().clamp(min=1)
    loss = -(logprobs * batch.mask_BT).sum() / tokens
    return loss + (AUX_LOSS_COEF * aux if aux is not None else 0.0), int(tokens)


@torch.no_grad()
def held_out_nll(model: Transformer, trajectories: list[Trajectory]) -> tuple[float, int]:
    """Mean NLL per demonstrated token over all of `trajectories` (no MoE auxiliary loss)."""
    was_training = model.training
    model.eval()
    total, tokens = 0.0, 0
    for start in range(0, len(trajectories), HELD_OUT_BATCH):
        batch = collate(trajectories[start : start + HELD_OUT_BATCH])
        logprobs, _ = token_logprobs(model, batch, shared_prefix=True)
        total -= float((logprobs * batch.mask_BT).sum())
        tokens += int(batch.mask_BT.sum())
    model.train(was_training)
    return total / max(tokens, 1), tokens


def sft_train(
    model: Transformer,
    demonstrations: Sequence[Trajectory],
    config: SftConfig,
    *,
    seed: int = 0,
    held_out_every: int | None = None,
    on_step: Callable[[SftStep], None] | None = None,
    on_held_out: Callable[[HeldOutLoss], None] | None = None,
) -> SftHistory:
    """`config.steps` AdamW steps on shuffled mini-batches of the training side's
    demonstrations, training only the last `config.trainable_layers` decoder layers (and
    the final norm; with tied embeddings the embedding, which is also the output layer,
    stays frozen unless every layer trains). The held-out NLL is measured before the first
    step, every `held_out_every` steps (default: a quarter of the steps) and after the last.
    Which parameters train is restored afterwards, so a later phase (RL) trains what it
    chose."""
    train, held = split_by_task(demonstrations, config.held_out_fraction, seed)
    if not train:
        raise ValueError("no demonstrations to train on")
    every = held_out_every or max(1, math.ceil(config.steps / 4))
    flags = {name: p.requires_grad for name, p in model.named_parameters()}
    trainable = train_last_layers(model, config.trainable_layers)
    try:
        parameters = [p for p in model.parameters() if p.requires_grad]
        optimizer = torch.optim.AdamW(parameters, lr=config.lr, weight_decay=0.0)
        rng = random.Random(seed)
        order: list[int] = []
        steps: list[SftStep] = []
        losses: list[HeldOutLoss] = []

        def measure(step: int) -> None:
            if held:
                with autocast(config.autocast):
                    nll, tokens = held_out_nll(model, held)
                losses.append(HeldOutLoss(step, nll, tokens))
                if on_held_out is not None:
                    on_held_out(losses[-1])

        measure(0)
        model.train()
        for step in range(1, config.steps + 1):
            if len(order) < config.batch_size:
                order += rng.sample(range(len(train)), len(train))
            picked, order = order[: config.batch_size], order[config.batch_size :]
            with autocast(config.autocast):
                loss, tokens = nll_loss(model, [train[i] for i in picked])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(parameters, 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            steps.append(SftStep(step, loss.item(), tokens))
            del loss
            release_free_memory()
            if on_step is not None:
                on_step(steps[-1])
            if step % every == 0 or step == config.steps:
                measure(step)
                model.train()
        model.eval()
    finally:
        for name, parameter in model.named_parameters():
            parameter.requires_grad_(flags[name])
    return SftHistory(
        steps,
        losses,
        sorted({t.task_id for t in train}),
        sorted({t.task_id for t in held}),
        trainable,
    )
