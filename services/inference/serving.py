"""What both front doors (gRPC and the OpenAI-compatible HTTP API) share: requests into the
backend, deltas out, with the latency metrics observed once, here; and the two ways a weight
update meets the requests in flight, for every backend alike:

* in flight (the default): the backend loads between two decode steps, completions go on
  under the new version (partial rollouts: their tokens record which version sampled them);
* draining: no new request starts, the running ones finish under the old weights, then the
  backend loads and the waiting requests start under the new version — no completion spans
  two versions, at the cost of the engine idling on its longest running completion.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterable

import torch

from etude.inference.backend import InferenceBackend
from etude.inference.metrics import (
    INTER_TOKEN_LATENCY,
    PROMPT_TOKENS,
    REQUEST_SECONDS,
    TIME_TO_FIRST_TOKEN,
    TOKENS_GENERATED,
    WEIGHT_UPDATE_SECONDS,
)
from etude.inference.ownership import PolicyOwnership
from etude.inference.types import CompletionDelta, EngineLoad, GenerationRequest, InferenceError


class Serving:
    def __init__(self, backend: InferenceBackend, ownership: PolicyOwnership | None = None) -> None:
        self.backend = backend
        self.ownership = ownership or PolicyOwnership()
        self._open = asyncio.Event()  # cleared while a draining update holds new requests
        self._open.set()
        self._idle = asyncio.Event()  # set while no request is being generated
        self._idle.set()
        self._generating = 0
        self._held = 0  # requests waiting at the closed gate of a draining update
        self._updates = asyncio.Lock()  # one update at a time: versions load in order

    def load(self) -> EngineLoad:
        stats = self.backend.stats()
        return EngineLoad(
            version=self.backend.policy_version, running=stats.running,
            waiting=stats.waiting + self._held, capacity=stats.capacity,
            kv_cache_usage=stats.kv_cache_usage, draining=not self._open.is_set(),
        )  # fmt: skip

    async def generate(self, request: GenerationRequest) -> AsyncIterator[CompletionDelta]:
        if not self._open.is_set():
            self._held += 1
            try:
                await self._open.wait()
            finally:
                self._held -= 1
        self._generating += 1
        self._idle.clear()
        try:
            # Closed explicitly when this is: the backend then ends the request at once,
            # not whenever the garbage collector finalizes a generator left suspended.
            async with contextlib.aclosing(self._generate(request)) as deltas:
                async for delta in deltas:
                    yield delta
        finally:
            self._generating -= 1
            if not self._generating:
                self._idle.set()

    async def _generate(self, request: GenerationRequest) -> AsyncIterator[CompletionDelta]:
        started = time.perf_counter()
        last_token: dict[int, float] = {}
        reason = "cancelled"
        stream = self.backend.generate(request)
        try:
            async for delta in stream:
                now = time.perf_counter()
                if delta.token_ids:
                    if not last_token:
                        TIME_TO_FIRST_TOKEN.observe(now - started)
                        PROMPT_TOKENS.inc(len(request.prompt_token_ids))
                    if delta.index in last_token:
                        gap = (now - last_token[delta.index]) / len(delta.token_ids)
                        INTER_TOKEN_LATENCY.observe(gap)
                    last_token[delta.index] = now
                    TOKENS_GENERATED.inc(len(delta.token_ids))
                if delta.finish_reason:
                    reason = delta.finish_reason
                yield delta
        finally:
            await stream.aclose()
            if last_token:
                REQUEST_SECONDS.labels(reason).observe(time.perf_counter() - started)

    async def update_weights(
        self,
        version: int,
        tensors: Iterable[tuple[str, torch.Tensor]],
        started: float,
        *,
        drain: bool = False,
        run_id: str = "",
    ) -> tuple[int, float]:
        """Load a policy version, in flight or draining (above); returns tensors loaded and
        seconds since `started` (the first byte received). PolicyOwnedError when another
        live run owns the engine (etude.inference.ownership)."""
        async with self._updates:
            await self.ownership.check(run_id)
            served = self.backend.policy_version
            if version <= served:
                raise InferenceError(f"version {version} is not newer than the served {served}")
            if not drain:
                loaded = await self.backend.update_weights(version, tensors)
            else:
                self._open.clear()
                try:
                    await self._idle.wait()
                    loaded = await self.backend.update_weights(version, tensors)
                finally:
                    self._open.set()
            self.ownership.loaded(run_id)
        seconds = time.perf_counter() - started
        WEIGHT_UPDATE_SECONDS.observe(seconds)
        return loaded, seconds
