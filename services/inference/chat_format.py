"""A chat conversation as the policy reads it, and the policy's turn as a chat message.

The policy is trained on ChatML episodes written by the rollout (etude.rollout.prompt):
tools documented in the system prompt (etude.common.tool_prompt), calls written as XML
blocks and parsed by etude.common.toolcalls, results handed back in a user turn as
`<tool_result>` blocks, one per call, in call order. A chat client's conversation is
rendered the same way, so the policy serves in the format it learned:

* `tools` (JSON schemas) are documented after the client's system prompt, with an example
  call and the calling rules; `tool_choice: "none"` documents none and parses none;
* an assistant message's `tool_calls` are written back as the blocks the policy wrote;
* consecutive `tool` messages become one user turn of results, each block numbered as its
  call within the assistant message that made it (`call_0`, `call_1`...), as in training.

Each `<tool_call>` block of the policy's turn that reads as a call of a declared tool
becomes one of the message's `tool_calls` (arguments converted to the JSON types the tool's
schema declares); a block that does not (malformed, an undeclared tool, a required
parameter missing) stays in `content` as written, so the client loses nothing of what the
policy wrote. The same split serves a whole turn and a streamed one (`TurnStream`), here
and in vLLM's own chat server (etude.inference.vllm_tool_parser).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from etude.common.tool_prompt import describe_tool
from etude.common.toolcalls import (
    ToolCall,
    ToolSpec,
    parse_tool_calls,
    render_tool_call,
    render_tool_calls,
    render_tool_result,
    tools_by_name,
)
from etude.inference.openai_protocol import Message, OpenAIError, Tool
from etude.model.chat_template import IM_END, IM_START

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"

RULES = """\
- Write each call as a <tool_call> block, exactly as in the example.
- Several calls in one turn form a batch; write independent calls together.
- Results come back in the next message, one <tool_result> block per call, in call order.
- A turn with no tool call is your answer."""


@dataclass(frozen=True, slots=True)
class AssistantTurn:
    content: str | None
    tool_calls: list[dict]
    """OpenAI `tool_calls`: id, type, function {name, arguments (a JSON string)}."""


class ChatFormat:
    """The rendering and parsing of one request: its tools, and whether calls are parsed."""

    def __init__(self, tools: Sequence[Tool] | None, tool_choice: object = None) -> None:
        self.tools = [] if tool_choice == "none" else list(tools or [])
        names = [t.function.name for t in self.tools]
        if len(set(names)) != len(names):
            raise OpenAIError(400, "tool names must be unique", param="tools")
        self._specs = tools_by_name(
            ToolSpec(t.function.name, _required(t), _optional(t)) for t in self.tools
        )
        for tool in self.tools:  # a name the XML format cannot carry is refused up front
            try:
                render_tool_call(ToolCall(tool.function.name, {p: "" for p in _properties(tool)}))
            except ValueError as error:
                message = f"tool {tool.function.name!r}: {error}"
                raise OpenAIError(400, message, param="tools") from error

    # -- the conversation in -------------------------------------------------------------

    def prompt(self, messages: Sequence[Message]) -> str:
        """The conversation in ChatML, ending with the assistant's turn opened."""
        turns: list[tuple[str, str]] = []
        calls_by_id: dict[str, tuple[int, str]] = {}
        results: list[tuple[int, str]] = []
        for position, message in enumerate(messages):
            if message.role != "tool" and results:
                turns.append(("user", _results(results)))
                results = []
            text = _text(message, position)
            if message.role in ("system", "developer"):
                turns.append(("system", text))
            elif message.role == "user":
                turns.append(("user", text))
            elif message.role == "assistant":
                calls = message.tool_calls or []
                for index, call in enumerate(calls):
                    calls_by_id[call.id] = (index, call.function.name)
                blocks = render_tool_calls(_as_call(call, position) for call in calls)
                turns.append(("assistant", "\n".join(part for part in (text, blocks) if part)))
            else:
                made = calls_by_id.get(message.tool_call_id or "")
                if made is None:
                    raise OpenAIError(
                        400, f"messages[{position}]: tool_call_id {message.tool_call_id!r} "
                        "names no tool call of an earlier assistant message",
                        param=f"messages.{position}.tool_call_id",
                    )  # fmt: skip
                index, name = made
                results.append((index, render_tool_result(f"call_{index}", name, text)))
        if results:
            turns.append(("user", _results(results)))
        if self.tools:
            turns = self._with_tools(turns)
        rendered = "".join(f"{IM_START}{role}\n{text}{IM_END}\n" for role, text in turns)
        return f"{rendered}{IM_START}assistant\n"

    def _with_tools(self, turns: list[tuple[str, str]]) -> list[tuple[str, str]]:
        documented = "\n\n".join(
            describe_tool(t.function.name, _required(t), _optional(t), _description(t))
            for t in self.tools
        )
        section = (
            f"# Tools\n\n{documented}\n\n# Calling tools\n\n{self._example()}\n\n# Rules\n\n{RULES}"
        )
        if turns and turns[0][0] == "system":
            return [("system", f"{turns[0][1]}\n\n{section}"), *turns[1:]]
        return [("system", section), *turns]

    def _example(self) -> str:
        calls = [
            ToolCall(tool.function.name, {p: "..." for p in _required(tool)}, id=f"call_{i}")
            for i, tool in enumerate(self.tools[:2])
        ]
        return render_tool_calls(calls)

    # -- the policy's turn out -----------------------------------------------------------

    def turn(self, text: str) -> AssistantTurn:
        """A whole turn as a chat message: what `TurnStream` would have streamed."""
        stream = TurnStream(self)
        parts = stream.feed(text, final=True)
        content = "".join(p for p in parts if isinstance(p, str)).strip()
        return AssistantTurn(content or None, [p for p in parts if isinstance(p, dict)])

    def read_block(self, block: str) -> dict | None:
        """One `<tool_call>` block as an OpenAI tool call; None when it is malformed, names
        a tool the request did not declare, or misses a required parameter."""
        parsed = parse_tool_calls(block, tools=self._specs)
        if parsed.errors or len(parsed.calls) != 1:
            return None
        [call] = parsed.calls
        tool = next(t for t in self.tools if t.function.name == call.name)
        types = {name: _declared_types(schema) for name, schema in _properties(tool).items()}
        arguments = {
            key: _typed(value, types.get(key, frozenset())) for key, value in call.arguments.items()
        }
        return {
            "id": f"call_{uuid.uuid4().hex[:24]}",
            "type": "function",
            "function": {"name": call.name, "arguments": json.dumps(arguments, ensure_ascii=False)},
        }


