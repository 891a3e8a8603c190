"""A chat conversation renders exactly as the rollout writes an episode, and the policy's
turns come back as OpenAI tool calls through the rollout's own parser, streamed or not."""

from __future__ import annotations

import json

from etude.common.tool_prompt import describe_tool
from etude.common.toolcalls import ToolCall, render_tool_calls, render_tool_result
from etude.inference.chat_format import IM_END, ChatFormat
from etude.inference.openai_chat import _Choice
from etude.inference.openai_protocol import ChatCompletionRequest, Message, Tool
from etude.inference.types import CompletionDelta
from etude.rollout.prompt import episode_start, observation

TOOLS = [
    Tool.model_validate({"type": "function", "function": {
        "name": "read_file", "description": "Read a file.",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string"}, "start_line": {"type": "integer"},
        }, "required": ["path"]},
    }}),
    Tool.model_validate({"type": "function", "function": {
        "name": "grep", "description": "Search the repository.",
        "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}},
                       "required": ["pattern"]},
    }}),
]  # fmt: skip

READS = [
    ToolCall("read_file", {"path": "pkg/a.py"}, id="call_0"),
    ToolCall("grep", {"pattern": "def parse"}, id="call_1"),
]


def test_a_conversation_with_tool_calls_renders_as_a_rollout_episode():
    chat = ChatFormat(TOOLS)
    messages = [
        Message(role="system", content="You fix bugs."),
        Message(role="user", content="Fix the parser."),
        Message.model_validate(
            {
                "role": "assistant",
                "content": "Looking.",
                "tool_calls": [
                    {
                        "id": "a1",
                        "type": "function",
                        "function": {
                            "name": "read_file",
                            "arguments": json.dumps({"path": "pkg/a.py"}),
                        },
                    },
                    {
                        "id": "b2",
                        "type": "function",
                        "function": {
                            "name": "grep",
                            "arguments": json.dumps({"pattern": "def parse"}),
                        },
                    },
                ],
            }
        ),
        # Results in another order than the calls: the policy reads them in call order.
        Message(role="tool", tool_call_id="b2", content="pkg/a.py:3:def parse"),
        Message(role="tool", tool_call_id="a1", content="x = 1"),
    ]
    system = chat.prompt(messages).split(IM_END)[0].removeprefix("<|im_start|>system\n")
    assert system.startswith("You fix bugs.\n\n# Tools\n\n")
    assert describe_tool("read_file", ["path"], ["start_line"], "Read a file.") in system
    results = "\n".join([
        render_tool_result("call_0", "read_file", "x = 1"),
        render_tool_result("call_1", "grep", "pkg/a.py:3:def parse"),
    ])  # fmt: skip
    episode = (
        episode_start("Fix the parser.", system)
        + "Looking.\n" + render_tool_calls(READS)
        + observation(results)
    )  # fmt: skip
    assert chat.prompt(messages) == episode


def test_a_turn_with_calls_becomes_openai_tool_calls_typed_by_the_schema():
    chat = ChatFormat(TOOLS)
    calls = [ToolCall("read_file", {"path": "a.py", "start_line": "12"}), READS[1]]
    turn = chat.turn(f"I will read it.\n{render_tool_calls(calls)}{IM_END}")
    assert turn.content == "I will read it."
    assert [c["function"]["name"] for c in turn.tool_calls] == ["read_file", "grep"]
    assert json.loads(turn.tool_calls[0]["function"]["arguments"]) == {
        "path": "a.py", "start_line": 12,
    }  # fmt: skip
    assert len({c["id"] for c in turn.tool_calls}) == 2


