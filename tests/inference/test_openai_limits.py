"""What a request may bring before it is rendered and tokenized (etude.inference.openai_limits),
through the HTTP API on loopback: the policy's context holds 256 tokens, so at the default
32 bytes per token a prompt may hold 8,192 bytes of text."""

from __future__ import annotations

import pytest

from etude.inference.openai_limits import PromptLimits, _exceeds
from etude.inference.openai_protocol import Message, OpenAIError, Tool

LIMIT = 256 * 32


def chat(content: str, tools: list[dict] | None = None) -> dict:
    body = {"messages": [{"role": "user", "content": content}], "max_tokens": 1}
    return body | ({"tools": tools} if tools else {})


def tool(name: str, parameters: int = 1, description: str = "") -> dict:
    properties = {f"p{i}": {"type": "string"} for i in range(parameters)}
    return {"type": "function", "function": {"name": name, "description": description,
            "parameters": {"type": "object", "properties": properties}}}  # fmt: skip


def assert_refused(reply, param: str, *words: str) -> None:
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param, error
    for word in words:
        assert word in error["message"], error["message"]


async def test_messages_and_tools_share_one_budget_in_bytes(http):
    half = "x" * (LIMIT // 2)
    # Each alone passes the measure (and is tokenized: then too long for this context);
    # the tool's description and the message together do not.
    reply = await http.post("/v1/chat/completions", json=chat(half))
    assert "context" in reply.json()["error"]["message"] and "bytes" not in reply.text
    reply = await http.post("/v1/chat/completions", json=chat(half, [tool("t", description=half)]))
    assert_refused(reply, "messages", f"{LIMIT:,} bytes", "256 tokens", "PROMPT_BYTES_PER_TOKEN")


async def test_text_is_measured_in_utf8_bytes_not_characters(http):
    # 5,000 characters of two bytes each: under the limit in characters, over it in bytes.
    reply = await http.post("/v1/chat/completions", json=chat("é" * 5000))
    assert_refused(reply, "messages", f"{LIMIT:,} bytes")


async def test_a_tool_with_too_many_parameters_is_refused_by_count(http):
    reply = await http.post("/v1/chat/completions", json=chat("hi", [tool("wide", 257)]))
    assert_refused(reply, "tools.0.function.parameters", "257 parameters", "at most 256")
    # 256 is allowed (its prompt may still be too long for the context: a later 400).
    reply = await http.post("/v1/chat/completions", json=chat("hi", [tool("wide", 256)]))
    assert "at most 256" not in reply.text


async def test_a_completion_prompt_over_the_budget_is_refused_before_tokenizing(http):
    reply = await http.post(
        "/v1/completions", json={"prompt": ["ok", "x" * (LIMIT + 1)], "max_tokens": 1}
    )
    assert_refused(reply, "prompt", f"{LIMIT:,} bytes")
    # Token ids are not text: their count is the engine's to check (the context).
    reply = await http.post("/v1/completions", json={"prompt": [5] * 300, "max_tokens": 1})
    assert reply.status_code == 400 and "context" in reply.json()["error"]["message"]
    # And the service goes on serving.
    assert (await http.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2})).is_success


def test_what_is_measured():
    assert _exceeds(["a" * 11], 10) and not _exceeds(["a" * 10], 10)
    assert _exceeds(["é" * 6], 10)  # bytes, not characters
    assert _exceeds([{"k" * 6: "v" * 5}], 10)  # keys count
    assert _exceeds([[0] * 11], 10) and not _exceeds([[None] * 11], 10)  # numbers: a byte
    assert _exceeds([["x" * 6, ["y" * 5]]], 10)  # however deep


def test_what_a_chat_request_counts():
    limits = PromptLimits(max_model_len=4, bytes_per_token=10, max_tool_parameters=2)
    calls = [{"id": "c", "function": {"name": "f", "arguments": "z" * 40}}]
    messages = [Message(role="assistant", content=None, tool_calls=calls)]
    with pytest.raises(OpenAIError, match="more than 40 bytes"):
        limits.check_chat(messages, None)  # the call's arguments count
    tools = [Tool.model_validate(tool("t", parameters=3))]
    with pytest.raises(OpenAIError, match="3 parameters"):
        limits.check_chat([Message(role="user", content="hi")], tools)
    limits.check_chat([Message(role="user", content="x" * 40)], None)  # the budget itself
