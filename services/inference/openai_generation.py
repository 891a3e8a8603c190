"""What the completion and chat endpoints share: a request body's sampling fields as
`SamplingParams`, starting generations so that a refusal is still an HTTP error (not a
broken stream), and the streams of several prompts merged as they come."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Sequence

from etude.inference.openai_protocol import OpenAIError, SamplingFields
from etude.inference.serving import Serving
from etude.inference.types import CompletionDelta, GenerationRequest, InferenceError, SamplingParams


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


async def start(serving: Serving, request: GenerationRequest) -> AsyncIterator[CompletionDelta]:
    """The request's deltas, its first one already awaited: a request the backend refuses
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

    async def deltas() -> AsyncIterator[CompletionDelta]:
        try:
            yield first
            async for delta in stream:
                yield delta
        finally:
            await stream.aclose()

    return deltas()


async def start_all(
    serving: Serving, requests: list[GenerationRequest]
) -> list[AsyncIterator[CompletionDelta]]:
    """Every request started, or none left running: one refused closes the others."""
    started: list[AsyncIterator[CompletionDelta]] = []
    try:
        for request in requests:
            started.append(await start(serving, request))
    except BaseException:
        for stream in started:
            await stream.aclose()
        raise
    return started


async def merged(
    streams: list[AsyncIterator[CompletionDelta]],
) -> AsyncIterator[tuple[int, CompletionDelta]]:
    """(stream index, delta) as each stream produces them; closing this closes them all."""
    queue: asyncio.Queue = asyncio.Queue()
    done = object()

    async def pump(index: int, stream: AsyncIterator[CompletionDelta]) -> None:
        try:
            async for delta in stream:
                await queue.put((index, delta))
        except BaseException as error:  # handed to the consumer, which re-raises it
            await queue.put((index, error))
            return
        await queue.put((index, done))

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
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for stream in streams:
            await stream.aclose()


def token_text(tokenizer, token_id: int) -> str:
    """A token as text, the way OpenAI's logprobs name tokens."""
    return tokenizer.decode([token_id])
