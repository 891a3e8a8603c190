"""A scenario: what a simulated fleet is made of and what its episodes look like.

Every cost is in simulated seconds; `time_scale` says how many of them pass per real second.
Episode shapes are heavy-tailed (lognormal, given by their median and p99/p50 ratio, the
way tail latency is usually quoted) or replayed from recorded trajectories. A scenario is a
YAML file; a bundled one is named (`default`).
"""

from __future__ import annotations

import math
import random
import zlib
from pathlib import Path
from statistics import NormalDist

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

SCENARIOS_DIR = Path(__file__).parent / "scenarios"
_Z99 = NormalDist().inv_cdf(0.99)  # a lognormal's p99/p50 is exp(σ · z99)


class ScenarioError(ValueError):
    pass


def seeded(*parts: object) -> random.Random:
    """A generator that follows from `parts` alone (a scenario's seed, a rollout's key…):
    every process of a fleet draws the same value for the same thing."""
    return random.Random(zlib.crc32(":".join(map(str, parts)).encode()))


class _Part(BaseModel):
    model_config = ConfigDict(
        extra="forbid", use_attribute_docstrings=True, frozen=True, allow_inf_nan=False
    )


class Spread(_Part):
    """A positive quantity, lognormal: `median`, and p99/p50 = `tail` (1: constant)."""

    median: float = Field(gt=0)
    tail: float = Field(default=1.0, ge=1.0, le=1e6)
    low: float = Field(default=0.0, ge=0)
    high: float = Field(default=math.inf)

    @property
    def sigma(self) -> float:
        return math.log(self.tail) / _Z99

    def draw(self, rng: random.Random) -> float:
        value = self.median * math.exp(self.sigma * rng.gauss(0.0, 1.0))
        return min(self.high, max(self.low, value))


class EpisodeShapes(_Part):
    """What the policy does in an episode. Defaults: p99/p50 of generated tokens ≈ 10."""

    generated_tokens: Spread = Spread(median=4000, tail=10, low=64, high=65536)
    """Tokens the policy writes over the whole episode."""
    turns: Spread = Spread(median=8, tail=4, low=1, high=64)
    turn_jitter: float = Field(default=0.5, ge=0, le=5)
    """σ of each turn's share of the episode's tokens (0: every turn alike)."""
    tool_calls_per_turn: Spread = Spread(median=1.5, tail=4, low=1, high=8)
    tool_output_tokens: Spread = Spread(median=150, tail=8, low=1, high=4000)
    solve_rate: float = Field(default=0.5, ge=0, le=1)
    replay: Path | None = None
    """Recorded episode shapes (JSONL, one `{"turns": [[tokens, tool_calls], ...],
    "reward": r}` per line, `etude.sim.episodes.record_shapes` writes them) drawn from
    instead of the spreads above; in a scenario file, relative to the file's folder."""


class EngineModel(_Part):
    """One inference engine: continuous batching over `max_num_seqs` sequences."""

    max_num_seqs: int = Field(default=64, ge=1, le=1 << 16)
    decode_step_seconds: float = Field(default=0.02, ge=0)
    """A decode step with one sequence running."""
    decode_step_seconds_per_sequence: float = Field(default=0.0005, ge=0)
    """What each further running sequence adds to a decode step."""
    prefill_seconds_per_token: float = Field(default=0.00005, ge=0)
    """Prompt tokens not already in the engine's prefix cache; no sequence decodes meanwhile
    (20,000 tokens/s: a 30B-parameter MoE on one H100-class GPU)."""
    prefix_cache_tokens: int = Field(default=2_000_000, ge=0)
    """Tokens of earlier turns the engine keeps (least recently used go first)."""
    parameter_bytes: float = Field(default=60e9, ge=0)
    weight_load_bytes_per_second: float = Field(default=30e9, gt=0)
    """A weight update holds decoding for parameter_bytes / this."""

    def step_seconds(self, running: int) -> float:
        return self.decode_step_seconds + self.decode_step_seconds_per_sequence * running

    @property
    def weight_load_seconds(self) -> float:
        return self.parameter_bytes / self.weight_load_bytes_per_second


class ToolLatency(_Part):
    default: Spread = Spread(median=0.3, tail=10)
    by_tool: dict[str, Spread] = Field(
        default_factory=lambda: {"run_terminal_command": Spread(median=4.0, tail=15)}
    )

    def draw(self, tool: str, rng: random.Random) -> float:
        return self.by_tool.get(tool, self.default).draw(rng)


class Scenario(_Part):
    name: str = "default"
    time_scale: float = Field(default=60.0, gt=0, le=1e6)
    """Simulated seconds per real second."""
    seed: int = 0
    episodes: EpisodeShapes = EpisodeShapes()
    engine: EngineModel = EngineModel()
    tools: ToolLatency = ToolLatency()
    score_seconds: Spread = Spread(median=15.0, tail=5)
    """The reward service running an episode's hidden tests."""
    session_seconds: Spread = Spread(median=1.0, tail=5)
    """Opening a sandboxed session (a copy of the repository)."""
    trainer_seconds_per_token: float = Field(default=5e-5, ge=0)
    """A trainer step's time per trained token (forward, backward, optimizer)."""
    trainer_step_seconds: float = Field(default=5.0, ge=0)
    """A trainer step's fixed cost."""


def load_scenario(source: str | Path = "default", **overrides: object) -> Scenario:
    """A bundled scenario by name or a YAML file; `overrides` replace top-level fields."""
    path = Path(source)
    if not path.suffix:
        path = SCENARIOS_DIR / f"{source}.yaml"
    if not path.is_file():
        names = sorted(p.stem for p in SCENARIOS_DIR.glob("*.yaml"))
        raise ScenarioError(f"no scenario {source!r} (bundled: {', '.join(names)})")
    try:
        data = yaml.safe_load(path.read_text()) or {}
        episodes = data.get("episodes") if isinstance(data, dict) else None
        if isinstance(episodes, dict) and episodes.get("replay"):  # relative to the file
            episodes["replay"] = str(path.parent / episodes["replay"])
        return Scenario.model_validate({**data, **overrides})
    except (yaml.YAMLError, ValidationError) as error:
        raise ScenarioError(f"{path}: {error}") from error
