"""`/v1/chat/completions`, plain or as server-sent events, over the policy's own format
(etude.inference.chat_format). A streamed turn sends its prose as `content` deltas and each
tool call whole (name and arguments in one delta) once its block has closed, the split a
whole turn gets (`TurnStream`), so both read the same."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator

from etude.inference.chat_format import IM_END, ChatFormat, TurnStream
from etude.inference.openai_generation import new_request, sampling_params, start_all, token_text
from etude.inference.openai_limits import PromptLimits
from etude.inference.openai_protocol import ChatCompletionRequest, unsupported
from etude.inference.serving import Serving
from etude.inference.types import CompletionDelta


class _Choice:
    def __init__(self, index: int, body: ChatCompletionRequest, chat: ChatFormat, tokenizer):
        self.index, self.body, self.tokenizer = index, body, tokenizer
        self.stream = TurnStream(chat)
        self.content = ""
        self.tool_calls: list[dict] = []
        self.generated = 0
        self.logprobs: list[dict] = []
        self.finish_reason: str | None = None

    def take(self, delta: CompletionDelta) -> tuple[list[dict], list[dict]]:
        """What `delta` adds: message deltas (content, or one tool call each) and logprobs."""
        self.generated += len(delta.token_ids)
        logprobs = self._logprobs(delta)
        self.logprobs += logprobs
        if delta.finish_reason is not None:
            self.finish_reason = delta.finish_reason
        parts = []
        for part in self.stream.feed(delta.text, final=delta.finish_reason is not None):
            if isinstance(part, str):
                self.content += part
                parts.append({"content": part})
            elif self.body.parallel_tool_calls is not False or not self.tool_calls:
                parts.append({"tool_calls": [{"index": len(self.tool_calls), **part}]})
                self.tool_calls.append(part)
        return parts, logprobs

    @property
    def reason(self) -> str | None:
        return "tool_calls" if self.tool_calls else self.finish_reason

    def message(self) -> dict:
        message = {"role": "assistant", "content": self.content.strip() or None}
        if self.tool_calls:
            message["tool_calls"] = self.tool_calls
        elif message["content"] is None:
            message["content"] = ""
        return message

    def _logprobs(self, delta: CompletionDelta) -> list[dict]:
        if not self.body.logprobs:
            return []
        entries = []
        for position, (token, logprob) in enumerate(
            zip(delta.token_ids, delta.logprobs, strict=True)
        ):
            top = delta.top_logprobs[position] if delta.top_logprobs else {}
            entries.append({**self._entry(token, logprob), "top_logprobs": [
                self._entry(t, lp) for t, lp in top.items()
            ]})  # fmt: skip
        return entries

    def _entry(self, token: int, logprob: float) -> dict:
        text = token_text(self.tokenizer, token)
        return {"token": text, "logprob": logprob, "bytes": list(text.encode())}


async def chat(
    serving: Serving, body: ChatCompletionRequest, limits: PromptLimits
) -> dict | AsyncIterator[str]:
    """The response body, or its server-sent events when `body.stream`."""
    refusal = unsupported(body)
    if refusal is not None:
        raise refusal
    limits.check_chat(body.messages, body.tools)
    backend = serving.backend
    tokenizer = backend.tokenizer

    def render() -> tuple[ChatFormat, list[int], list[int]]:
        chat_format = ChatFormat(body.tools, body.tool_choice)
        prompt = tokenizer.encode(chat_format.prompt(body.messages))
        return chat_format, prompt, tokenizer.encode(IM_END)

    # Off the event loop: a prompt as long as the context allows takes a while to render and
    # tokenize, and the loop serves every other request, gRPC's GetLoad and health included.
    chat_format, prompt, turn_end = await asyncio.to_thread(render)
    max_tokens = body.max_completion_tokens or body.max_tokens
    params = sampling_params(
        body, max_tokens or max(1, backend.max_model_len - len(prompt)),
        stop_token_ids=tuple(turn_end) if len(turn_end) == 1 else (),
        top_logprobs=body.top_logprobs or 0,
    )  # fmt: skip
    request = new_request("chatcmpl", prompt, params)
    [stream] = await start_all(serving, [request])
    base = {"id": request.request_id, "created": int(time.time()), "model": backend.model_name}
    choices = [_Choice(i, body, chat_format, tokenizer) for i in range(body.n)]

    def usage() -> dict:
        generated = sum(c.generated for c in choices)
        return {"prompt_tokens": len(prompt), "completion_tokens": generated,
                "total_tokens": len(prompt) + generated}  # fmt: skip

    if body.stream:
        return _events(stream, choices, {**base, "object": "chat.completion.chunk"},
                       body.stream_options is not None and body.stream_options.include_usage,
                       usage)  # fmt: skip
    async with contextlib.aclosing(stream):
        async for delta in stream:
            choices[delta.index].take(delta)
    answers = [
        {"index": choice.index, "message": choice.message(),
         "logprobs": {"content": choice.logprobs} if body.logprobs else None,
         "finish_reason": choice.reason}
        for choice in choices
    ]  # fmt: skip
    return {**base, "object": "chat.completion", "choices": answers, "usage": usage()}


async def _events(stream, choices: list[_Choice], base: dict, include_usage: bool, usage):
    def event(index: int, delta: dict, logprobs=None, finish_reason=None) -> str:
        choice = {"index": index, "delta": delta, "finish_reason": finish_reason,
                  "logprobs": None if logprobs is None else {"content": logprobs}}  # fmt: skip
        return f"data: {json.dumps({**base, 'choices': [choice]})}\n\n"

    for choice in choices:
        yield event(choice.index, {"role": "assistant", "content": ""})
    async with contextlib.aclosing(stream):  # closing the events ends the request
        async for delta in stream:
            choice = choices[delta.index]
            parts, logprobs = choice.take(delta)
            if logprobs and not parts:
                parts = [{"content": ""}]
            for number, part in enumerate(parts):
                yield event(choice.index, part, logprobs if number == 0 and logprobs else None)
            if delta.finish_reason is not None:
                yield event(choice.index, {}, finish_reason=choice.reason)
    if include_usage:
        yield f"data: {json.dumps({**base, 'choices': [], 'usage': usage()})}\n\n"
    yield "data: [DONE]\n\n"
