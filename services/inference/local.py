"""The inference client interface in process: a backend behind `Serving`, no transport.

It has the shape of `GrpcInference` (generate, update_weights with or without draining,
get_policy, get_load), so a router, a rollout worker or a weight publisher can drive
engines in the same process — the simulated fleet of `loadtests/rollout_sim.py` is sixteen
of these over `sim` backends — through the same code paths as remote ones.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable

import torch

from etude.inference.backend import InferenceBackend
from etude.inference.client import Policy, WeightUpdate
from etude.inference.serving import Serving
from etude.inference.types import CompletionDelta, EngineLoad, GenerationRequest


class InProcessInference:
    def __init__(self, backend: InferenceBackend) -> None:
        self.serving = Serving(backend)
        self.backend = backend

    def generate(self, request: GenerationRequest) -> AsyncIterator[CompletionDelta]:
        return self.serving.generate(request)

    async def update_weights(
        self, version: int, tensors: Iterable[tuple[str, torch.Tensor]], *, drain: bool = False,
        run_id: str = "",
    ) -> WeightUpdate:  # fmt: skip
        loaded, seconds = await self.serving.update_weights(
            version, tensors, time.perf_counter(), drain=drain, run_id=run_id
        )
        return WeightUpdate(version, loaded, seconds)

    async def get_policy(self) -> Policy:
        b = self.backend
        run_id = self.serving.ownership.run_id
        return Policy(b.policy_version, b.model_name, b.name, b.num_parameters, run_id)

    async def get_load(self) -> EngineLoad:
        return self.serving.load()

    async def close(self) -> None:
        await self.backend.close()
