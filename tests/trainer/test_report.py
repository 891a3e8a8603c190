"""Where a step's numbers go: metrics.jsonl, TensorBoard event files and the trainer's
Prometheus gauges, for the behaviour summary in particular."""

from __future__ import annotations

import math

import pytest
from prometheus_client import REGISTRY
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from etude.common.payloads import Trajectory
from etude.rollout.types import behaviour_summary
from etude.trainer.report import Reporter

GAUGES = {
    "tool_calls_per_turn": "etude_trainer_tool_calls_per_turn",
    "parallel_share": "etude_trainer_parallel_share",
    "reads_before_first_edit": "etude_trainer_reads_before_first_edit",
    "blind_edit_rate": "etude_trainer_blind_edit_rate",
    "turns_per_episode": "etude_trainer_turns_per_episode",
    "generated_tokens_per_episode": "etude_trainer_generated_tokens_per_episode",
    "malformed_rate": "etude_trainer_malformed_rate",
}


def episode(calls_per_turn: list[int], reason: str, **behaviour) -> Trajectory:
    mask = [0, 0, 1, 1, 1]
    return Trajectory(
        run_id="r", task_id="t", group_id="g", sample_index=0, token_ids=[5] * len(mask),
        logprobs=[0.0] * len(mask), policy_versions=[-1] * len(mask), loss_mask=mask,
        reward=0.0, turns=len(calls_per_turn), calls_per_turn=calls_per_turn,
        finish_reason=reason, **behaviour,
    )  # fmt: skip


EDITING = [
    episode([3, 1], "submitted", valid_calls=4, edits=2, blind_edits=1, reads_before_first_edit=3),
    episode([1, 0, 2], "max_turns", valid_calls=3, malformed_calls=1),
]


def _tensorboard_scalars(directory) -> dict[str, list[tuple[int, float]]]:
    events = EventAccumulator(str(directory)).Reload()
    return {
        tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]
    }


def test_a_steps_behaviour_reaches_metrics_jsonl_tensorboard_and_prometheus(tmp_path):
    summary = behaviour_summary(EDITING)
    assert summary["parallel_share"] == 2 / 5 and summary["blind_edit_rate"] == 0.5
    reporter = Reporter(tmp_path)
    reporter.log(7, {"loss": 0.25, **summary})

    [record] = reporter.history()
    assert record["step"] == 7 and {k: record[k] for k in summary} == summary

    scalars = _tensorboard_scalars(tmp_path / "tensorboard")
    for key, value in summary.items():
        [(step, logged)] = scalars[f"rl/{key}"]
        assert step == 7 and logged == pytest.approx(value)

    for key, name in GAUGES.items():
        assert REGISTRY.get_sample_value(name) == pytest.approx(summary[key]), name
    for reason, share in [("submitted", 0.5), ("max_turns", 0.5), ("timeout", 0.0)]:
        assert REGISTRY.get_sample_value("etude_trainer_finish_share", {"reason": reason}) == share


def test_a_ratio_the_step_could_not_measure_reads_nan_not_the_last_steps_value(tmp_path):
    reporter = Reporter(tmp_path, tensorboard=False)
    reporter.log(1, behaviour_summary(EDITING))
    assert REGISTRY.get_sample_value("etude_trainer_blind_edit_rate") == 0.5
    without_edits = behaviour_summary([episode([1], "no_tool_call", valid_calls=1)])
    reporter.log(2, without_edits)
    assert math.isnan(REGISTRY.get_sample_value("etude_trainer_blind_edit_rate"))
    assert math.isnan(REGISTRY.get_sample_value("etude_trainer_reads_before_first_edit"))
    assert REGISTRY.get_sample_value("etude_trainer_malformed_rate") == 0.0
    assert "blind_edit_rate" not in reporter.history()[-1]