def test_arguments_are_typed_by_every_form_of_a_schema_s_type():
    """`"type": [T, "null"]` (OpenAI's strict mode) and `anyOf` (Pydantic's optional fields)
    as well as a plain type; text the schema allows, or that reads as no allowed type, stays
    text."""
    properties = {
        "line": {"type": ["integer", "null"]},
        "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
        "ratio": {"type": "number"},
        "flag": {"type": "boolean"},
        "count": {"type": "integer"},
        "paths": {"type": "array", "items": {"type": "string"}},
        "name": {"type": ["string", "null"]},
        "anything": {},
    }
    tool = Tool.model_validate({"type": "function", "function": {
        "name": "probe", "parameters": {"type": "object", "properties": properties},
    }})  # fmt: skip
    written = {
        "line": "12", "limit": "null", "ratio": "3", "flag": "true", "count": "true",
        "paths": '["a.py", "b.py"]', "name": "42", "anything": "[1]",
    }  # fmt: skip
    turn = ChatFormat([tool]).turn(render_tool_calls([ToolCall("probe", written)]))
    [call] = turn.tool_calls
    assert json.loads(call["function"]["arguments"]) == {
        "line": 12, "limit": None, "ratio": 3, "flag": True,
        "count": "true",  # a boolean is no integer: left as written
        "paths": ["a.py", "b.py"], "name": "42", "anything": "[1]",
    }  # fmt: skip


def test_a_malformed_or_unknown_call_comes_back_whole_as_content():
    chat = ChatFormat(TOOLS)
    for text in (
        "<tool_call>\n<function=read_file>\n<parameter=path>\na.py\n</tool_call>",
        render_tool_calls([ToolCall("delete_everything", {"path": "/"})]),
    ):
        turn = chat.turn(text)
        assert turn.content == text and turn.tool_calls == []


def test_tool_choice_none_documents_and_parses_no_tool():
    chat = ChatFormat(TOOLS, "none")
    text = render_tool_calls(READS)
    assert "# Tools" not in chat.prompt([Message(role="user", content="hi")])
    assert chat.turn(text).content == text


def stream(text: str, pieces: int, **body) -> tuple[str, list[dict], str]:
    """Feed a turn to a streamed choice in `pieces`-character deltas; what the client sees."""
    request = ChatCompletionRequest(messages=[Message(role="user", content="x")], **body)
    choice = _Choice(0, request, ChatFormat(request.tools, request.tool_choice), tokenizer=None)
    content, calls = "", []
    for start in range(0, len(text), pieces):
        last = start + pieces >= len(text)
        parts, _ = choice.take(CompletionDelta(index=0, text=text[start : start + pieces],
                                               finish_reason="stop" if last else None))  # fmt: skip
        for part in parts:
            if not last or "tool_call" not in text:
                assert "<" not in part.get("content", ""), "a fragment of a tag reached the client"
            content += part.get("content", "")
            calls += part.get("tool_calls", [])
    return content, calls, choice.reason


def test_streamed_tool_calls_match_the_whole_turn_however_the_text_is_split():
    text = f"Reading both.\n{render_tool_calls(READS)}\nThen I decide.{IM_END}"
    whole = ChatFormat(TOOLS).turn(text)
    assert whole.content == "Reading both.\n\n\nThen I decide."  # the text between blocks kept
    for pieces in (1, 3, 7, len(text)):
        content, calls, reason = stream(text, pieces, tools=TOOLS)
        assert content.strip() == whole.content and reason == "tool_calls"
        assert [(c["index"], c["function"]) for c in calls] == [
            (i, c["function"]) for i, c in enumerate(whole.tool_calls)
        ]
    content, calls, reason = stream(f"No tools needed.{IM_END}", 2, tools=TOOLS)
    assert (content, calls, reason) == ("No tools needed.", [], "stop")
    broken = "Trying.\n<tool_call>\n<function=read_file>\n"
    content, calls, reason = stream(broken, 4, tools=TOOLS)
    assert (content, calls, reason) == (broken, [], "stop")
    content, calls, reason = stream(text, 5, tools=TOOLS, parallel_tool_calls=False)
    assert [c["function"]["name"] for c in calls] == ["read_file"] and reason == "tool_calls"


def test_a_malformed_block_beside_a_good_one_stays_content_and_the_good_one_is_called():
    bad = "<tool_call>\n<function=grep>\n</function>\n</tool_call>"  # pattern is required
    good = render_tool_calls(READS[:1])
    turn = ChatFormat(TOOLS).turn(f"{bad}\n{good}")
    assert turn.content == bad
    assert [c["function"]["name"] for c in turn.tool_calls] == ["read_file"]
