"""Conversions between the inference protobuf messages and the backend's plain types."""

from __future__ import annotations

from google.protobuf import unknown_fields

from etude.api.v1 import common_pb2, inference_pb2
from etude.inference.types import (
    CompletionDelta,
    EngineLoad,
    GenerationRequest,
    InferenceError,
    SamplingParams,
)

MAX_PROMPT_TEXT_CHARS = 1 << 20
"""Far more than any context holds (a token is rarely over 16 characters)."""

_FINISH_REASONS = {
    "stop": inference_pb2.FINISH_REASON_STOP,
    "length": inference_pb2.FINISH_REASON_LENGTH,
    "cancelled": inference_pb2.FINISH_REASON_CANCELLED,
}


def _unknown_fields(message) -> list[int]:
    return [field.field_number for field in unknown_fields.UnknownFieldSet(message)]


def request_from_proto(message: inference_pb2.GenerateRequest, tokenizer) -> GenerationRequest:
    """Raises InferenceError for fields this server does not know (a newer client asking
    for something it would silently not get)."""
    for part, name in ((message, "GenerateRequest"), (message.sampling, "SamplingParams")):
        if unknown := _unknown_fields(part):
            raise InferenceError(f"{name} has fields this server does not know: {unknown}")
    if not message.request_id:
        raise InferenceError("request_id is required")
    if len(message.prompt_text) > MAX_PROMPT_TEXT_CHARS:
        # Tokenizing runs on the event loop: a 64 MB text would stall every other call.
        raise InferenceError(f"prompt_text is longer than {MAX_PROMPT_TEXT_CHARS} characters")
    prompt = tuple(message.prompt_token_ids) or tuple(tokenizer.encode(message.prompt_text))
    s = message.sampling
    sampling = SamplingParams(
        temperature=s.temperature,
        top_p=s.top_p or 1.0,  # 0 is proto3's "unset"
        top_k=s.top_k,
        max_tokens=s.max_tokens,
        stop=tuple(s.stop),
        seed=s.seed if s.HasField("seed") else None,
        n=s.n or 1,
        stop_token_ids=tuple(s.stop_token_ids),
    )
    return GenerationRequest(
        request_id=message.request_id, prompt_token_ids=prompt, sampling=sampling
    )


def chunk_to_proto(delta: CompletionDelta) -> inference_pb2.GenerateChunk:
    return inference_pb2.GenerateChunk(
        index=delta.index,
        token_ids=delta.token_ids,
        logprobs=delta.logprobs,
        policy_versions=delta.policy_versions,
        text=delta.text,
        finish_reason=_FINISH_REASONS.get(delta.finish_reason or "", 0),
    )


_REASON_NAMES = {code: name for name, code in _FINISH_REASONS.items()}


HTTP_ONLY_FIELDS = (
    "top_logprobs", "prompt_logprobs", "presence_penalty", "frequency_penalty",
    "repetition_penalty", "logit_bias",
)  # fmt: skip
"""Sampling fields the OpenAI-compatible HTTP API carries and the gRPC one does not."""


def request_to_proto(request: GenerationRequest) -> inference_pb2.GenerateRequest:
    s = request.sampling
    defaults = SamplingParams()
    carried_not = [f for f in HTTP_ONLY_FIELDS if getattr(s, f) != getattr(defaults, f)]
    if carried_not:  # sent anyway, they would be dropped without a word
        raise InferenceError(
            f"the gRPC API does not carry {', '.join(carried_not)}; use the HTTP API"
        )
    return inference_pb2.GenerateRequest(
        request_id=request.request_id,
        prompt_token_ids=request.prompt_token_ids,
        sampling=inference_pb2.SamplingParams(
            temperature=s.temperature,
            top_p=s.top_p,
            top_k=s.top_k,
            max_tokens=s.max_tokens,
            stop=s.stop,
            seed=s.seed,
            n=s.n,
            stop_token_ids=s.stop_token_ids,
        ),
    )


def delta_from_proto(chunk: inference_pb2.GenerateChunk) -> CompletionDelta:
    return CompletionDelta(
        index=chunk.index,
        token_ids=list(chunk.token_ids),
        logprobs=list(chunk.logprobs),
        policy_versions=list(chunk.policy_versions),
        text=chunk.text,
        finish_reason=_REASON_NAMES.get(chunk.finish_reason),
    )


def load_to_proto(load: EngineLoad) -> inference_pb2.EngineLoad:
    return inference_pb2.EngineLoad(
        version=common_pb2.PolicyVersion(version=load.version), running=load.running,
        waiting=load.waiting, capacity=load.capacity, kv_cache_usage=load.kv_cache_usage,
        draining=load.draining,
    )  # fmt: skip


def load_from_proto(message: inference_pb2.EngineLoad) -> EngineLoad:
    return EngineLoad(
        version=message.version.version, running=message.running, waiting=message.waiting,
        capacity=message.capacity, kv_cache_usage=message.kv_cache_usage,
        draining=message.draining,
    )  # fmt: skip
