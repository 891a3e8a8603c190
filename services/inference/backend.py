"""The interface every inference backend implements, and the plain types it speaks.

The server converts protobuf messages to these types at its boundary, so a backend never
sees gRPC. Two backends exist: `torch` (etude.inference.engine, the same model code the
trainer runs) and `vllm` (etude.inference.vllm_backend).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Literal, Protocol

import torch

FinishReason = Literal["stop", "length", "cancelled"]


class InferenceError(Exception):
    """A request the backend refuses (bad sampling parameters, prompt too long...)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SamplingParams:
    temperature: float = 1.0
    """0 means greedy."""
    top_p: float = 1.0
    """1.0 disables nucleus sampling."""
    top_k: int = 0
    """0 disables top-k."""
    max_tokens: int = 16
    stop: tuple[str, ...] = ()
    """Generation ends once the decoded completion contains one of these strings."""
    seed: int | None = None
    """Set to make sampling reproducible, whatever else is batched alongside."""
    n: int = 1
    """Completions for the prompt; they share the prompt's prefill."""
    stop_token_ids: tuple[int, ...] = ()
    """Generation also ends after sampling one of these (kept in the output), e.g. the
    chat template's end-of-turn token."""
    ignore_eos: bool = False
    """Keep generating past the end-of-sequence token (benchmarks want fixed lengths)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GenerationRequest:
    request_id: str
    prompt_token_ids: tuple[int, ...]
    sampling: SamplingParams = SamplingParams()


@dataclass(kw_only=True, slots=True)
class CompletionDelta:
    """New tokens of completion `index` since its previous delta."""

    index: int
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    """Log-probability of each sampled token under the distribution it was sampled from,
    before temperature, top-k or top-p are applied (what the trainer recomputes)."""
    policy_versions: list[int] = field(default_factory=list)
    """The policy version each token was sampled under."""
    text: str = ""
    finish_reason: FinishReason | None = None
    """Set on the completion's last delta only."""


@dataclass(frozen=True, slots=True)
class EngineStats:
    running: int
    waiting: int
    kv_cache_usage: float
    """Fraction of the KV cache in use, 0..1."""


def validate_request(
    request: GenerationRequest, *, max_model_len: int, vocab_size: int, max_n: int | None = None
) -> None:
    """Raise InferenceError naming every problem of a request any backend would refuse."""
    p, prompt = request.sampling, request.prompt_token_ids
    problems = []
    if not prompt:
        problems.append("the prompt is empty")
    elif len(prompt) >= max_model_len:
        problems.append(
            f"the prompt has {len(prompt)} tokens; the context holds {max_model_len}"
            " (max_model_len: prompt plus at least one generated token)"
        )
    elif not all(0 <= t < vocab_size for t in prompt):
        problems.append(f"prompt token ids must be in 0..{vocab_size - 1}")
    if p.max_tokens < 1:
        problems.append("max_tokens must be at least 1")
    if p.n < 1 or (max_n is not None and p.n > max_n):
        problems.append(f"n must be in 1..{max_n}" if max_n else "n must be at least 1")
    if p.temperature < 0:
        problems.append("temperature must be ≥ 0")
    if not 0 < p.top_p <= 1:
        problems.append("top_p must be in (0, 1]")
    if p.top_k < 0:
        problems.append("top_k must be ≥ 0 (0 disables it)")
    if not all(0 <= t < vocab_size for t in p.stop_token_ids):
        problems.append(f"stop_token_ids must be in 0..{vocab_size - 1}")
    if problems:
        raise InferenceError("; ".join(problems))


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
