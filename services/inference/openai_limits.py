"""How much text a request may bring before it is rendered and tokenized.

Tokenizing costs time and memory in proportion to the text, and a prompt longer than the
context is refused after it anyway, so a request's text is measured first, in bytes, and
refused (400 naming the limit) when it cannot fit: a prompt of `max_model_len` tokens holds
at most `max_model_len × bytes_per_token` bytes for any `bytes_per_token` above what a token
holds on average (3–4 bytes of text or code). A chat request's messages and tools count
together, as they become one prompt; each text prompt of `/v1/completions` counts alone.
Measuring stops as soon as the budget is passed, so a 50 MB request costs no more to refuse
than one just over the limit. A tool's parameters are counted before anything walks them.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from etude.inference.openai_protocol import Message, OpenAIError, Tool


@dataclass(frozen=True, slots=True)
class PromptLimits:
    max_model_len: int
    bytes_per_token: int
    """The setting `ETUDE_INFERENCE__MAX_PROMPT_BYTES_PER_TOKEN`."""
    max_tool_parameters: int
    """The setting `ETUDE_INFERENCE__MAX_TOOL_PARAMETERS`."""

    @property
    def max_prompt_bytes(self) -> int:
        return self.max_model_len * self.bytes_per_token

    def _too_long(self, what: str, param: str) -> OpenAIError:
        return OpenAIError(
            400,
            f"{what} more than {self.max_prompt_bytes:,} bytes, more than a prompt of this "
            f"model's context ({self.max_model_len} tokens) can hold: at most "
            f"{self.bytes_per_token} bytes per token (ETUDE_INFERENCE__MAX_PROMPT_BYTES_PER_TOKEN)",
            param=param,
        )

    def check_chat(self, messages: list[Message], tools: list[Tool] | None) -> None:
        """OpenAIError when a tool declares too many parameters, or when the messages and
        tools together hold more text than the context could take."""
        for number, tool in enumerate(tools or ()):
            properties = tool.function.parameters.get("properties") or {}
            if len(properties) > self.max_tool_parameters:
                raise OpenAIError(
                    400,
                    f"tool {tool.function.name[:100]!r} declares {len(properties):,} parameters; "
                    f"a tool may declare at most {self.max_tool_parameters} "
                    "(ETUDE_INFERENCE__MAX_TOOL_PARAMETERS)",
                    param=f"tools.{number}.function.parameters",
                )
        texts = [*_message_texts(messages), *_tool_texts(tools or ())]
        if _exceeds(texts, self.max_prompt_bytes):
            raise self._too_long("the messages and tools hold", "messages")

    def check_prompt(self, prompt: str) -> None:
        if _exceeds([prompt], self.max_prompt_bytes):
            raise self._too_long("a prompt holds", "prompt")


def _message_texts(messages: list[Message]) -> Iterable[object]:
    """What of each message is rendered into the prompt."""
    for message in messages:
        yield message.content if isinstance(message.content, str) else None
        for part in message.content if isinstance(message.content, list) else ():
            yield part.text
        for call in message.tool_calls or ():
            yield call.function.name
            yield call.function.arguments
        yield message.tool_call_id


def _tool_texts(tools: Iterable[Tool]) -> Iterable[object]:
    for tool in tools:
        yield tool.function.name
        yield tool.function.description
        yield tool.function.parameters  # all of it: a legitimate schema is small


def _exceeds(values: Iterable[object], budget: int) -> bool:
    """Whether the strings in `values` (walked through lists and dicts, keys included) hold
    more than `budget` bytes of UTF-8; stops as soon as they do. Every other value but None
    counts a byte, so a huge structure of numbers is refused too."""
    stack = list(values)
    stack.reverse()
    total = 0
    while stack:
        value = stack.pop()
        if isinstance(value, str):
            # Characters first: a string longer in characters is over without encoding it.
            total += len(value) if len(value) > budget else len(value.encode("utf-8", "replace"))
        elif isinstance(value, dict):
            stack.extend(value.keys())
            stack.extend(value.values())
        elif isinstance(value, list | tuple):
            stack.extend(value)
        elif value is not None:  # a field not given is nothing
            total += 1
        if total > budget:
            return True
    return False
