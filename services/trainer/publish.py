"""Weight sync: the trainer's new policy to every inference endpoint, as one version.

Each endpoint receives the same version over its own UpdateWeights stream, all at once;
the step's weight-sync time is the slowest endpoint's. An endpoint that refuses the update
raises (the run stops rather than sample from a policy that silently fell behind).

A run that trains only some layers sends only those after the first, full publication: the
other tensors cannot have changed, and on a CPU the sync of a 135 M model is seconds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Iterable
from typing import Protocol

import torch

from etude.inference.client import Policy, WeightUpdate
from etude.inference.types import PolicyOwnedError


class WeightEndpoint(Protocol):
    """An inference endpoint: `GrpcInference`, or `InProcessInference` in the same process."""

    async def get_policy(self) -> Policy: ...

    async def update_weights(
        self, version: int, tensors: Iterable[tuple[str, torch.Tensor]], *, drain: bool = False,
        run_id: str = "",
    ) -> WeightUpdate: ...  # fmt: skip

    async def close(self) -> None: ...


class WeightPublisher:
    def __init__(self, endpoints: list[WeightEndpoint], run_id: str = "") -> None:
        if not endpoints:
            raise ValueError("weight sync needs at least one inference endpoint")
        self.endpoints = endpoints
        self.run_id = run_id
        """Named in every update: an engine another live run owns refuses it."""

    async def check_free(self, run_alive: Callable[[str], Awaitable[bool]]) -> None:
        """PolicyOwnedError when an endpoint serves another run that is still alive: said at
        the start, not at the first weight sync after a warm start of minutes (the engine
        would refuse the update then; etude.inference.ownership)."""
        policies = await asyncio.gather(*(e.get_policy() for e in self.endpoints))
        for owner in {p.run_id for p in policies} - {"", self.run_id}:
            if await run_alive(owner):
                raise PolicyOwnedError(
                    f"the inference service serves run {owner}'s policy and that run is still "
                    f"going; run {self.run_id or '(unnamed)'} needs an inference service of "
                    f"its own (another stack or release), or run {owner} stopped first"
                )

    async def current_version(self) -> int:
        """The newest version any endpoint serves: the next publication must exceed it."""
        policies = await asyncio.gather(*(e.get_policy() for e in self.endpoints))
        return max(p.version for p in policies)

    async def publish(
        self,
        version: int,
        model: torch.nn.Module,
        only: Collection[str] | None = None,
        *,
        drain: bool = False,
    ) -> float:
        """Send the weights as `version`; returns the seconds until every endpoint has it.
        `only`: just these tensors (the ones a step can change); an endpoint keeps the rest.
        `drain`: each endpoint lets its running completions finish under the old weights
        first (no turn spans two versions); otherwise they go on under the new ones."""
        started = time.perf_counter()
        with torch.no_grad():
            tensors = [
                (name, t.detach().contiguous())
                for name, t in model.state_dict().items()
                if only is None or name in only
            ]
        await asyncio.gather(
            *(
                e.update_weights(version, tensors, drain=drain, run_id=self.run_id)
                for e in self.endpoints
            )
        )
        return time.perf_counter() - started

    async def close(self) -> None:
        await asyncio.gather(*(e.close() for e in self.endpoints))
