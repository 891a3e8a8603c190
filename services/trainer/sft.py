"""The SFT warm start: demonstrations from the scripted solver, then next-token training on
the turns it wrote, so RL starts from a policy that follows the tool-call format.

A demonstration is a real episode: the agent loop drives a real environment session and the
reward service grades it; only the turns come from the solver instead of the policy. Only
demonstrations that solved their task (reward 1) and fit the episode budget are kept. The
loss is the mean negative log-likelihood of the demonstrated tokens (mask 1), tool results
and the prompt being context only.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable
from dataclasses import dataclass

import torch

from etude.common.payloads import RolloutRequest, Trajectory
from etude.common.run_config import SftConfig
from etude.model.model import Transformer
from etude.rollout.agent import EpisodeRunner, Tokenizer
from etude.rollout.samplers import ScriptedSampler
from etude.rollout.scripted import ScriptedSolver, ScriptError
from etude.tasks.task import Task
from etude.trainer.batch import collate, token_logprobs

log = logging.getLogger(__name__)


async def collect_demonstrations(
    tasks: list[Task],
    runner: EpisodeRunner,
    tokenizer: Tokenizer,
    *,
    run_id: str = "sft",
    concurrency: int = 4,
    on_done: Callable[[], None] | None = None,
) -> list[Trajectory]:
    """One scripted episode per task; the solved ones that fit `max_episode_tokens`."""
    gate = asyncio.Semaphore(concurrency)

    async def demonstrate(index: int, task: Task) -> Trajectory | None:
        try:
            solver = ScriptedSolver(task)
        except ScriptError as error:
            log.info("no demonstration for %s: %s", task.id, error)
            return None
        request = RolloutRequest(
            run_id=run_id, task_id=task.id, group_id=f"demo-{index}", sample_index=0,
            min_policy_version=0,
        )  # fmt: skip
        async with gate:
            trajectory = await runner.run(request, task, ScriptedSampler(solver, tokenizer))
        if on_done is not None:
            on_done()
        fits = len(trajectory.token_ids) <= runner.limits.max_episode_tokens
        return trajectory if trajectory.reward >= 1.0 and fits else None

    done = await asyncio.gather(*(demonstrate(i, t) for i, t in enumerate(tasks)))
    return [t for t in done if t is not None]


@dataclass(frozen=True, slots=True)
class SftStep:
    step: int
    loss: float
    tokens: int


def nll_loss(model: Transformer, trajectories: list[Trajectory]) -> tuple[torch.Tensor, int]:
    batch = collate(trajectories)
    logprobs, aux = token_logprobs(model, batch)
    tokens = batch.mask_BT.sum().clamp(min=1)
    loss = -(logprobs * batch.mask_BT).sum() / tokens
    return loss + (0.01 * aux if aux is not None else 0.0), int(tokens)


def sft_train(
    model: Transformer,
    demonstrations: list[Trajectory],
    config: SftConfig,
    *,
    seed: int = 0,
    on_step: Callable[[SftStep], None] | None = None,
) -> list[SftStep]:
    """`config.steps` AdamW steps on shuffled mini-batches of the demonstrations."""
    if not demonstrations:
        raise ValueError("no demonstrations to train on")
    optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=0.0)
    rng = random.Random(seed)
    order: list[int] = []
    history = []
    model.train()
    for step in range(1, config.steps + 1):
        if len(order) < config.batch_size:
            order += rng.sample(range(len(demonstrations)), len(demonstrations))
        picked, order = order[: config.batch_size], order[config.batch_size :]
        loss, tokens = nll_loss(model, [demonstrations[i] for i in picked])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        result = SftStep(step, loss.item(), tokens)
        history.append(result)
        if on_step is not None:
            on_step(result)
    model.eval()
    return history
