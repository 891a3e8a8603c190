"""Calibrating a scenario from recorded episodes: the episode shapes and latencies a real run
showed, fitted into the scenario's spreads, and the shapes themselves written to be replayed.

    python -m etude.sim.calibrate EPISODES.jsonl --engine ENGINE.json --out my.yaml

An episode is recorded as one JSON line: a `RecordedEpisode` (the trajectory and what was
timed around it: every tool call, opening the session, scoring) or a bare `Trajectory` (the
queue's payload, JSON-encoded; then the latencies keep their defaults and tool output sizes
are estimated from the tool results in the trajectory). The episode shapes come from the
trajectories the policy wrote; the latencies from every episode, scripted ones included (a
`RecordedEpisode` without a trajectory). `ENGINE.json` is an
`EngineTimings`: decode steps at several batch sizes and prefills of several lengths,
measured on the engine to model (`loadtests/record_local_episodes.py` records both for the
local stack).

Every `Spread` is fitted as a lognormal: median = the sample's median, tail = its p99/p50
(within the field's limits), low and high = the smallest and largest value seen. Below
`MIN_TAIL_SAMPLES` values a p99 is only the largest value: the tail is then the lognormal
maximum-likelihood one (from the standard deviation of the logs) and the output calls it a
guess. A field nothing was measured for keeps its default and the output says so.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
import textwrap
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import NormalDist

import msgspec
import yaml

from etude.common.payloads import Trajectory
from etude.sim.episodes import record_shapes, shape_of
from etude.sim.scenario import EngineModel, EpisodeShapes, Scenario, Spread, ToolLatency

MIN_TAIL_SAMPLES = 20
"""Fewer values than this and a p99 cannot be told from the maximum: the tail is a guess."""
_MAX_TAIL = 1e6  # Spread.tail's limit
_Z99 = NormalDist().inv_cdf(0.99)  # a lognormal's p99/p50 is exp(σ · z99)


class CalibrationError(ValueError):
    """The recorded episodes or engine timings cannot be read or fitted."""


# -- what is recorded --------------------------------------------------------------------------


class RecordedCall(msgspec.Struct, kw_only=True, frozen=True):
    """One tool call as it ran."""

    name: str
    seconds: float
    """The call's own time (`ExecutedCall.seconds`)."""
    output_tokens: int
    """Tokens of the output the policy was shown (cut as the agent loop cuts it)."""
    ends_episode: bool = False
    """A submit: the simulated environment answers it without drawing an output."""


class RecordedEpisode(msgspec.Struct, kw_only=True, frozen=True, tag_field="schema",
                      tag="recorded_episode.v1"):  # fmt: skip
    """One episode of a real run and what was timed around it."""

    trajectory: Trajectory | None = None
    """What the policy wrote; None for an episode it did not write (a scripted
    demonstration), which times tools, sessions and grading but says nothing of the policy's
    episode shapes."""
    calls: list[RecordedCall] = []
    session_seconds: float | None = None
    """Opening the episode's sandboxed session."""
    score_seconds: float | None = None
    """The reward's grading of the episode (`Score.seconds`)."""


class EngineTimings(msgspec.Struct, kw_only=True, frozen=True):
    """One inference engine, measured."""

    max_num_seqs: int
    decode_steps: list[tuple[int, float]]
    """(sequences running, seconds of one decode step), at two batch sizes or more."""
    prefills: list[tuple[int, float]] = []
    """(prompt tokens, seconds of their prefill)."""
    prefix_cache_tokens: int | None = None
    """Tokens of earlier turns the engine keeps (0: it prefills every turn's whole context)."""
    parameter_bytes: float | None = None
    weight_load_seconds: float | None = None
    """How long a weight update of `parameter_bytes` held decoding."""
    note: str = ""
    """Where and how it was measured."""


def read_episodes(paths: Iterable[Path]) -> list[RecordedEpisode]:
    """Recorded episodes from JSONL files (bare trajectories are taken as episodes with
    nothing timed around them)."""
    decoder = msgspec.json.Decoder(RecordedEpisode | Trajectory)
    episodes = []
    for path in paths:
        try:
            lines = Path(path).read_bytes().splitlines()
        except OSError as error:
            raise CalibrationError(f"{path}: {error.strerror or error}") from error
        for number, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                record = decoder.decode(line)
            except msgspec.DecodeError as error:
                raise CalibrationError(
                    f"{path}:{number}: not a recorded episode or a trajectory ({error})"
                ) from error
            if isinstance(record, Trajectory):
                record = RecordedEpisode(trajectory=record)
            episodes.append(record)
    if not episodes:
        raise CalibrationError(f"no recorded episodes in {', '.join(map(str, paths))}")
    return episodes


