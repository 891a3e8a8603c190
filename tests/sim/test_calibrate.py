"""Calibrating a scenario: spreads fitted to what was recorded, the command's scenario loads
and replays the recorded shapes, bad input says what is wrong, the bundled `local` loads."""

from __future__ import annotations

import math
import random

import msgspec
import pytest

from etude.common.payloads import Trajectory
from etude.sim.calibrate import (
    CalibrationError,
    EngineTimings,
    RecordedCall,
    RecordedEpisode,
    calibrate,
    fit_engine,
    fit_spread,
    main,
    read_episodes,
)
from etude.sim.episodes import ShapeSource, read_shapes
from etude.sim.scenario import Spread, load_scenario


def _trajectory(turns: list[tuple[int, int]], reward: float = 0.0, prompt: int = 5) -> Trajectory:
    """`turns`: (tokens written, tool calls) each, with 3 tokens of tool results between."""
    mask = [0] * prompt
    for index, (tokens, _) in enumerate(turns):
        mask += [1] * tokens + ([0] * 3 if index < len(turns) - 1 else [])
    return Trajectory(
        run_id="r", task_id="t", group_id="g", sample_index=0, token_ids=[1] * len(mask),
        logprobs=[0.0] * len(mask), policy_versions=[1] * len(mask), loss_mask=mask,
        reward=reward, turns=len(turns), calls_per_turn=[c for _, c in turns],
    )  # fmt: skip


def _episode(index: int) -> RecordedEpisode:
    rng = random.Random(index)
    turns = [(rng.randrange(10, 60), rng.randrange(0, 3)) for _ in range(rng.randrange(1, 5))]
    calls = [
        RecordedCall(
            name=rng.choice(["read_file", "grep"]),
            seconds=rng.uniform(0.01, 0.2),
            output_tokens=rng.randrange(5, 400),
        )
        for _ in range(sum(c for _, c in turns))
    ]
    return RecordedEpisode(
        trajectory=_trajectory(turns, reward=float(index % 4 == 0)), calls=calls,
        session_seconds=rng.uniform(0.01, 0.05), score_seconds=rng.uniform(1.0, 3.0),
    )  # fmt: skip


ENGINE = EngineTimings(
    max_num_seqs=8,
    decode_steps=[(1, 0.012), (2, 0.014), (4, 0.018), (8, 0.026)],
    prefills=[(100, 0.01), (400, 0.04)],
    prefix_cache_tokens=0,
    parameter_bytes=4e7,
    weight_load_seconds=0.05,
    note="made up",
)


def test_a_fit_recovers_the_median_and_tail_of_a_lognormal_sample():
    rng = random.Random(0)
    known = Spread(median=300, tail=8)
    fit = fit_spread(known.draw(rng) for _ in range(20_000))
    assert fit.spread is not None and fit.samples == 20_000 and fit.note == ""
    assert fit.spread.median == pytest.approx(300, rel=0.05)
    assert fit.spread.tail == pytest.approx(8, rel=0.1)
    assert fit.spread.low > 0 and fit.spread.high > 8 * 300


def test_a_small_sample_gets_a_guessed_tail_and_nothing_measured_keeps_the_default():
    rng = random.Random(1)
    known = Spread(median=2.0, tail=5)
    few = fit_spread(known.draw(rng) for _ in range(12))
    assert few.spread is not None and "guess" in few.note
    assert 1.5 < few.spread.tail < 20  # the lognormal's own estimate, not the sample's max
    assert fit_spread([4.0]).spread == Spread(median=4.0, tail=1.0, low=4.0, high=4.0)
    assert fit_spread([0.0, -1.0]).spread is None
    assert fit_spread([]).describe().startswith("not measured")
    clamped = fit_spread([1.0] * 98 + [1e9, 1e9])
    assert clamped.spread is not None and clamped.spread.tail == 1e6


def test_the_engine_fit_recovers_a_linear_step_and_prefill():
    engine = fit_engine(ENGINE)
    assert engine.max_num_seqs == 8 and engine.prefix_cache_tokens == 0
    assert engine.decode_step_seconds == pytest.approx(0.010, rel=1e-6)
    assert engine.decode_step_seconds_per_sequence == pytest.approx(0.002, rel=1e-6)
    assert engine.prefill_seconds_per_token == pytest.approx(1e-4, rel=1e-6)
    assert engine.weight_load_seconds == pytest.approx(0.05)
    with pytest.raises(CalibrationError, match="two x values"):
        fit_engine(msgspec.structs.replace(ENGINE, decode_steps=[(4, 0.02), (4, 0.03)]))


