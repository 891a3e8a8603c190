"""The trainer's plain types, what a caller of the run driver hands it: where the services
are, and where a cluster run's Ray actors go."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Endpoints:
    """The services a run trains against: Redis, the inference engines (each gets the new
    weights), the environment and the reward service."""

    redis_url: str
    inference: tuple[str, ...]
    environment: str
    reward: str

    @classmethod
    def of_stack(cls, redis_url: str, addresses: dict[str, str]) -> Endpoints:
        """A local stack's: its one inference service and the others, by component name."""
        return cls(redis_url, (addresses["inference"],), addresses["environment"],
                   addresses["reward"])  # fmt: skip


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a cluster run's Ray actors go: the chart's worker groups advertise the custom
    resources `trainer` and `inference_engine` (one per worker)."""

    inference_engines: int = 0
    engine_port: int = 50051
    engine_gpus: float = 0
    trainer_gpus: float = 0
