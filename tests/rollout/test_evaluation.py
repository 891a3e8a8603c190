"""Held-out pass@1: samples per task at a hint tier, counted per episode, with a Wilson
interval; run through the real agent loop, a real torch policy and the real grader."""

from __future__ import annotations

import dataclasses

import pytest

from etude.common.intervals import wilson_interval
from etude.common.run_config import RolloutConfig, TasksConfig
from etude.environment.local import InProcessEnvironment
from etude.inference.engine import EngineConfig
from etude.inference.torch_backend import TorchBackend
from etude.model.checkpoint import build_model
from etude.model.tokenizer import load_tokenizer
from etude.reward.config import RewardConfig
from etude.reward.grader import Grader
from etude.rollout.agent import EpisodeRunner
from etude.rollout.evaluation import pass_at_1
from etude.rollout.service import repositories_only
from etude.tasks.materialize import materialize
from etude.tasks.taskset import load_taskset
from tests.environment.conftest import make_manager
from tests.inference.conftest import small_moe_config
from tests.rollout.test_prompt import GradeById
from tests.tasks.conftest import bwrap  # noqa: F401


def test_the_wilson_interval_matches_known_values_and_stays_in_0_1():
    assert wilson_interval(0, 10) == pytest.approx((0.0, 0.27754), abs=1e-5)
    assert wilson_interval(5, 10) == pytest.approx((0.23659, 0.76341), abs=1e-5)
    assert wilson_interval(10, 10) == pytest.approx((0.72246, 1.0), abs=1e-5)
    assert wilson_interval(0, 0) == (0.0, 1.0)
    narrow, wide = wilson_interval(50, 100), wilson_interval(5, 10)
    assert wide[0] < narrow[0] < 0.5 < narrow[1] < wide[1]


@pytest.mark.integration
async def test_pass_at_1_counts_every_sampled_episode_at_the_tier_asked(tmp_path, bwrap):  # noqa: F811
    tokenizer = load_tokenizer()
    config = dataclasses.replace(small_moe_config(len(tokenizer)), max_position_embeddings=4096)
    backend = TorchBackend(
        build_model(config, seed=0).eval(), tokenizer, EngineConfig(max_num_seqs=4)
    )
    manager = make_manager(tmp_path)
    environment = InProcessEnvironment(manager)
    cache = tmp_path / "tasks"
    _, held_out = load_taskset(TasksConfig(eval_limit=2, hint_tier=3))
    grader = Grader(RewardConfig(cache_dir=cache, tasks_files=(), timeout_seconds=60), bwrap)
    runner = EpisodeRunner(
        environment, GradeById(environment, grader, held_out), tokenizer,
        RolloutConfig(max_turns=1, max_new_tokens=8, max_episode_tokens=4096),
        repositories_only(lambda task: materialize(task, cache)),
    )  # fmt: skip
    try:
        result = await pass_at_1(
            held_out, runner, backend, tokenizer, tier=3, samples=2, temperature=1.0
        )
    finally:
        await manager.close_all()
        await backend.close()
    # An untrained policy fixes nothing: every episode counts, none passes.
    assert (result.tier, result.episodes, result.passed, result.pass_at_1) == (3, 4, 0, 0.0)
    assert (result.ci_low, result.ci_high) == wilson_interval(0, 4)
    assert sorted(result.rewards) == sorted(t.id for t in held_out)
    assert sum(result.finish_reasons.values()) == 4