def test_calibrate_fits_shapes_and_latencies_per_tool():
    episodes = [_episode(i) for i in range(40)]
    scripted = RecordedEpisode(  # a demonstration: its timings count, not its shape
        calls=[RecordedCall(name="edit_file", seconds=0.5, output_tokens=20),
               RecordedCall(name="submit", seconds=0.1, output_tokens=2, ends_episode=True)],
        session_seconds=0.02, score_seconds=2.0,
    )  # fmt: skip
    calibration = calibrate([*episodes, scripted], ENGINE, name="mine")
    scenario = calibration.scenario
    assert calibration.episodes == 41 and len(calibration.shapes) == 40
    assert scenario.tools.by_tool["edit_file"].median == 0.5
    assert "submit" in scenario.tools.by_tool
    tokens = sorted(sum(e.trajectory.loss_mask) for e in episodes)
    assert scenario.name == "mine"
    assert scenario.episodes.generated_tokens.median == pytest.approx((tokens[19] + tokens[20]) / 2)
    assert scenario.episodes.generated_tokens.low == tokens[0]
    assert scenario.episodes.solve_rate == pytest.approx(0.25)
    assert set(scenario.tools.by_tool) == {"read_file", "grep", "edit_file", "submit"}
    assert 0.01 <= scenario.tools.default.median <= 0.2
    assert 1.0 <= scenario.score_seconds.median <= 3.0
    assert scenario.engine.max_num_seqs == 8
    # A turn before the last whose calls all failed to parse replays as one call.
    assert any("replay as one call" in note for note in calibration.notes)
    assert all(
        c >= 1 for t in calibration.shapes for c in t.calls_per_turn[: len(t.calls_per_turn) - 1]
    )


def test_the_command_writes_a_scenario_that_loads_and_replays_its_shapes(tmp_path, capsys):
    episodes = [_episode(i) for i in range(30)]
    recorded = tmp_path / "episodes.jsonl"
    lines = [msgspec.json.encode(e) for e in episodes[:-1]]
    lines.append(msgspec.json.encode(episodes[-1].trajectory))  # a bare trajectory is read too
    recorded.write_bytes(b"\n".join(lines) + b"\n")
    engine = tmp_path / "engine.json"
    engine.write_bytes(msgspec.json.encode(ENGINE))
    out = tmp_path / "out" / "fleet.yaml"
    out.parent.mkdir()
    assert main([str(recorded), "--engine", str(engine), "--out", str(out),
                 "--note", "Recorded by a test."]) == 0  # fmt: skip
    assert "wrote" in capsys.readouterr().out
    text = out.read_text()
    assert text.startswith(
        "# Recorded by a test.\n# Calibrated by\n#   python -m etude.sim.calibrate episodes.jsonl "
        "--engine engine.json --out fleet.yaml\n# Measured: made up.\n"
    )
    assert "replay: fleet.shapes.jsonl" in text

    scenario = load_scenario(out)  # the replay path is relative to the YAML file
    assert scenario.name == "fleet"
    assert scenario.episodes.replay == out.parent / "fleet.shapes.jsonl"
    assert scenario.engine.decode_step_seconds_per_sequence == pytest.approx(0.002, rel=1e-3)
    shapes = read_shapes(scenario.episodes.replay)
    assert len(shapes) == len(episodes)
    written = [tuple(t.tokens for t in s.turns) for s in shapes]
    assert written == [
        tuple(n for n, _ in _runs(e.trajectory.loss_mask)) for e in episodes
    ]  # every turn's tokens, in order
    replayed = ShapeSource(scenario.episodes, scenario.seed)
    assert {replayed.shape(f"k{i}") for i in range(200)} <= set(shapes)


def _runs(mask: list[int]) -> list[tuple[int, int]]:
    runs, start = [], None
    for i, m in enumerate([*mask, 0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            runs.append((i - start, start))
            start = None
    return runs


def test_malformed_input_says_where_and_what(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(msgspec.json.encode(_episode(0)) + b"\n{not json\n")
    with pytest.raises(CalibrationError, match=r"bad\.jsonl:2: not a recorded episode"):
        read_episodes([bad])
    bad.write_text('{"schema": "recorded_episode.v1", "calls": [{"name": "grep"}]}\n')
    with pytest.raises(CalibrationError, match=r"bad\.jsonl:1: .*`seconds`"):
        read_episodes([bad])
    bad.write_text('{"schema": "rollout.v1", "task_id": "t"}\n')
    with pytest.raises(CalibrationError, match=r"bad\.jsonl:1: not a recorded episode"):
        read_episodes([bad])
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(CalibrationError, match="no recorded episodes"):
        read_episodes([empty])
    with pytest.raises(CalibrationError, match=r"no-such\.jsonl"):
        read_episodes([tmp_path / "no-such.jsonl"])
    assert main([str(bad), "--out", str(tmp_path / "x.yaml")]) == 2
    assert "error:" in capsys.readouterr().err and not (tmp_path / "x.yaml").exists()
    silent = RecordedEpisode(trajectory=_trajectory([(1, 0)], prompt=3))
    silent = msgspec.structs.replace(
        silent, trajectory=msgspec.structs.replace(silent.trajectory, loss_mask=[0, 0, 0, 0])
    )
    with pytest.raises(CalibrationError, match="no recorded episode has a token"):
        calibrate([silent, RecordedEpisode(score_seconds=1.0)])


def test_the_bundled_local_scenario_loads_with_its_replayed_shapes():
    scenario = load_scenario("local")
    assert scenario.name == "local"
    assert scenario.episodes.replay is not None and scenario.episodes.replay.is_file()
    shapes = read_shapes(scenario.episodes.replay)
    assert len(shapes) >= 50
    assert scenario.engine.prefix_cache_tokens == 0  # the torch engine prefills every turn
    assert math.isfinite(scenario.engine.step_seconds(scenario.engine.max_num_seqs))
    source = ShapeSource(scenario.episodes, scenario.seed)
    assert source.shape("run:g0:0") in set(shapes)
