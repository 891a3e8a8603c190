"""`/v1/chat/completions`, plain or as server-sent events, over the policy's own format
(etude.inference.chat_format).

Streaming with tools: text streams as `content` until the policy opens a `<tool_call>`
block; from there the turn is held and, once it ends, sent as `tool_calls` (each call whole,
its arguments in one piece) or, when a call is malformed, as the content it was. Text that
could be the start of a `<tool_call>` or of the end-of-turn marker is held back until it
is known not to be, so a client never sees a fragment of either.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator

from etude.inference.chat_format import CALL_OPEN, IM_END, AssistantTurn, ChatFormat
from etude.inference.openai_generation import new_request, sampling_params, start_all, token_text
from etude.inference.openai_protocol import ChatCompletionRequest, unsupported
from etude.inference.serving import Serving
from etude.inference.types import CompletionDelta


class _Choice:
    def __init__(self, index: int, body: ChatCompletionRequest, chat: ChatFormat, tokenizer):
        self.index, self.body, self.chat, self.tokenizer = index, body, chat, tokenizer
        self.text = ""
        self.sent = 0  # characters of `text` streamed as content
        self.holding = False  # inside a tool-call block: nothing more streams until the end
        self.generated = 0
        self.logprobs: list[dict] = []
        self.finish_reason: str | None = None

    def take(self, delta: CompletionDelta) -> list[dict]:
        self.text += delta.text
        self.generated += len(delta.token_ids)
        new_logprobs = self._logprobs(delta)
        self.logprobs += new_logprobs
        if delta.finish_reason is not None:
            self.finish_reason = delta.finish_reason
        return new_logprobs

    def turn(self) -> AssistantTurn:
        turn = self.chat.turn(self.text)
        if turn.tool_calls and self.body.parallel_tool_calls is False:
            return AssistantTurn(turn.content, turn.tool_calls[:1])
        return turn

    def reason(self, turn: AssistantTurn) -> str | None:
        return "tool_calls" if turn.tool_calls else self.finish_reason

    # -- streaming -----------------------------------------------------------------------

    def streamable(self) -> str:
        """Content that may be sent now: up to a tool call's opening, short of a tail that
        could still become one (or the end-of-turn marker)."""
        if self.holding:
            return ""
        text = self.text.removesuffix(IM_END) if self.finish_reason else self.text
        end = len(text)
        if self.chat.tools:
            opened = text.find(CALL_OPEN, self.sent)
            if opened >= 0:
                self.holding, end = True, opened
        if not self.holding:
            end -= _partial_marker(text, (CALL_OPEN, IM_END) if self.chat.tools else (IM_END,))
        shown, self.sent = text[self.sent : end], max(self.sent, end)
        return shown

    def final_chunks(self) -> list[dict]:
        """What was held back, as content and/or tool calls, once the turn has ended."""
        turn = self.turn()
        rest = self.text.removesuffix(IM_END)[self.sent :]
        if not turn.tool_calls:
            return [{"content": rest}] if rest else []
        # The prose between and after the blocks (the part before them has streamed).
        trailing = self.chat.turn(rest).content if self.holding else None
        calls = [{"index": i, **call} for i, call in enumerate(turn.tool_calls)]
        chunks = [{"content": ("\n" if self.sent else "") + trailing}] if trailing else []
        return [*chunks, {"tool_calls": calls}]

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


def _partial_marker(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest tail of `text` that begins one of `markers`."""
    longest = 0
    for marker in markers:
        for size in range(min(len(marker) - 1, len(text)), longest, -1):
            if marker.startswith(text[-size:]):
                longest = size
                break
    return longest


async def chat(serving: Serving, body: ChatCompletionRequest) -> dict | AsyncIterator[str]:
    """The response body, or its server-sent events when `body.stream`."""
    refusal = unsupported(body)
    if refusal is not None:
        raise refusal
    backend = serving.backend
    tokenizer = backend.tokenizer
    chat_format = ChatFormat(body.tools, body.tool_choice)
    prompt = tokenizer.encode(chat_format.prompt(body.messages))
    turn_end = tokenizer.encode(IM_END)
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
    async for delta in stream:
        choices[delta.index].take(delta)
    answers = []
    for choice in choices:
        turn = choice.turn()
        message = {"role": "assistant", "content": turn.content}
        if turn.tool_calls:
            message["tool_calls"] = turn.tool_calls
        answers.append({
            "index": choice.index, "message": message,
            "logprobs": {"content": choice.logprobs} if body.logprobs else None,
            "finish_reason": choice.reason(turn),
        })  # fmt: skip
    return {**base, "object": "chat.completion", "choices": answers, "usage": usage()}


async def _events(stream, choices: list[_Choice], base: dict, include_usage: bool, usage):
    def event(index: int, delta: dict, logprobs=None, finish_reason=None) -> str:
        choice = {"index": index, "delta": delta, "finish_reason": finish_reason,
                  "logprobs": None if logprobs is None else {"content": logprobs}}  # fmt: skip
        return f"data: {json.dumps({**base, 'choices': [choice]})}\n\n"

    for choice in choices:
        yield event(choice.index, {"role": "assistant", "content": ""})
    async for delta in stream:
        choice = choices[delta.index]
        logprobs = choice.take(delta)
        shown = choice.streamable()
        if shown or logprobs:
            yield event(choice.index, {"content": shown},
                        logprobs if choice.body.logprobs else None)  # fmt: skip
        if delta.finish_reason is not None:
            for part in choice.final_chunks():
                yield event(choice.index, part)
            yield event(choice.index, {}, finish_reason=choice.reason(choice.turn()))
    if include_usage:
        yield f"data: {json.dumps({**base, 'choices': [], 'usage': usage()})}\n\n"
    yield "data: [DONE]\n\n"
