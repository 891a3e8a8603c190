"""The SFT warm start: honest scripted demonstrations at every hint tier, then next-token
training on the turns the solver wrote, so RL starts from a policy that follows the
tool-call format and works from what it sees.

A demonstration is a real episode: the agent loop drives a real environment session at the
request's hint tier and the reward service grades it; only the turns come from the solver
(etude.rollout.scripted) instead of the policy. Each task is demonstrated at every requested
tier in several styles (`variants`). Kept are the demonstrations that submitted, solved their
task (reward 1), fit the episode budget and pass the honesty check on the tokens the policy
was shown (etude.rollout.scripted_honesty). The loss is the mean negative log-likelihood per
token of the demonstrated turns (mask 1: the assistant turns with their end-of-turn token);
the prompt and tool results are context only. A share of the tasks (all their tiers and
variants) is held out, and the held-out NLL is measured before, during and after training.

The warm start in three calls:

    demos = await collect_demonstrations(tasks, runner, tokenizer, tiers=(0, 1, 2, 3),
                                         variants=sft.variants)
    history = sft_train(model, demos, sft, seed=seed, on_step=..., on_held_out=...)
    summary = {**demos.summary(), **history.summary()}
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import torch

from etude.common.payloads import RolloutRequest, Trajectory
from etude.common.run_config import SftConfig
from etude.model.model import Transformer
from etude.rollout.agent import EpisodeRunner, Tokenizer
from etude.rollout.samplers import ScriptedSampler
from etude.rollout.scripted import ScriptedSolver, ScriptError
from etude.rollout.scripted_honesty import derivable_violations, episode_from_text
from etude.rollout.scripted_locate import LocateSolver
from etude.tasks.locate import is_locate
from etude.tasks.task import Task
from etude.trainer.batch import collate, token_logprobs
from etude.trainer.freezing import train_last_layers
from etude.trainer.precision import autocast

log = logging.getLogger(__name__)

AUX_LOSS_COEF = 0.01
DROP_REASONS = ("unscriptable", "unsolved", "over_budget", "dishonest", "failed")
HELD_OUT_BATCH = 4


@dataclass(frozen=True, slots=True)
class Demonstration:
    task_id: str
    tier: int
    variant: int
    style: str
    """The solver's style label (etude.rollout.scripted_styles.Style.label)."""
    trajectory: Trajectory


@dataclass(slots=True)
class TierCounts:
    """How one tier's demonstrations fared: `written` episodes (or attempts), of which
    `kept`; the others were `unscriptable` (no honest script for the task at that tier:
    no hints, no search that finds the location), `unsolved` (no submit or reward below 1),
    `over_budget` (out of turns or tokens), `dishonest` (the check on the shown tokens
    failed, which the solver's own checks should make impossible) or `failed` (the session
    or the grading raised)."""

    written: int = 0
    kept: int = 0
    unscriptable: int = 0
    unsolved: int = 0
    over_budget: int = 0
    dishonest: int = 0
    failed: int = 0
    turns: list[int] = field(default_factory=list)
    """Turns of each kept demonstration."""
    tokens: list[int] = field(default_factory=list)
    """Episode tokens of each kept demonstration."""


class Demonstrations(Sequence[Trajectory]):
    """The kept demonstrations, a sequence of their trajectories, with what each one is
    (`entries`) and how each tier fared (`counts`)."""

    def __init__(self, entries: list[Demonstration], counts: dict[int, TierCounts]) -> None:
        self.entries = entries
        self.counts = counts

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [e.trajectory for e in self.entries[index]]
        return self.entries[index].trajectory

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[Trajectory]:
        return (e.trajectory for e in self.entries)

    def summary(self) -> dict[str, float]:
        """Flat numbers for a run's summary: per tier `sft_tier<k>_written`, `_kept`, the
        drop reasons, mean turns and tokens of the kept ones."""
        out: dict[str, float] = {"demonstrations": len(self.entries)}
        for tier, c in sorted(self.counts.items()):
            prefix = f"sft_tier{tier}_"
            for name in ("written", "kept", *DROP_REASONS):
                out[prefix + name] = getattr(c, name)
            if c.turns:
                out[prefix + "mean_turns"] = sum(c.turns) / len(c.turns)
                out[prefix + "mean_tokens"] = sum(c.tokens) / len(c.tokens)
        return out


async def collect_demonstrations(
    tasks: list[Task],
    runner: EpisodeRunner,
    tokenizer: Tokenizer,
    *,
    tiers: Sequence[int] = (0,),
    variants: int = 1,
    run_id: str = "sft",
    concurrency: int = 4,
    on_done: Callable[[], None] | None = None,
) -> Demonstrations:
    """Scripted episodes of every task at every tier in `variants` styles; the ones that
    submitted, solved the task, fit `max_episode_tokens` and pass the honesty check."""
    if variants < 1:
        raise ValueError(f"variants must be ≥ 1, got {variants}")
    gate = asyncio.Semaphore(concurrency)
    counts = {tier: TierCounts() for tier in tiers}
    decode = getattr(tokenizer, "decode", None)
    rollout = runner.config

    async def demonstrate(index: int, task: Task, tier: int, variant: int):
        c = counts[tier]
        c.written += 1
        async with gate:
            try:
                repository = await asyncio.to_thread(runner.repository_for, task)
                solver = (
                    LocateSolver(task, variant) if is_locate(task) else ScriptedSolver(
                        task, repository, tier=tier, variant=variant,
                        shown_chars=rollout.max_tool_output_chars,
                    )
                )  # fmt: skip
            except ScriptError as error:
                log.info("no demonstration of %s at tier %d: %s", task.id, tier, error)
                c.unscriptable += 1
                return None
            request = RolloutRequest(
                run_id=run_id, task_id=task.id, group_id=f"demo-{index}-t{tier}-v{variant}",
                sample_index=0, min_policy_version=0, hint_tier=tier,
            )  # fmt: skip
            sampler = ScriptedSampler(solver, tokenizer)
            try:
                trajectory = await runner.run(request, task, sampler)
            except Exception:  # a session or grade that failed loses this one, not the set
                log.warning("demonstration of %s at tier %d failed", task.id, tier, exc_info=True)
                c.failed += 1
                return None
        if on_done is not None:
            on_done()
        if sampler.error is not None:
            log.info("no demonstration of %s at tier %d: %s", task.id, tier, sampler.error)
            c.unscriptable += 1
            return None
        if trajectory.finish_reason in ("max_turns", "max_tokens") or (
            len(trajectory.token_ids) > rollout.max_episode_tokens
        ):
            c.over_budget += 1
            return None
        if trajectory.finish_reason != "submitted" or trajectory.correctness < 1.0:
            c.unsolved += 1
            return None
        if decode is not None:
            problems = derivable_violations(episode_from_text(decode(trajectory.token_ids)))
            if problems:
                log.warning("dishonest demonstration of %s: %s", task.id, problems[:3])
                c.dishonest += 1
                return None
        c.kept += 1
        c.turns.append(trajectory.turns)
        c.tokens.append(len(trajectory.token_ids))
        return Demonstration(task.id, tier, variant, solver.label, trajectory)

    jobs = [
        demonstrate(index, task, tier, variant)
        for index, task in enumerate(tasks)
        for tier in tiers
        for variant in range(variants)
    ]
    done = await asyncio.gather(*jobs)
    return Demonstrations([d for d in done if d is not None], counts)


# -- training --------------------------------------------------------------------------------


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
