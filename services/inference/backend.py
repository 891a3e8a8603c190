"""The interface every inference backend implements. Two exist: `torch`
(etude.inference.torch_backend over etude.inference.engine, the same model code the trainer
runs) and `vllm` (etude.inference.vllm_backend); etude.inference.backend_factory starts the
configured one. They speak the plain types of etude.inference.types.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from typing import Protocol

import torch

from etude.inference.types import CompletionDelta, EngineStats, GenerationRequest


class Tokenizer(Protocol):
    eos_token_id: int | None

    def encode(self, text: str) -> list[int]: ...
    def decode(self, token_ids: list[int]) -> str: ...


class InferenceBackend(Protocol):
    name: str
    """`torch` or `vllm`."""
    model_name: str
    num_parameters: int
    max_model_len: int
    tokenizer: Tokenizer

    @property
    def policy_version(self) -> int: ...

    @property
    def alive(self) -> bool:
        """False once the engine has died and can serve no request again."""
        ...

    def generate(self, request: GenerationRequest) -> AsyncIterator[CompletionDelta]:
        """Stream deltas of all n completions until each has finished. Closing the iterator
        early (`aclose`, or the consuming task being cancelled) cancels the request and
        frees its cache."""
        ...

    async def update_weights(
        self, version: int, tensors: Iterable[tuple[str, torch.Tensor]]
    ) -> int:
        """Load tensors named as in the Hugging Face checkpoint between decode steps,
        without dropping requests in flight; tokens sampled afterwards carry `version`.
        Returns how many tensors were loaded."""
        ...

    def stats(self) -> EngineStats: ...

    async def close(self) -> None: ...
