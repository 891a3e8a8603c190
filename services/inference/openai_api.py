"""An OpenAI-compatible `/v1/completions` (plus `/v1/models` and `/health`) over the same
`Serving` as the gRPC API, so standard clients and load tools can talk to the policy.

Unknown request fields are refused (400) rather than ignored: a client asking for
`echo` or `best_of` would otherwise get something other than what it asked for.

`/v1/*` asks for the same credential as gRPC `Generate` (a role token as the bearer, i.e.
the OpenAI client's `api_key`): 401 without a valid one, 403 for a role that may not
generate. `/health` stays open for probes.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from importlib.metadata import version as package_version

from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from fastapi_offline import FastAPIOffline
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, generate_latest
from pydantic import BaseModel, ConfigDict, Field

from etude.common.auth import ACCESS, Verifier, bearer, metrics_authorizer
from etude.common.settings import get_settings
from etude.inference.serving import Serving
from etude.inference.types import GenerationRequest, InferenceError, SamplingParams


class CompletionRequest(BaseModel):
    # NaN and infinity (JSON's `NaN`, or `1e999`) are refused here; the ranges of the
    # sampling parameters are checked once, for both APIs, by the backend's validation.
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    model: str | None = None
    prompt: str | list[int]
    max_tokens: int = 16
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    """Not in OpenAI's API; vLLM's extension, same meaning."""
    n: int = 1
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    logprobs: int | None = Field(default=None, ge=0, le=0)
    """0: the sampled tokens' logprobs (alternatives are not returned)."""
    user: str | None = None


def _error(
    status: int, message: str, kind: str = "invalid_request_error", *, param: str | None = None,
    code: str | None = None,
) -> JSONResponse:  # fmt: skip
    """OpenAI's error shape: what the official clients parse into their exceptions."""
    error = {"message": message, "type": kind, "param": param, "code": code}
    return JSONResponse(status_code=status, content={"error": error})


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    prompt: str = Field(max_length=1 << 22)


class DetokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: str | None = None
    tokens: list[int] = Field(max_length=1 << 20)


GENERATE_ROLES = ACCESS["etude.api.v1.InferenceService"]["Generate"]


class _UnknownModel(LookupError):
    pass


class _Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        self.status, self.message = status, message


def _generating_roles_only(verifier: Verifier):
    async def authorize(request: Request) -> None:
        token = bearer(request.headers.get("authorization"))
        if verifier.check(token, GENERATE_ROLES) is None:
            return
        if verifier.role_of(token) is None:
            raise _Refused(401, "a valid API key (a role token) is required")
        raise _Refused(403, "this API key's role may not generate")

    return authorize


def create_app(serving: Serving, verifier: Verifier | None = None) -> FastAPI:
    """`verifier` unset: the process's credentials (ETUDE_AUTH__*)."""
    backend = serving.backend
    guarded = [
        Depends(_generating_roles_only(verifier or Verifier.from_settings(get_settings().auth)))
    ]
    metrics_allowed = metrics_authorizer(get_settings().auth)  # its tokens read once
    app = FastAPIOffline(title="Étude inference (OpenAI-compatible)")  # /docs without a CDN

    @app.exception_handler(_Refused)
    async def refused(request: Request, exc: _Refused) -> JSONResponse:
        kind = "authentication_error" if exc.status == 401 else "permission_error"
        return _error(exc.status, exc.message, kind)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'][1:])}: {e['msg']}" for e in exc.errors()
        )
        fields = [".".join(str(p) for p in e["loc"][1:]) for e in exc.errors()]
        return _error(400, problems, param=fields[0] if fields else None)

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
        tokens = backend.tokenizer.encode(body.prompt)
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
    async def completions(body: CompletionRequest):
        check_model(body.model)
        prompt = (
            body.prompt if isinstance(body.prompt, list) else backend.tokenizer.encode(body.prompt)
        )
        stop = (body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ())
        request = GenerationRequest(
            request_id=f"cmpl-{uuid.uuid4().hex}",
            prompt_token_ids=tuple(prompt),
            sampling=SamplingParams(
                temperature=body.temperature,
                top_p=body.top_p,
                top_k=body.top_k,
                max_tokens=body.max_tokens,
                stop=stop,
                seed=body.seed,
                n=body.n,
            ),
        )
        stream = serving.generate(request)
        try:
            first = await anext(stream)
        except InferenceError as error:
            return _error(400, str(error))
        except RuntimeError as error:
            return _error(503, str(error), "server_error")
        created = int(time.time())
        base = {
            "id": request.request_id,
            "object": "text_completion",
            "created": created,
            "model": backend.model_name,
        }

        async def deltas():
            yield first
            async for delta in stream:
                yield delta

        if body.stream:
            return StreamingResponse(
                _sse(deltas(), base, body.logprobs is not None), media_type="text/event-stream"
            )
        choices = {
            i: {"index": i, "text": "", "tokens": [], "logprobs": [], "finish_reason": None}
            for i in range(body.n)
        }
        async for delta in deltas():
            choice = choices[delta.index]
            choice["text"] += delta.text
            choice["tokens"] += delta.token_ids
            choice["logprobs"] += delta.logprobs
            choice["finish_reason"] = delta.finish_reason or choice["finish_reason"]
        generated = sum(len(c["tokens"]) for c in choices.values())
        return {
            **base,
            "choices": [_choice(c, body.logprobs is not None) for c in choices.values()],
            "usage": {
                "prompt_tokens": len(prompt),
                "completion_tokens": generated,
                "total_tokens": len(prompt) + generated,
            },
        }

    return app


def _choice(c: dict, with_logprobs: bool) -> dict:
    logprobs = None
    if with_logprobs:
        # Token ids as text ("token_id:N"), as vLLM does when tokens do not decode alone.
        logprobs = {
            "tokens": [f"token_id:{t}" for t in c["tokens"]],
            "token_logprobs": c["logprobs"],
        }
    return {
        "index": c["index"],
        "text": c["text"],
        "logprobs": logprobs,
        "finish_reason": c["finish_reason"],
    }


async def _sse(deltas: AsyncIterator, base: dict, with_logprobs: bool) -> AsyncIterator[str]:
    async for delta in deltas:
        choice = _choice(
            {
                "index": delta.index,
                "text": delta.text,
                "tokens": delta.token_ids,
                "logprobs": delta.logprobs,
                "finish_reason": delta.finish_reason,
            },
            with_logprobs,
        )
        yield f"data: {json.dumps({**base, 'choices': [choice]})}\n\n"
    yield "data: [DONE]\n\n"
