"""`/v1/completions`: one engine request per prompt (a list of prompts answers with
`len(prompts) × n` choices, choice `i·n + j` being completion `j` of prompt `i`, as OpenAI
numbers them), plain or as server-sent events."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

from etude.inference.openai_generation import (
    merged,
    new_request,
    sampling_params,
    start_all,
    token_text,
)
from etude.inference.openai_limits import PromptLimits
from etude.inference.openai_protocol import MAX_PROMPTS, CompletionRequest, OpenAIError, unsupported
from etude.inference.serving import Serving
from etude.inference.types import CompletionDelta


@dataclass(slots=True)
class _Logprobs:
    """OpenAI's legacy logprobs of one choice, or of one chunk of it."""

    tokens: list[str] = field(default_factory=list)
    token_logprobs: list[float | None] = field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = field(default_factory=list)
    text_offset: list[int] = field(default_factory=list)

    def add(self, text: str, logprob: float | None, top: dict[str, float] | None, at: int) -> int:
        self.tokens.append(text)
        self.token_logprobs.append(logprob)
        self.top_logprobs.append(top)
        self.text_offset.append(at)
        return at + len(text)


class _Choice:
    def __init__(self, index: int, prompt: list[int], body: CompletionRequest, tokenizer) -> None:
        self.index, self.prompt, self.tokenizer = index, prompt, tokenizer
        self.with_logprobs = body.logprobs is not None
        self.echo = body.echo
        self.started = False
        self.offset = 0  # characters of this choice's text sent so far
        self.generated = 0
        self.text = ""
        self.logprobs = _Logprobs()
        self.finish_reason: str | None = None

    def take(self, delta: CompletionDelta) -> tuple[str, _Logprobs]:
        """The text and logprobs `delta` adds to the choice (the prompt first, once, when
        echoing)."""
        text, logprobs = "", _Logprobs()
        if not self.started:
            self.started = True
            if self.echo:
                text = self.tokenizer.decode(self.prompt)
                if self.with_logprobs:
                    self._prompt_logprobs(delta, logprobs)
        text += delta.text
        self.generated += len(delta.token_ids)
        if self.with_logprobs:
            for position, (token, logprob) in enumerate(
                zip(delta.token_ids, delta.logprobs, strict=True)
            ):
                top = delta.top_logprobs[position] if delta.top_logprobs else {}
                self.offset = logprobs.add(
                    token_text(self.tokenizer, token), logprob,
                    self._named({**top, token: logprob}), self.offset,
                )  # fmt: skip
        self.text += text
        self.finish_reason = delta.finish_reason or self.finish_reason
        return text, logprobs

    def _prompt_logprobs(self, delta: CompletionDelta, logprobs: _Logprobs) -> None:
        scored = delta.prompt_logprobs or [None] * len(self.prompt)
        for token, position in zip(self.prompt, scored, strict=True):
            logprob = None if position is None else position[token]
            top = None if position is None else self._named(position)
            self.offset = logprobs.add(token_text(self.tokenizer, token), logprob, top, self.offset)

    def _named(self, logprobs: dict[int, float]) -> dict[str, float]:
        return {token_text(self.tokenizer, t): lp for t, lp in logprobs.items()}

    def as_dict(self, text: str, logprobs: _Logprobs, finish_reason: str | None) -> dict:
        shown = None
        if self.with_logprobs:
            shown = {
                "tokens": logprobs.tokens, "token_logprobs": logprobs.token_logprobs,
                "top_logprobs": logprobs.top_logprobs, "text_offset": logprobs.text_offset,
            }  # fmt: skip
        return {"index": self.index, "text": text, "logprobs": shown,
                "finish_reason": finish_reason}  # fmt: skip


async def _prompts(prompt, tokenizer, limits: PromptLimits) -> list[list[int]]:
    """Each prompt's token ids; text is measured before it is tokenized, and tokenized off
    the event loop (the loop serves every other request meanwhile)."""
    if isinstance(prompt, str) or (prompt and isinstance(prompt[0], int)):
        prompt = [prompt]
    if len(prompt) > MAX_PROMPTS:
        raise OpenAIError(400, f"at most {MAX_PROMPTS} prompts per request", param="prompt")
    for text in prompt:
        if isinstance(text, str):
            limits.check_prompt(text)
    prompts = await asyncio.to_thread(
        lambda: [tokenizer.encode(p) if isinstance(p, str) else list(p) for p in prompt]
    )
    if not prompts or not all(prompts):
        raise OpenAIError(400, "prompt is empty", param="prompt")
    return prompts


async def complete(
    serving: Serving, body: CompletionRequest, limits: PromptLimits
) -> dict | AsyncIterator[str]:
    """The response body, or its server-sent events when `body.stream`."""
    refusal = unsupported(body)
    if refusal is not None:
        raise refusal
    backend = serving.backend
    prompts = await _prompts(body.prompt, backend.tokenizer, limits)
    wants_logprobs = body.logprobs is not None
    params = sampling_params(
        body, body.max_tokens, top_logprobs=body.logprobs or 0,
        prompt_logprobs=body.logprobs if body.echo and wants_logprobs else None,
    )  # fmt: skip
    requests = [new_request("cmpl", prompt, params) for prompt in prompts]
    streams = await start_all(serving, requests)
    base = {"id": requests[0].request_id, "object": "text_completion",
            "created": int(time.time()), "model": backend.model_name}  # fmt: skip
    choices = [
        _Choice(i * body.n + j, prompt, body, backend.tokenizer)
        for i, prompt in enumerate(prompts)
        for j in range(body.n)
    ]

    def usage() -> dict:
        prompt_tokens = sum(map(len, prompts))  # once per prompt, whatever n
        generated = sum(c.generated for c in choices)
        return {"prompt_tokens": prompt_tokens, "completion_tokens": generated,
                "total_tokens": prompt_tokens + generated}  # fmt: skip

    if body.stream:
        include_usage = body.stream_options is not None and body.stream_options.include_usage

        async def events() -> AsyncIterator[str]:
            async with contextlib.aclosing(merged(streams)) as deltas:  # closing ends them
                async for prompt_index, delta in deltas:
                    choice = choices[prompt_index * body.n + delta.index]
                    text, logprobs = choice.take(delta)
                    chunk = choice.as_dict(text, logprobs, delta.finish_reason)
                    yield f"data: {json.dumps({**base, 'choices': [chunk]})}\n\n"
            if include_usage:
                yield f"data: {json.dumps({**base, 'choices': [], 'usage': usage()})}\n\n"
            yield "data: [DONE]\n\n"

        return events()
    whole = {c.index: _Logprobs() for c in choices}
    async with contextlib.aclosing(merged(streams)) as deltas:
        async for prompt_index, delta in deltas:
            choice = choices[prompt_index * body.n + delta.index]
            _, logprobs = choice.take(delta)
            for name in ("tokens", "token_logprobs", "top_logprobs", "text_offset"):
                getattr(whole[choice.index], name).extend(getattr(logprobs, name))
    return {
        **base,
        "choices": [c.as_dict(c.text, whole[c.index], c.finish_reason) for c in choices],
        "usage": usage(),
    }
