"""The OpenAI-compatible HTTP API over the same `Serving` as the gRPC API, so standard
clients, agent harnesses and load tools can talk to the policy: `/v1/chat/completions`
(etude.inference.openai_chat), `/v1/completions` (etude.inference.openai_completions),
`/v1/models`, vLLM's `/tokenize`, `/detokenize` and `/version`, Prometheus `/metrics`, and
`/health`. Errors come in OpenAI's shape (etude.inference.openai_protocol.OpenAIError), the
request bodies' rules are in etude.inference.openai_protocol.

`/v1/*`, `/tokenize` and `/detokenize` ask for the same credential as gRPC `Generate` (a
role token as the bearer, i.e. the OpenAI client's `api_key`): 401 without a valid one, 403
for a role that may not generate, answered from the headers before any of the body is read
(etude.common.http_gate, which also caps bodies: 413). `/health` stays open for probes.

A client that disconnects cancels its generations, streamed or not: the engine frees their
slots at its next step (etude.common.http_server.cancel_on_disconnect watches the
connection while a handler runs; a streamed response watches it while it streams).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Coroutine
from importlib.metadata import version as package_version
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi_offline import FastAPIOffline
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest

from etude.common.auth import ACCESS, Verifier, metrics_authorizer
from etude.common.http_gate import Refusal, RequestGate, role_check
from etude.common.http_server import cancel_on_disconnect
from etude.common.settings import get_settings
from etude.common.strict_json import StrictJSONRoute
from etude.inference.config import InferenceConfig, InferenceSettings
from etude.inference.openai_chat import chat
from etude.inference.openai_completions import complete
from etude.inference.openai_generation import Primed
from etude.inference.openai_limits import PromptLimits
from etude.inference.openai_protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    OpenAIError,
    TokenizeRequest,
)
from etude.inference.serving import Serving


def _error(
    status: int, message: str, kind: str = "invalid_request_error", *, param: str | None = None,
    code: str | None = None,
) -> JSONResponse:  # fmt: skip
    error = OpenAIError(status, message, kind, param=param, code=code)
    return JSONResponse(status_code=status, content=error.body())


GENERATE_ROLES = ACCESS["etude.api.v1.InferenceService"]["Generate"]


GUARDED = ("/v1", "/tokenize", "/detokenize")
"""Paths that need a role that may generate."""
GENERATION_ROUTES = ("/v1/chat/completions", "/v1/completions", "/tokenize", "/detokenize")
"""Routes whose bodies may be large (`http_max_generation_body_bytes`)."""
_KINDS = {401: "authentication_error", 403: "permission_error"}


class _UnknownModel(LookupError):
    pass


class _Refused(Exception):
    def __init__(self, refusal: Refusal) -> None:
        self.refusal = refusal


def _refused(refusal: Refusal) -> JSONResponse:
    kind = _KINDS.get(refusal.status, "invalid_request_error")  # 413
    return _error(refusal.status, refusal.message, kind)


def create_app(
    serving: Serving, verifier: Verifier | None = None, config: InferenceConfig | None = None
) -> FastAPI:
    """`verifier` unset: the process's credentials (ETUDE_AUTH__*); `config` unset: the
    process's settings (ETUDE_INFERENCE__*: body caps, prompt limits)."""
    backend = serving.backend
    authorize = role_check(
        verifier or Verifier.from_settings(get_settings().auth),
        GENERATE_ROLES,
        unauthenticated="a valid API key (a role token) is required",
        forbidden="this API key's role may not generate",
    )
    config = config or InferenceSettings().inference
    limits = PromptLimits(
        backend.max_model_len, config.max_prompt_bytes_per_token, config.max_tool_parameters
    )

    async def authorized(request: Request) -> None:  # behind the gate: a second line
        refusal = authorize(request.headers.get("authorization"))
        if refusal is not None:
            raise _Refused(refusal)

    guarded = [Depends(authorized)]
    metrics_allowed = metrics_authorizer(get_settings().auth)  # its tokens read once
    app = FastAPIOffline(title="Étude inference (OpenAI-compatible)")  # /docs without a CDN
    app.router.route_class = StrictJSONRoute  # every route below: a NaN, or `"\ud800"` → 400
    app.add_middleware(
        RequestGate,
        authorize=authorize,
        guarded=GUARDED,
        respond=_refused,
        max_body_bytes=config.http_max_body_bytes,
        body_limits=dict.fromkeys(GENERATION_ROUTES, config.http_max_generation_body_bytes),
    )

    @app.exception_handler(_Refused)
    async def refused(request: Request, exc: _Refused) -> JSONResponse:
        return _refused(exc.refusal)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}" for e in exc.errors()
        )
        fields = [".".join(str(p) for p in e["loc"][1:]) for e in exc.errors()]
        return _error(400, problems, param=fields[0] or None if fields else None)

    @app.exception_handler(OpenAIError)
    async def refused_request(request: Request, exc: OpenAIError) -> JSONResponse:
        return JSONResponse(status_code=exc.status, content=exc.body())

    @app.exception_handler(_UnknownModel)
    async def unknown_model(request: Request, exc: _UnknownModel) -> JSONResponse:
        return _error(404, str(exc), param="model", code="model_not_found")

    def check_model(model: str | None) -> None:
        """The one policy served answers to its own name only (or none given): a client
        asking for another model must not silently get this one."""
        if model is not None and model != backend.model_name:
            raise _UnknownModel(
                f"The model `{model}` does not exist; this server serves `{backend.model_name}`"
            )

    @app.get("/version")
    async def version() -> dict:
        return {"version": package_version("etude"), "backend": backend.name,
                "model": backend.model_name, "policy_version": backend.policy_version}  # fmt: skip

    @app.get("/metrics", include_in_schema=False)
    async def metrics(request: Request) -> Response:
        """The same Prometheus metrics as the metrics port, for scrapers of the HTTP port
        (vLLM serves them here); behind the operator token when metrics require one."""
        if metrics_allowed is not None and not metrics_allowed(
            request.headers.get("authorization")
        ):
            return _error(401, "metrics need the operator token", "authentication_error")
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

    @app.post("/tokenize", dependencies=guarded)
    async def tokenize(body: TokenizeRequest) -> dict:
        check_model(body.model)
        # Up to 4 M characters: tokenized off the event loop, which serves everything else.
        tokens = await asyncio.to_thread(backend.tokenizer.encode, body.prompt)
        return {"tokens": tokens, "count": len(tokens), "max_model_len": backend.max_model_len}

    @app.post("/detokenize", dependencies=guarded)
    async def detokenize(body: DetokenizeRequest) -> dict:
        check_model(body.model)
        if any(t < 0 for t in body.tokens):
            return _error(400, "token ids must not be negative", param="tokens")
        try:
            return {"prompt": backend.tokenizer.decode(body.tokens)}
        except (IndexError, ValueError, OverflowError) as error:
            return _error(400, f"not token ids of this model: {error}", param="tokens")

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "policy_version": backend.policy_version}

    @app.get("/v1/models", dependencies=guarded)
    async def models() -> dict:
        return {
            "object": "list",
            "data": [{"id": backend.model_name, "object": "model", "owned_by": "etude"}],
        }

    @app.post("/v1/completions", dependencies=guarded)
    async def completions(request: Request, body: CompletionRequest):
        check_model(body.model)
        return await cancel_on_disconnect(request.receive, _answer(complete(serving, body, limits)))

    @app.post("/v1/chat/completions", dependencies=guarded)
    async def chat_completions(request: Request, body: ChatCompletionRequest):
        check_model(body.model)
        return await cancel_on_disconnect(request.receive, _answer(chat(serving, body, limits)))

    return app


class _EventStream(StreamingResponse):
    """Server-sent events whose generator is closed however the response ends, its
    requests with it: a client that disconnects before the first event is sent would
    otherwise leave them to the garbage collector."""

    media_type = "text/event-stream"

    async def __call__(self, scope, receive, send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self.body_iterator.aclose()


async def _answer(work: Coroutine[Any, Any, dict | AsyncGenerator[str]]):
    """The body, or the events, primed: a generator that has run to its first event closes
    its requests when it is closed."""
    response = await work
    if isinstance(response, dict):
        return response
    return _EventStream(Primed(await anext(response), response))
