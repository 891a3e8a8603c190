"""The inference service's plain types: a generation request with its sampling parameters,
the completion deltas it streams back, the engine's statistics, the errors a request can
meet, and the checks every backend applies to a request. The server converts protobuf
messages to these at its boundary and the client back, so neither a backend nor a caller
sees gRPC; other services import these and `etude.inference.client`, nothing else.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from etude.common.request_checks import InvalidFieldError, check_text

FinishReason = Literal["stop", "length", "cancelled"]


class InferenceError(Exception):
    """A request the backend refuses (bad sampling parameters, prompt too long...)."""


class EngineDeadError(InferenceError):
    """The engine can no longer serve (its process ended, the kernel killed it): every call
    waiting on it fails with this and the reason, within seconds; health says NOT_SERVING.
    Over gRPC: UNAVAILABLE."""


class EngineFault(RuntimeError):
    """An internal error of the engine ended this request; the backend keeps serving."""


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
    top_logprobs: int = 0
    """Also return the `top_logprobs` most likely tokens at each sampled position."""
    prompt_logprobs: int | None = None
    """Set: return each prompt token's logprob (plus this many alternatives), the first
    token's as None (`echo` with `logprobs` in the OpenAI API)."""
    presence_penalty: float = 0.0
    """Subtracted once from the logit of every token the completion already holds."""
    frequency_penalty: float = 0.0
    """Subtracted from a token's logit per time the completion already holds it."""
    repetition_penalty: float = 1.0
    """Divides positive (multiplies negative) logits of tokens in the prompt or completion."""
    logit_bias: tuple[tuple[int, float], ...] = ()
    """(token id, bias) pairs added to the logits before sampling.

    Penalties and biases, like temperature, shape only the distribution tokens are drawn
    from: the logprobs returned stay the model's own, which is what the trainer recomputes."""

    @property
    def penalised(self) -> bool:
        return bool(
            self.presence_penalty or self.frequency_penalty or self.repetition_penalty != 1.0
        )


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
    top_logprobs: list[dict[int, float]] = field(default_factory=list)
    """Per token, the `SamplingParams.top_logprobs` most likely tokens and their logprobs
    (empty when none were asked for)."""
    prompt_logprobs: list[dict[int, float] | None] | None = None
    """On a completion's first delta when `SamplingParams.prompt_logprobs` is set: per prompt
    token, its logprob and the alternatives' (None for the first token)."""
    text: str = ""
    finish_reason: FinishReason | None = None
    """Set on the completion's last delta only."""


def coalesce(deltas: Iterable[CompletionDelta]) -> list[CompletionDelta]:
    """Consecutive deltas of each completion joined into one (in order of first appearance),
    so a caller that fell behind the engine gets one message per completion, not one per
    token."""
    joined: dict[int, CompletionDelta] = {}
    out: list[CompletionDelta] = []
    for delta in deltas:
        last = joined.get(delta.index)
        if last is None or last.finish_reason is not None:
            last = joined[delta.index] = CompletionDelta(index=delta.index)
            out.append(last)
        last.token_ids += delta.token_ids
        last.logprobs += delta.logprobs
        last.top_logprobs += delta.top_logprobs
        last.prompt_logprobs = last.prompt_logprobs or delta.prompt_logprobs
        last.policy_versions += delta.policy_versions
        last.text += delta.text
        last.finish_reason = delta.finish_reason
    return out


@dataclass(frozen=True, slots=True)
class EngineStats:
    running: int
    waiting: int
    kv_cache_usage: float
    """Fraction of the KV cache in use, 0..1."""
    capacity: int = 0
    """Sequences the engine decodes at once (its `max_num_seqs`)."""


@dataclass(frozen=True, slots=True)
class EngineLoad:
    """What an engine reports to a router (GetLoad): its load and the version it serves."""

    version: int
    running: int
    waiting: int
    capacity: int
    kv_cache_usage: float = 0.0
    draining: bool = False
    """A draining weight update is under way: new requests wait for it."""

    @property
    def outstanding(self) -> int:
        return self.running + self.waiting


TURN_SEPARATOR = "-t"


def affinity_key(request_id: str) -> str:
    """The episode a request belongs to. The turns of one episode are requested as
    `<episode>-t<turn>` (etude.rollout.samplers), and each turn's prompt extends the previous
    one: a router keeps them on one engine, whose prefix cache holds the episode so far."""
    head, sep, turn = request_id.rpartition(TURN_SEPARATOR)
    return head if sep and turn.isdigit() else request_id