class TurnStream:
    """A turn as it is generated, split into content (str) and tool calls (dict, each whole)
    as soon as each is certain: prose streams up to a `<tool_call>`; a block is read once
    its `</tool_call>` arrives, and a block that does not read as a call goes out as the
    content it was. Text that could still become a `<tool_call>` or the end-of-turn marker
    is held back, so a client never sees a fragment of either. With no tools, all is
    content."""

    def __init__(self, chat: ChatFormat) -> None:
        self.chat = chat
        self.text = ""
        self.sent = 0

    def feed(self, delta: str, final: bool = False) -> list[str | dict]:
        self.text += delta
        text = self.text.removesuffix(IM_END) if final else self.text
        parts: list[str | dict] = []
        while True:
            opened = text.find(CALL_OPEN, self.sent) if self.chat.tools else -1
            if opened < 0:
                markers = (CALL_OPEN, IM_END) if self.chat.tools else (IM_END,)
                end = len(text) if final else len(text) - _partial_marker(text, markers)
                parts.append(text[self.sent : end])
                self.sent = max(self.sent, end)
                break
            parts.append(text[self.sent : opened])
            self.sent = opened
            closed = text.find(CALL_CLOSE, opened)
            if closed < 0:
                if final:  # a block the turn never closed: content, as written
                    parts.append(text[opened:])
                    self.sent = len(text)
                break
            end = closed + len(CALL_CLOSE)
            call = self.chat.read_block(text[opened:end])
            parts.append(call if call is not None else text[opened:end])
            self.sent = end
        return [part for part in parts if part]


