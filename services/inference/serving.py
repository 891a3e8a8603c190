"""What both front doors (gRPC and the OpenAI-compatible HTTP API) share: requests into the
backend, deltas out, with the latency metrics observed once, here."""

from __future__ import annotations

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
from etude.inference.types import CompletionDelta, GenerationRequest


class Serving:
    def __init__(self, backend: InferenceBackend) -> None:
        self.backend = backend

    async def generate(self, request: GenerationRequest) -> AsyncIterator[CompletionDelta]:
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
        self, version: int, tensors: Iterable[tuple[str, torch.Tensor]], started: float
    ) -> tuple[int, float]:
        """Load a policy version; returns tensors loaded and seconds since `started` (the
        first byte received)."""
        loaded = await self.backend.update_weights(version, tensors)
        seconds = time.perf_counter() - started
        WEIGHT_UPDATE_SECONDS.observe(seconds)
        return loaded, seconds