MAX_COMPLETIONS = 128
"""Most completions one request may ask for where the backend has no tighter bound."""
MAX_TOKENS = (1 << 31) - 1
"""What the wire's int32 carries; the context length ends a completion well before."""
MAX_STOP_STRINGS, MAX_STOP_CHARS, MAX_STOP_TOKEN_IDS = 32, 1024, 1024
MAX_TOP_LOGPROBS = 20
"""OpenAI's bound on alternatives per token."""
MAX_LOGIT_BIAS, LOGIT_BIAS_RANGE, PENALTY_RANGE = 1024, (-100.0, 100.0), (-2.0, 2.0)
SEED_RANGE = (-(1 << 63), (1 << 63) - 1)


def validate_request(
    request: GenerationRequest, *, max_model_len: int, vocab_size: int, max_n: int | None = None
) -> None:
    """Raise InferenceError naming every problem of a request any backend would refuse.

    Every number must be finite and in range before it reaches the sampler: one NaN
    temperature turns the probabilities into NaN, and the sampling step fails for the
    whole batch."""
    p, prompt = request.sampling, request.prompt_token_ids
    max_n = max_n or MAX_COMPLETIONS
    problems = []
    try:
        check_text(request.request_id, "request_id", required=True)
    except InvalidFieldError as error:
        problems.append(str(error))
    if not prompt:
        problems.append("the prompt is empty")
    elif len(prompt) >= max_model_len:
        problems.append(
            f"the prompt has {len(prompt)} tokens; the context holds {max_model_len}"
            " (max_model_len: prompt plus at least one generated token)"
        )
    elif not all(0 <= t < vocab_size for t in prompt):
        problems.append(f"prompt token ids must be in 0..{vocab_size - 1}")
    if not 1 <= p.max_tokens <= MAX_TOKENS:
        problems.append(f"max_tokens must be in 1..{MAX_TOKENS}")
    if not 1 <= p.n <= max_n:
        problems.append(f"n must be in 1..{max_n}")
    if not (math.isfinite(p.temperature) and p.temperature >= 0):
        problems.append(f"temperature must be a finite number ≥ 0, not {p.temperature!r}")
    if not 0 < p.top_p <= 1:  # False for NaN as well
        problems.append(f"top_p must be in (0, 1], not {p.top_p!r}")
    if p.top_k < -1:
        problems.append("top_k must be ≥ 0 (0 or -1 disable it)")
    if p.seed is not None and not SEED_RANGE[0] <= p.seed <= SEED_RANGE[1]:
        problems.append("seed must fit in a signed 64-bit integer")
    if len(p.stop) > MAX_STOP_STRINGS:
        problems.append(f"stop has {len(p.stop)} strings; at most {MAX_STOP_STRINGS}")
    elif not all(0 < len(s) <= MAX_STOP_CHARS for s in p.stop):
        problems.append(f"stop strings must have 1..{MAX_STOP_CHARS} characters")
    if len(p.stop_token_ids) > MAX_STOP_TOKEN_IDS:
        problems.append(f"stop_token_ids has more than {MAX_STOP_TOKEN_IDS} entries")
    elif not all(0 <= t < vocab_size for t in p.stop_token_ids):
        problems.append(f"stop_token_ids must be in 0..{vocab_size - 1}")
    problems += _shaping_problems(p, vocab_size)
    if problems:
        raise InferenceError("; ".join(problems))


def _shaping_problems(p: SamplingParams, vocab_size: int) -> list[str]:
    """What is wrong with the logprob and distribution-shaping fields."""
    problems = []
    if not 0 <= p.top_logprobs <= MAX_TOP_LOGPROBS:
        problems.append(f"top_logprobs must be in 0..{MAX_TOP_LOGPROBS}")
    if p.prompt_logprobs is not None and not 0 <= p.prompt_logprobs <= MAX_TOP_LOGPROBS:
        problems.append(f"prompt_logprobs must be in 0..{MAX_TOP_LOGPROBS}")
    low, high = PENALTY_RANGE
    for name in ("presence_penalty", "frequency_penalty"):
        value = getattr(p, name)
        if not low <= value <= high:  # False for NaN as well
            problems.append(f"{name} must be in [{low}, {high}], not {value!r}")
    if not (math.isfinite(p.repetition_penalty) and p.repetition_penalty > 0):
        problems.append(f"repetition_penalty must be > 0, not {p.repetition_penalty!r}")
    low, high = LOGIT_BIAS_RANGE
    if len(p.logit_bias) > MAX_LOGIT_BIAS:
        problems.append(f"logit_bias has more than {MAX_LOGIT_BIAS} entries")
    elif not all(0 <= t < vocab_size and low <= b <= high for t, b in p.logit_bias):
        problems.append(
            f"logit_bias maps token ids in 0..{vocab_size - 1} to biases in [{low}, {high}]"
        )
    return problems


class PolicyOwnedError(RuntimeError):
    """Another live run owns the engine (etude.inference.ownership); the message names both
    runs."""
