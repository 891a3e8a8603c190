"""What the completion and chat endpoints share: a request body's sampling fields as
`SamplingParams`, starting generations so that a refusal is still an HTTP error (not a
broken stream), and the streams of several prompts merged as they come."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from typing import Generic, TypeVar

from etude.inference.openai_protocol import OpenAIError, SamplingFields
from etude.inference.serving import Serving
from etude.inference.types import CompletionDelta, GenerationRequest, InferenceError, SamplingParams

T = TypeVar("T")


def sampling_params(body: SamplingFields, max_tokens: int, **extra) -> SamplingParams:
    bias = []
    for token, value in (body.logit_bias or {}).items():
        try:
            bias.append((int(token), value))
        except ValueError:
            raise OpenAIError(
                400, f"logit_bias keys are token ids, not {token!r}", param="logit_bias"
            ) from None
    return SamplingParams(
        temperature=body.temperature, top_p=body.top_p, top_k=body.top_k,
        max_tokens=max_tokens, seed=body.seed, n=body.n,
        stop=(body.stop,) if isinstance(body.stop, str) else tuple(body.stop or ()),
        presence_penalty=body.presence_penalty, frequency_penalty=body.frequency_penalty,
        repetition_penalty=body.repetition_penalty, logit_bias=tuple(bias), **extra,
    )  # fmt: skip


def new_request(prefix: str, prompt: Sequence[int], sampling: SamplingParams) -> GenerationRequest:
    return GenerationRequest(
        request_id=f"{prefix}-{uuid.uuid4().hex}", prompt_token_ids=tuple(prompt),
        sampling=sampling,
    )  # fmt: skip


class Primed(Generic[T]):
    """An async generator already advanced to its first item: iterating gives that item,
    then the rest. `aclose` closes the generator, and a generator that has started runs
    its cleanup when closed, whether or not anyone iterated further (one never started
    runs none: what it holds would be left to the garbage collector)."""

    def __init__(self, first: T, rest: AsyncGenerator[T]) -> None:
        self._first: T | None = first
        self._rest = rest

    def __aiter__(self) -> Primed[T]:
        return self

    async def __anext__(self) -> T:
        if self._first is not None:
            first, self._first = self._first, None
            return first
        return await anext(self._rest)

    async def aclose(self) -> None:
        self._first = None
        await self._rest.aclose()


Started = Primed[CompletionDelta]
"""A started request's deltas, the first one already received; `aclose` ends the request."""


async def start(serving: Serving, request: GenerationRequest) -> Started:
    """The request started, its first delta already awaited: a request the backend refuses
    raises OpenAIError (400, or 503 for an engine that cannot serve) before a response, a
    stream included, has begun."""
    stream = serving.generate(request)
    try:
        first = await anext(stream)
    except InferenceError as error:
        await stream.aclose()
        raise OpenAIError(400, str(error)) from error
    except RuntimeError as error:
        await stream.aclose()
        raise OpenAIError(503, str(error), "server_error") from error
    return Primed(first, stream)


async def start_all(serving: Serving, requests: list[GenerationRequest]) -> list[Started]:
    """Every request started, or none left running: one refused (or the caller cancelled,
    its client gone) closes the others."""
    started: list[Started] = []
    try:
        for request in requests:
            started.append(await start(serving, request))
    except BaseException:
        for stream in started:
            await stream.aclose()
        raise
    return started


async def merged(streams: list[Started]) -> AsyncIterator[tuple[int, CompletionDelta]]:
    """(stream index, delta) as each stream produces them; closing this (or cancelling its
    consumer) closes them all."""
    queue: asyncio.Queue = asyncio.Queue()
    done = object()

    async def pump(index: int, stream: Started) -> None:
        # Each pump closes its own stream: only the task iterating a generator may close it.
        async with contextlib.aclosing(stream):
            try:
                async for delta in stream:
                    queue.put_nowait((index, delta))
            except Exception as error:  # handed to the consumer, which re-raises it
                queue.put_nowait((index, error))
                return
            queue.put_nowait((index, done))

    tasks = [asyncio.create_task(pump(i, s)) for i, s in enumerate(streams)]
    try:
        remaining = len(tasks)
        while remaining:
            index, item = await queue.get()
            if item is done:
                remaining -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield index, item
    finally:
        for task in tasks:
            task.cancel()
        if tasks:
            # Their streams' cleanup (the engine aborting what is left) is done once this
            # returns. Under a cancellation that repeats (anyio's), the wait may end early:
            # the pumps still finish on their own, their cancellation already delivered.
            await asyncio.wait(tasks)


def token_text(tokenizer, token_id: int) -> str:
    """A token as text, the way OpenAI's logprobs name tokens."""
    return tokenizer.decode([token_id])