def test_an_evaluations_behaviour_is_logged_under_its_phase_and_leaves_the_gauges_alone(tmp_path):
    reporter = Reporter(tmp_path)
    reporter.log(3, behaviour_summary(EDITING))
    solo = behaviour_summary([episode([1], "no_tool_call", valid_calls=1)])
    reporter.log(0, {"pass_at_1": 0.0, **solo}, "eval_after")
    [record] = reporter.history("eval_after")
    assert record["turns_per_episode"] == 1.0 and record["finish_no_tool_call"] == 1.0
    assert _tensorboard_scalars(tmp_path / "tensorboard")["eval_after/turns_per_episode"] == [
        (0, 1.0)
    ]
    assert REGISTRY.get_sample_value("etude_trainer_turns_per_episode") == 2.5  # the RL step's


def test_the_curve_shows_held_out_pass_at_1_before_and_after_with_its_intervals(tmp_path):
    from PIL import Image

    from etude.trainer.report import held_out_points

    def evaluation(passed: int, low: float, high: float) -> dict:
        tier = {"pass_at_1": passed / 88, "ci_low": low, "ci_high": high, "passed": passed,
                "episodes": 88}  # fmt: skip
        tier_0 = {**tier, "pass_at_1": 0.0, "ci_low": 0.0, "ci_high": 0.04, "passed": 0}
        return {"tier": 3, "by_tier": {"3": tier, "0": tier_0}}

    summary = {"steps": 4, "eval_before": evaluation(26, 0.21, 0.40),
               "eval_after": evaluation(47, 0.43, 0.63)}  # fmt: skip
    points = held_out_points(summary)
    assert [(p["tier"], p["step"]) for p in points] == [("3", 0), ("0", 0), ("3", 4), ("0", 4)]
    assert (points[2]["pass"], points[2]["low"], points[2]["high"]) == (47 / 88, 0.43, 0.63)
    assert held_out_points({"steps": 4}) == []  # a run without evaluations

    reporter = Reporter(tmp_path, tensorboard=False)
    for step, reward in enumerate((0.3, 0.5, 0.6, 0.8), start=1):
        reporter.log(step, {"reward_mean": reward, "pass_rate": reward})
    with_points = Image.open(reporter.finish(summary)).convert("RGB")
    plain = Reporter(tmp_path / "plain", tensorboard=False)
    for step, reward in enumerate((0.3, 0.5, 0.6, 0.8), start=1):
        plain.log(step, {"reward_mean": reward, "pass_rate": reward})
    without = Image.open(plain.finish({"steps": 4})).convert("RGB")
    # The held-out series draws a third and a fourth colour (matplotlib's C2, C3).
    assert {(44, 160, 44), (214, 39, 40)} <= set(with_points.getdata())
    assert not {(44, 160, 44), (214, 39, 40)} & set(without.getdata())


def test_the_curve_shows_reward_and_pass_rate_apart_each_with_its_spread():
    """Both at 0 (nothing learned yet) must still be two visible curves, and a step's
    spread is drawn: reward ± one std, pass rate within its 95% interval over the rollouts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from etude.trainer.report import reward_curve_figure

    history = [
        {"step": 1, "reward_mean": 0.0, "reward_std": 0.0, "pass_rate": 0.0, "sequences": 32.0},
        {"step": 2, "reward_mean": 0.4, "reward_std": 0.2, "pass_rate": 0.25, "sequences": 32.0},
    ]
    figure = reward_curve_figure(history)
    try:
        rewards, passes = figure.axes
        assert [list(line.get_ydata()) for line in rewards.lines] == [[0.0, 0.4]]
        assert [list(line.get_ydata()) for line in passes.lines] == [[0.0, 0.25]]
        [reward_band] = rewards.collections
        ys = reward_band.get_paths()[0].vertices[:, 1]
        assert (ys.min(), ys.max()) == (pytest.approx(0.0), pytest.approx(0.6))
        [pass_band] = passes.collections
        ys = pass_band.get_paths()[0].vertices[:, 1]
        # 8 of 32 passed: Wilson's 95% interval reaches 0.421; 0 of 32 starts at 0.
        assert (ys.min(), ys.max()) == (pytest.approx(0.0), pytest.approx(0.4211, abs=1e-3))
    finally:
        plt.close(figure)
