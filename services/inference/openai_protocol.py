"""The request bodies of the OpenAI-compatible HTTP API, and its error.

Unknown fields are refused (400 naming the field) rather than ignored: a client asking for
something this server does not do must not get something else silently. Fields OpenAI
defines that this server cannot honour are declared and refused by `unsupported` with a
message saying why. A field sent as null takes its default, as in OpenAI's API. NaN and
infinity (JSON's `NaN`, `1e999`) are refused here; the ranges are checked once, for both
APIs, by the backend's validation (etude.inference.types).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

MAX_PROMPTS = 64
"""Prompts in one /v1/completions request (each is a request to the engine)."""
MAX_MESSAGES = 4096
MAX_TOOLS = 128


class OpenAIError(Exception):
    """Answered in OpenAI's error shape, which the official clients parse into exceptions."""

    def __init__(
        self, status: int, message: str, kind: str = "invalid_request_error", *,
        param: str | None = None, code: str | None = None,
    ) -> None:  # fmt: skip
        super().__init__(message)
        self.status, self.message, self.kind = status, message, kind
        self.param, self.code = param, code

    def body(self) -> dict:
        error = {"message": self.message, "type": self.kind, "param": self.param}
        return {"error": {**error, "code": self.code}}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    @model_validator(mode="before")
    @classmethod
    def _null_is_the_default(cls, data: Any) -> Any:
        # OpenAI's optional fields are nullable, null meaning the default, and clients
        # that build requests from keyword arguments send it (`temperature: null`).
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data


class StreamOptions(_Strict):
    include_usage: bool = False
    """A last chunk with the request's token counts (and no choices)."""


class SamplingFields(_Strict):
    """What both generation endpoints share."""

    model: str | None = None
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    """Not in OpenAI's API; vLLM's extension, same meaning."""
    n: int = 1
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    """vLLM's extension."""
    logit_bias: dict[str, float] | None = None
    """Token id (as a string, as OpenAI sends it) → bias added to its logit."""
    user: str | None = None


class CompletionRequest(SamplingFields):
    prompt: str | list[int] | list[str] | list[list[int]]
    max_tokens: int = 16
    logprobs: int | None = None
    """The sampled tokens' logprobs, with this many alternatives each (0..20)."""
    echo: bool = False
    best_of: int | None = None
    suffix: str | None = None


class FunctionDefinition(_Strict):
    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=dict)
    """A JSON schema of an object: its `properties`, `required` and their `type`s."""
    strict: bool | None = None

    @field_validator("parameters")
    @classmethod
    def _an_object_s_schema(cls, parameters: dict[str, Any]) -> dict[str, Any]:
        properties = parameters.get("properties") or {}
        if not isinstance(properties, dict) or not all(
            isinstance(schema, dict | bool) for schema in properties.values()
        ):
            raise ValueError("properties must map each parameter's name to its JSON schema")
        required = parameters.get("required") or []
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise ValueError("required must be a list of parameter names")
        return parameters


class Tool(_Strict):
    type: Literal["function"]
    function: FunctionDefinition


class FunctionCall(_Strict):
    name: str
    arguments: str
    """A JSON object, as a string (OpenAI's encoding)."""


class ToolCall(_Strict):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class TextPart(BaseModel):
    model_config = ConfigDict(extra="allow")
    type: str
    text: str | None = None


class Message(BaseModel):
    # Clients send extra keys on messages (`name`, `refusal`, `annotations`...) that carry
    # nothing the policy reads; they are kept off the prompt, not refused.
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None


class NamedToolChoice(_Strict):
    type: Literal["function"]
    function: dict[str, str]


class ChatCompletionRequest(SamplingFields):
    messages: list[Message] = Field(min_length=1, max_length=MAX_MESSAGES)
    tools: list[Tool] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    logprobs: bool = False
    top_logprobs: int | None = None
    response_format: dict[str, Any] | None = None
    # What clients send about the request rather than its answer (the Agents SDK, LiteLLM):
    # accepted and not acted on, as the answer is the same with or without them.
    metadata: dict[str, str] | None = None
    store: bool | None = None
    """Only false: nothing is stored for later retrieval."""
    service_tier: str | None = None
    """Only `auto` or `default`: there is one tier."""
    prompt_cache_key: str | None = None
    safety_identifier: str | None = None


def unsupported(body: CompletionRequest | ChatCompletionRequest) -> OpenAIError | None:
    """A field OpenAI defines that this server would not honour as asked."""
    why: dict[str, str] = {}
    if isinstance(body, CompletionRequest):
        if body.best_of not in (None, body.n):
            why["best_of"] = "best_of is not supported (ask for n completions and rank them)"
        if body.suffix:
            why["suffix"] = "suffix (insertion) is not supported by this policy"
    else:
        choice = body.tool_choice
        if choice == "required" or isinstance(choice, NamedToolChoice):
            why["tool_choice"] = (
                "tool_choice may be 'auto' or 'none': decoding is not constrained, the policy "
                "decides whether to call a tool"
            )
        if body.response_format and body.response_format.get("type") != "text":
            why["response_format"] = "only response_format {'type': 'text'} is supported"
        if body.top_logprobs is not None and not body.logprobs:
            why["top_logprobs"] = "top_logprobs needs logprobs: true"
        if body.store:
            why["store"] = "completions are not stored: store may only be false"
        if body.service_tier not in (None, "auto", "default"):
            why["service_tier"] = "there is one service tier: 'auto' or 'default'"
    if body.stream_options is not None and not body.stream:
        why["stream_options"] = "stream_options is only allowed when stream is true"
    first = next(iter(why.items()), None)
    return None if first is None else OpenAIError(400, first[1], param=first[0])


class TokenizeRequest(_Strict):
    model: str | None = None
    prompt: str = Field(max_length=1 << 22)


class DetokenizeRequest(_Strict):
    model: str | None = None
    tokens: list[int] = Field(max_length=1 << 20)