def read_engine(path: Path) -> EngineTimings:
    try:
        return msgspec.json.decode(Path(path).read_bytes(), type=EngineTimings)
    except OSError as error:
        raise CalibrationError(f"{path}: {error.strerror or error}") from error
    except msgspec.DecodeError as error:
        raise CalibrationError(f"{path}: not engine timings ({error})") from error


# -- fitting -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Fit:
    """One fitted quantity and what it rests on."""

    spread: Spread | None
    """None: nothing was measured (the scenario keeps its default)."""
    samples: int
    note: str = ""

    def describe(self) -> str:
        if self.spread is None:
            return f"not measured, default kept{_paren(self.note)}"
        s = self.spread
        text = (f"median {_round(s.median)}, p99/p50 {_round(s.tail)}, "
                f"{_round(s.low)}–{_round(s.high)}, {self.samples} samples")  # fmt: skip
        return text + _paren(self.note)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0–100), linear between closest ranks."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def fit_spread(values: Iterable[float], *, min_tail_samples: int = MIN_TAIL_SAMPLES) -> Fit:
    """A lognormal through positive `values`: their median, p99/p50 and range."""
    all_values = [float(v) for v in values]
    positive = [v for v in all_values if v > 0 and math.isfinite(v)]
    dropped = len(all_values) - len(positive)
    notes = [f"{dropped} non-positive values left out"] if dropped else []
    if not positive:
        return Fit(None, 0, "; ".join(notes))
    median = statistics.median(positive)
    if len(positive) >= min_tail_samples:
        tail = percentile(positive, 99) / median
    elif len(positive) >= 2:
        sigma = statistics.stdev(math.log(v) for v in positive)
        tail = math.exp(sigma * _Z99)
        notes.append(f"tail a guess: {len(positive)} samples, lognormal fit")
    else:
        tail = 1.0
        notes.append("tail a guess: one sample")
    tail = min(_MAX_TAIL, max(1.0, tail))
    spread = Spread(median=median, tail=tail, low=min(positive), high=max(positive))
    return Fit(spread, len(positive), "; ".join(notes))


def line_fit(
    points: Sequence[tuple[float, float]], *, through_origin: bool = False
) -> tuple[float, float]:
    """y = a + b·x by least squares in relative error (each point weighs 1/y², so a step
    of one sequence counts as much as a step of 32): (a, b), neither below 0.
    `through_origin`: a = 0."""
    if any(y <= 0 for _, y in points):
        raise CalibrationError(f"a measured time must be positive, got {list(points)}")
    xs, ys = [float(x) for x, _ in points], [float(y) for _, y in points]
    ws = [1 / (y * y) for y in ys]
    sw, sx, sy = sum(ws), _dot(ws, xs), _dot(ws, ys)
    sxx, sxy = _dot(ws, [x * x for x in xs]), _dot(ws, [x * y for x, y in points])
    if through_origin:
        if not sxx:
            raise CalibrationError(f"a slope needs a point away from x = 0, got {xs}")
        return 0.0, max(0.0, sxy / sxx)
    if len(set(xs)) < 2:
        raise CalibrationError(f"a line needs points at two x values at least, got {xs}")
    slope = max(0.0, (sw * sxy - sx * sy) / (sw * sxx - sx * sx))
    return max(0.0, (sy - slope * sx) / sw), slope


