"""Scenarios: heavy-tailed spreads that mean what they say, bundled and user files, recorded
episode shapes replayed."""

from __future__ import annotations

import random

import pytest

from etude.common.payloads import Trajectory
from etude.sim.episodes import ShapeSource, read_shapes, record_shapes, shape_of
from etude.sim.scenario import EpisodeShapes, ScenarioError, Spread, load_scenario


def test_a_spread_has_the_median_and_tail_it_names():
    spread = Spread(median=100, tail=10)
    rng = random.Random(0)
    values = sorted(spread.draw(rng) for _ in range(40_000))
    p50, p99 = values[len(values) // 2], values[int(0.99 * len(values))]
    assert p50 == pytest.approx(100, rel=0.05)
    assert p99 / p50 == pytest.approx(10, rel=0.1)


def test_the_default_episodes_have_a_tenfold_tail_of_generated_tokens():
    source = ShapeSource(load_scenario("default").episodes, seed=0)
    tokens = sorted(source.shape(f"rollout-{i}").tokens for i in range(8000))
    assert tokens[int(0.99 * len(tokens))] / tokens[len(tokens) // 2] == pytest.approx(10, rel=0.2)


def test_an_episode_shape_follows_from_its_key_and_ends_by_submitting():
    one, other = ShapeSource(EpisodeShapes(), 3), ShapeSource(EpisodeShapes(), 3)
    assert one.shape("run:g1:0") == other.shape("run:g1:0")
    assert one.shape("run:g1:0") != one.shape("run:g1:1")
    shape = one.shape("run:g1:0")
    assert shape.turns[-1].tool_calls == 0
    assert all(t.tool_calls >= 1 for t in shape.turns[:-1])


def test_a_scenario_file_overrides_the_defaults_and_bad_ones_say_why(tmp_path):
    path = tmp_path / "fleet.yaml"
    path.write_text("time_scale: 5\nengine:\n  max_num_seqs: 8\n")
    scenario = load_scenario(path)
    assert scenario.time_scale == 5 and scenario.engine.max_num_seqs == 8
    assert load_scenario(path, time_scale=7).time_scale == 7
    path.write_text("engine:\n  max_num_seqs: -1\n")
    with pytest.raises(ScenarioError, match="max_num_seqs"):
        load_scenario(path)
    path.write_text("time_scale: .nan\n")
    with pytest.raises(ScenarioError):
        load_scenario(path)
    with pytest.raises(ScenarioError, match="bundled: default"):
        load_scenario("no-such-scenario")


def _trajectory(mask: list[int], calls: list[int], reward: float) -> Trajectory:
    return Trajectory(
        run_id="r", task_id="t", group_id="g", sample_index=0, token_ids=[1] * len(mask),
        logprobs=[0.0] * len(mask), policy_versions=[1] * len(mask), loss_mask=mask,
        reward=reward, calls_per_turn=calls,
    )  # fmt: skip


def test_recorded_trajectories_replay_as_episode_shapes(tmp_path):
    recorded = _trajectory([0, 0, 1, 1, 1, 0, 0, 1, 1, 0, 1], [2, 1, 0], 1.0)
    shape = shape_of(recorded)
    assert [(t.tokens, t.tool_calls) for t in shape.turns] == [(3, 2), (2, 1), (1, 0)]
    assert shape.solved
    path = tmp_path / "shapes.jsonl"
    assert record_shapes([recorded, _trajectory([0, 1], [0], 0.0)], path) == 2
    assert read_shapes(path)[0] == shape
    replayed = ShapeSource(EpisodeShapes(replay=path), seed=0)
    assert {replayed.shape(f"k{i}").tokens for i in range(50)} == {6, 1}
    path.write_text('{"turns": [[0, 1]]}\n')
    with pytest.raises(ValueError, match="at least one token"):
        read_shapes(path)
