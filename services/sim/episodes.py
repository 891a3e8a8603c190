"""Episode shapes: how many turns an episode takes, how many tokens the policy writes in
each and how many tools it calls — drawn from a scenario's heavy-tailed spreads, or replayed
from recorded trajectories. An episode's shape follows from its key (the rollout) and the
scenario's seed alone, so the simulated inference engine (which writes the turns) and the
simulated reward (which scores them) agree without talking."""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from etude.common.payloads import Trajectory
from etude.sim.scenario import EpisodeShapes, seeded

_REMEMBERED = 100_000  # episodes whose shapes are kept (a fleet runs a few thousand at once)


@dataclass(frozen=True, slots=True)
class TurnShape:
    tokens: int
    tool_calls: int
    """0 in the last turn, which submits."""


@dataclass(frozen=True, slots=True)
class EpisodeShape:
    turns: tuple[TurnShape, ...]
    solved: bool

    @property
    def tokens(self) -> int:
        return sum(t.tokens for t in self.turns)


class ShapeSource:
    def __init__(self, shapes: EpisodeShapes, seed: int) -> None:
        self.shapes = shapes
        self.seed = seed
        self.recorded = read_shapes(shapes.replay) if shapes.replay else []
        self._drawn: OrderedDict[str, EpisodeShape] = OrderedDict()

    def shape(self, key: str) -> EpisodeShape:
        shape = self._drawn.get(key)
        if shape is None:  # every turn of an episode asks: draw it once
            shape = self._drawn[key] = self._draw(key)
            if len(self._drawn) > _REMEMBERED:
                self._drawn.popitem(last=False)
        return shape

    def _draw(self, key: str) -> EpisodeShape:
        rng = seeded(self.seed, key, "")
        if self.recorded:
            return self.recorded[rng.randrange(len(self.recorded))]
        s = self.shapes
        total = s.generated_tokens.draw(rng)
        turns = max(1, round(s.turns.draw(rng)))
        weights = [math.exp(s.turn_jitter * rng.gauss(0.0, 1.0)) for _ in range(turns)]
        scale = total / sum(weights)
        calls = [max(1, round(s.tool_calls_per_turn.draw(rng))) for _ in range(turns - 1)]
        return EpisodeShape(
            tuple(
                TurnShape(max(1, round(w * scale)), c)
                for w, c in zip(weights, [*calls, 0], strict=True)
            ),
            solved=rng.random() < s.solve_rate,
        )

    def tool_output_tokens(self, key: str) -> int:
        return max(1, round(self.shapes.tool_output_tokens.draw(seeded(self.seed, key, "output"))))


def shape_of(trajectory: Trajectory) -> EpisodeShape:
    """A recorded episode's shape: its runs of sampled tokens are its turns."""
    runs: list[int] = []
    previous = 0
    for m in trajectory.loss_mask:
        if m and not previous:
            runs.append(0)
        if m:
            runs[-1] += 1
        previous = m
    calls = list(trajectory.calls_per_turn) + [0] * len(runs)
    turns = [TurnShape(n, calls[i]) for i, n in enumerate(runs)]
    if turns:
        turns[-1] = TurnShape(turns[-1].tokens, 0)
    return EpisodeShape(tuple(turns), solved=trajectory.correctness >= 1.0)


def record_shapes(trajectories: Iterable[Trajectory], path: Path) -> int:
    """Write the shapes of recorded trajectories as JSONL (a scenario's `episodes.replay`)."""
    lines = []
    for trajectory in trajectories:
        shape = shape_of(trajectory)
        if shape.turns:
            turns = [[t.tokens, t.tool_calls] for t in shape.turns]
            lines.append(json.dumps({"turns": turns, "reward": float(shape.solved)}))
    path.write_text("".join(line + "\n" for line in lines))
    return len(lines)


def read_shapes(path: Path) -> Sequence[EpisodeShape]:
    shapes = []
    for number, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            turns = tuple(TurnShape(int(n), int(c)) for n, c in record["turns"])
            reward = float(record.get("reward", 0.0))
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(f"{path}:{number}: not an episode shape ({error})") from error
        if not turns or any(t.tokens < 1 or t.tool_calls < 0 for t in turns):
            raise ValueError(f"{path}:{number}: an episode needs turns of at least one token")
        shapes.append(EpisodeShape(turns, solved=reward >= 1.0))
    if not shapes:
        raise ValueError(f"{path}: no episode shapes")
    return shapes