def _dot(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


@dataclass(slots=True)
class Calibration:
    scenario: Scenario
    fits: dict[str, Fit]
    """By the scenario field each went to (`episodes.turns`, `tools.by_tool.grep`, …)."""
    episodes: int
    notes: list[str] = field(default_factory=list)
    shapes: list[Trajectory] = field(default_factory=list)
    """The episodes as they replay (etude.sim.episodes.record_shapes writes them)."""


def calibrate(
    recorded: Sequence[RecordedEpisode],
    engine: EngineTimings | None = None,
    *,
    name: str = "calibrated",
    base: Scenario | None = None,
    min_tail_samples: int = MIN_TAIL_SAMPLES,
) -> Calibration:
    """The scenario `base` (the defaults) with every field the recordings measure fitted."""
    base = base or Scenario()
    written = [e for e in recorded if e.trajectory is not None and any(e.trajectory.loss_mask)]
    if not written:
        raise CalibrationError("no recorded episode has a token the policy wrote")
    calibration = Calibration(base, {}, len(recorded))
    if scripted := sum(e.trajectory is None for e in recorded):
        calibration.notes.append(
            f"{scripted} episodes the policy did not write (scripted) time tools, sessions and "
            "grading only"
        )
    if silent := len(recorded) - len(written) - scripted:
        calibration.notes.append(f"{silent} episodes without a sampled token: timings only")

    def fit(key: str, values: Iterable[float]) -> Spread | None:
        calibration.fits[key] = fit_spread(values, min_tail_samples=min_tail_samples)
        return calibration.fits[key].spread

    update: dict[str, object] = {
        "name": name,
        "episodes": _fit_episodes(written, recorded, base.episodes, fit, calibration),
        "tools": _fit_tools(recorded, base.tools, fit),
    }
    for key, values in (
        ("score_seconds", [e.score_seconds for e in recorded]),
        ("session_seconds", [e.session_seconds for e in recorded]),
    ):
        if (spread := fit(key, [v for v in values if v is not None])) is not None:
            update[key] = spread
    if engine is not None:
        update["engine"] = fit_engine(engine, base.engine)
        running = sorted({n for n, _ in engine.decode_steps})
        lengths = sorted({n for n, _ in engine.prefills})
        calibration.notes.append(
            f"engine: {len(engine.decode_steps)} decode steps at {running} sequences running, "
            f"{len(engine.prefills)} prefills of {lengths} tokens"
        )
    else:
        calibration.notes.append("no engine timings: the engine keeps its defaults")
    calibration.scenario = base.model_copy(update=update)  # each part validated when built
    return calibration


def _fit_episodes(
    episodes: Sequence[RecordedEpisode],
    recorded: Sequence[RecordedEpisode],
    base: EpisodeShapes,
    fit: Callable[[str, Iterable[float]], Spread | None],
    calibration: Calibration,
) -> EpisodeShapes:
    """Shapes from the policy's `episodes`; tool output sizes from every `recorded` call."""
    written = [e.trajectory for e in episodes if e.trajectory is not None]
    calibration.shapes = [_replayable(t) for t in written]
    turns = [shape_of(t).turns for t in calibration.shapes]
    fitted: dict[str, object] = {
        "generated_tokens": fit(
            "episodes.generated_tokens", [sum(t.tokens for t in ts) for ts in turns]
        ),
        "turns": fit("episodes.turns", [len(ts) for ts in turns]),
        "tool_calls_per_turn": fit(
            "episodes.tool_calls_per_turn", [t.tool_calls for ts in turns for t in ts[:-1]]
        ),
        "tool_output_tokens": fit("episodes.tool_output_tokens", _output_tokens(recorded)),
        "turn_jitter": _turn_jitter(turns),
        "solve_rate": statistics.fmean(float(t.correctness >= 1.0) for t in written),
    }
    fit("turn tokens (not a field: turn_jitter)", [t.tokens for ts in turns for t in ts])
    replayed = sum(
        a != b
        for t, shape in zip(written, calibration.shapes, strict=True)
        for a, b in zip(t.calls_per_turn, shape.calls_per_turn, strict=True)
    )
    if replayed:
        calibration.notes.append(
            f"{replayed} turns before the last had no call that parsed; they replay as one "
            "call (the simulated policy's only call-less turn submits)"
        )
    if not any(e.calls for e in recorded):
        calibration.notes.append(
            "no tool call was recorded: tool output sizes are estimated from the tool results "
            "in the trajectories (wrappers included)"
        )
    return base.model_copy(update={k: v for k, v in fitted.items() if v is not None})


def _fit_tools(
    episodes: Sequence[RecordedEpisode],
    base: ToolLatency,
    fit: Callable[[str, Iterable[float]], Spread | None],
) -> ToolLatency:
    """Every tool's calls, and all of them together for tools never called."""
    by_tool: dict[str, list[float]] = {}
    for episode in episodes:
        for call in episode.calls:
            by_tool.setdefault(call.name, []).append(call.seconds)
    default = fit("tools.default", [s for seconds in by_tool.values() for s in seconds])
    if default is None:
        return base
    fitted = {tool: fit(f"tools.by_tool.{tool}", seconds) for tool, seconds in by_tool.items()}
    return ToolLatency(
        default=default,
        by_tool={tool: spread for tool, spread in sorted(fitted.items()) if spread is not None},
    )


def fit_engine(timings: EngineTimings, base: EngineModel | None = None) -> EngineModel:
    """Decode step = a + b × running, fitted to the measured steps; prefill = c × prompt
    tokens, fitted to the measured prefills (the model has no fixed cost of a prefill)."""
    base = base or EngineModel()
    if not timings.decode_steps:
        raise CalibrationError("engine timings without decode steps")
    fixed, per_sequence = line_fit(timings.decode_steps)
    update: dict[str, object] = {
        "max_num_seqs": timings.max_num_seqs,
        "decode_step_seconds": fixed,
        "decode_step_seconds_per_sequence": per_sequence,
    }
    if timings.prefills:
        update["prefill_seconds_per_token"] = line_fit(timings.prefills, through_origin=True)[1]
    if timings.prefix_cache_tokens is not None:
        update["prefix_cache_tokens"] = timings.prefix_cache_tokens
    if timings.parameter_bytes:
        update["parameter_bytes"] = timings.parameter_bytes
        if timings.weight_load_seconds:
            update["weight_load_bytes_per_second"] = (
                timings.parameter_bytes / timings.weight_load_seconds
            )
    try:
        return EngineModel.model_validate({**base.model_dump(), **update})
    except ValueError as error:
        raise CalibrationError(f"engine timings: {error}") from error


def _runs(trajectory: Trajectory) -> list[int]:
    """Start of each run of sampled tokens (a turn)."""
    mask = trajectory.loss_mask
    return [i for i, m in enumerate(mask) if m and (i == 0 or not mask[i - 1])]


def _replayable(trajectory: Trajectory) -> Trajectory:
    """The trajectory with every turn before the last making one call at least: a turn whose
    calls all failed to parse still cost a turn and an observation."""
    turns = len(_runs(trajectory))
    calls = list(trajectory.calls_per_turn)
    fixed = [max(1, c) if i < turns - 1 else c for i, c in enumerate(calls)]
    if fixed == calls:
        return trajectory
    return msgspec.structs.replace(trajectory, calls_per_turn=fixed)


def _output_tokens(episodes: Sequence[RecordedEpisode]) -> list[float]:
    """Tokens of each tool output the policy read: as recorded, else (no call recorded in
    the episode) each observation's tokens shared among that turn's calls."""
    sizes: list[float] = []
    for episode in episodes:
        trajectory = episode.trajectory
        if episode.calls or trajectory is None:
            sizes += [c.output_tokens for c in episode.calls if not c.ends_episode]
            continue
        mask, starts = trajectory.loss_mask, _runs(trajectory)
        for turn, start in enumerate(starts[:-1]):
            end = start + next(i for i, m in enumerate(mask[start:]) if not m)
            observed = starts[turn + 1] - end
            calls = trajectory.calls_per_turn[turn] if turn < len(trajectory.calls_per_turn) else 0
            if calls and observed > 0:
                sizes += [observed / calls] * calls
    return sizes


def _turn_jitter(turns: Sequence[Sequence]) -> float | None:
    """σ of log(tokens) of an episode's turns around their episode's mean, pooled over the
    episodes of two turns or more (EpisodeShapes.turn_jitter), at most 5."""
    squares, degrees = 0.0, 0
    for ts in turns:
        if len(ts) < 2:
            continue
        logs = [math.log(t.tokens) for t in ts]
        mean = statistics.fmean(logs)
        squares += sum((v - mean) ** 2 for v in logs)
        degrees += len(logs) - 1
    return min(5.0, math.sqrt(squares / degrees)) if degrees else None


# -- writing -------------------------------------------------------------------------------------


def write_scenario(
    calibration: Calibration,
    out: Path,
    *,
    replay: bool = True,
    header: Sequence[str] = (),
) -> Path | None:
    """The scenario as YAML at `out` (what was fitted, and from what, in comments at its
    head) and, with `replay`, the episodes' shapes beside it (`<out stem>.shapes.jsonl`,
    named relative to the YAML). Returns the shapes file."""
    scenario = calibration.scenario
    shapes_path = out.with_name(f"{out.stem}.shapes.jsonl") if replay else None
    episodes = _dump(scenario.episodes, exclude={"replay"})
    if shapes_path is not None:
        written = record_shapes(calibration.shapes, shapes_path)
        episodes["replay"] = shapes_path.name
        if not written:
            raise CalibrationError("no episode shape to write")
    document = {
        "name": scenario.name,
        "episodes": episodes,
        "engine": _dump(scenario.engine),
        "tools": {
            "default": _dump(scenario.tools.default),
            "by_tool": {k: _dump(v) for k, v in scenario.tools.by_tool.items()},
        },
        "score_seconds": _dump(scenario.score_seconds),
        "session_seconds": _dump(scenario.session_seconds),
    }
    lines = [*header, *summary(calibration)]
    comment = "".join(f"{line}\n" for text in lines for line in _comment(text))
    out.write_text(comment + yaml.safe_dump(document, sort_keys=False, width=100))
    return shapes_path


def _comment(text: str) -> list[str]:
    """A YAML comment, wrapped at 100 columns, unless it is indented (a command, a table)."""
    if text[:1].isspace() or not text:
        return [f"# {text}".rstrip()]
    return textwrap.wrap(text, 98, initial_indent="# ", subsequent_indent="# ")


def summary(calibration: Calibration) -> list[str]:
    shapes = len(calibration.shapes)
    lines = [f"Fitted from {calibration.episodes} recorded episodes, {shapes} of them the "
             "policy's (lognormal: median, p99/p50, low–high):"]  # fmt: skip
    width = max(map(len, calibration.fits))
    lines += [f"  {key.ljust(width)}  {fit.describe()}" for key, fit in calibration.fits.items()]
    fitted = calibration.scenario.episodes
    lines.append(f"  turn_jitter {_round(fitted.turn_jitter)}, solve_rate "
                 f"{_round(fitted.solve_rate)}")  # fmt: skip
    lines += [f"Note: {note}" for note in calibration.notes]
    return lines


def _dump(part, exclude: set[str] | None = None) -> dict:
    """A part's fields, rounded; an unbounded `high` (the default) is left out."""
    return _rounded(part.model_dump(exclude=exclude))


def _rounded(values: dict) -> dict:
    out = {}
    for key, value in values.items():
        if isinstance(value, dict):
            out[key] = _rounded(value)
        elif not (isinstance(value, float) and math.isinf(value)):
            out[key] = _round(value) if isinstance(value, float) else value
    return out


def _round(value: float) -> float | int:
    """Four significant digits: what a measurement on a shared machine is worth."""
    if value == 0 or not math.isfinite(value):
        return value
    rounded = float(f"{value:.4g}")
    return int(rounded) if rounded.is_integer() and abs(rounded) < 1e15 else rounded


def _paren(note: str) -> str:
    return f" ({note})" if note else ""


# -- the command -------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m etude.sim.calibrate",
        description="Fit a simulated-fleet scenario to recorded episodes.",
    )
    parser.add_argument(
        "episodes",
        type=Path,
        nargs="+",
        metavar="EPISODES.jsonl",
        help="recorded episodes (RecordedEpisode or Trajectory JSON lines)",
    )
    parser.add_argument("--out", type=Path, required=True, help="the scenario YAML to write")
    parser.add_argument(
        "--engine",
        type=Path,
        metavar="ENGINE.json",
        help="measured engine timings (EngineTimings); unset: engine defaults",
    )
    parser.add_argument("--name", help="the scenario's name; unset: the file's stem")
    parser.add_argument(
        "--no-replay",
        action="store_true",
        help="spreads only: do not write the episodes' shapes to replay",
    )
    parser.add_argument("--note", action="append", default=[],
                        help="a line for the header comment (repeatable)")  # fmt: skip
    args = parser.parse_args(argv)
    try:
        recorded = read_episodes(args.episodes)
        engine = read_engine(args.engine) if args.engine else None
        calibration = calibrate(recorded, engine, name=args.name or args.out.stem)
        header = [*args.note, "Calibrated by", f"  {_command(args)}"]
        if engine is not None and engine.note:
            header.append(f"Measured: {engine.note}.")
        shapes = write_scenario(calibration, args.out, replay=not args.no_replay, header=header)
    except CalibrationError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print("\n".join(summary(calibration)))
    print(f"wrote {args.out}" + (f" and {shapes}" if shapes else ""))
    return 0


def _command(args: argparse.Namespace) -> str:
    """The command as it was run, an absolute path shown as its file's name (where it lay on
    the machine that ran it says nothing to a reader elsewhere)."""

    def shown(path: Path) -> str:
        return path.name if path.is_absolute() else str(path)

    words = ["python -m etude.sim.calibrate", *map(shown, args.episodes)]
    if args.engine:
        words += ["--engine", shown(args.engine)]
    if args.name:
        words += ["--name", args.name]
    words += ["--out", shown(args.out)] + (["--no-replay"] if args.no_replay else [])
    return " ".join(words)


if __name__ == "__main__":
    sys.exit(main())