def _partial_marker(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest tail of `text` that begins one of `markers`."""
    longest = 0
    for marker in markers:
        for size in range(min(len(marker) - 1, len(text)), longest, -1):
            if marker.startswith(text[-size:]):
                longest = size
                break
    return longest


def _properties(tool: Tool) -> dict[str, dict]:
    properties = tool.function.parameters.get("properties") or {}
    return {name: schema if isinstance(schema, dict) else {} for name, schema in properties.items()}


def _required(tool: Tool) -> list[str]:
    required = set(tool.function.parameters.get("required") or ())  # a set: checked per name
    return [name for name in _properties(tool) if name in required]


def _optional(tool: Tool) -> list[str]:
    required = set(_required(tool))
    return [name for name in _properties(tool) if name not in required]


def _description(tool: Tool) -> str:
    """The tool's description, then a line for each parameter that has one of its own."""
    lines = [tool.function.description.strip()]
    for name, schema in _properties(tool).items():
        if schema.get("description"):
            lines.append(f"{name}: {schema['description']}")
    return "\n".join(line for line in lines if line)


def _declared_types(schema: dict) -> frozenset[str]:
    """The JSON types a parameter's schema allows, in each way schemas say it: `"type":
    "integer"`, `"type": ["integer", "null"]` (OpenAI's strict mode), `anyOf`/`oneOf` of
    typed schemas (Pydantic's optional fields). Empty: any (read as text)."""
    declared = schema.get("type")
    kinds = {declared} if isinstance(declared, str) else set()
    if isinstance(declared, list):
        kinds |= {kind for kind in declared if isinstance(kind, str)}
    for key in ("anyOf", "oneOf"):
        for member in schema.get(key) or []:
            if isinstance(member, dict):
                kinds |= _declared_types(member)
    return frozenset(kinds)


def _typed(value: str, kinds: frozenset[str]) -> object:
    """A parameter's raw text as a JSON value of a type its schema allows; the text itself
    when the schema allows text, declares no type, or the text reads as no allowed type
    (the client's tool then reports the bad value)."""
    if not kinds or "string" in kinds:
        return value
    try:
        parsed = json.loads(value)
    except ValueError:
        return value
    kind = _json_type(parsed)
    allowed = kind in kinds or (kind == "integer" and "number" in kinds)
    return parsed if allowed else value


def _json_type(value: object) -> str:
    if isinstance(value, bool):  # before int: True is an int to Python
        return "boolean"
    if isinstance(value, int):
        return "integer"
    kinds = {float: "number", str: "string", list: "array", dict: "object"}
    return kinds.get(type(value), "null")


def _as_call(call, position: int) -> ToolCall:
    try:
        arguments = json.loads(call.function.arguments or "{}")
    except ValueError:
        arguments = None
    if not isinstance(arguments, dict):
        raise OpenAIError(
            400, f"messages[{position}]: tool call {call.id!r} has arguments that are not "
            "a JSON object", param=f"messages.{position}.tool_calls",
        )  # fmt: skip
    values = {
        k: v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
        for k, v in arguments.items()
    }
    try:
        call = ToolCall(call.function.name, values, id=call.id)
        render_tool_call(call)
    except ValueError as error:
        raise OpenAIError(400, f"messages[{position}]: {error}",
                          param=f"messages.{position}.tool_calls") from error  # fmt: skip
    return call


def _text(message: Message, position: int) -> str:
    content = message.content
    if content is None or isinstance(content, str):
        return content or ""
    if any(part.type != "text" for part in content):
        raise OpenAIError(400, f"messages[{position}]: only text content is supported",
                          param=f"messages.{position}.content")  # fmt: skip
    return "".join(part.text or "" for part in content)


def _results(results: list[tuple[int, str]]) -> str:
    return "\n".join(block for _, block in sorted(results, key=lambda r: r[0]))
