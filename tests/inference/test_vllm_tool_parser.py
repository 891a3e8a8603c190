"""vLLM's own chat server reads the policy's calls through etude's plugin exactly as the
inference service's chat API does: the plugin registered under vLLM's tool-parser manager,
whole turns and streamed ones, on vLLM's request types."""

from __future__ import annotations

import pytest

from etude.common.toolcalls import ToolCall, render_tool_calls
from etude.inference.chat_format import IM_END, ChatFormat
from tests.inference.test_chat_format import READS, TOOLS

vllm_protocol = pytest.importorskip(
    "vllm.entrypoints.openai.chat_completion.protocol", reason="vLLM is not installed"
)


@pytest.fixture
def parser(tokenizer):
    from vllm.tool_parsers.abstract_tool_parser import ToolParserManager

    from etude.inference.vllm_tool_parser import PARSER_NAME

    return ToolParserManager.get_tool_parser(PARSER_NAME)(tokenizer)


def request():
    return vllm_protocol.ChatCompletionRequest(
        model="policy", messages=[{"role": "user", "content": "fix it"}],
        tools=[tool.model_dump(exclude_none=True) for tool in TOOLS],
    )  # fmt: skip


def test_a_whole_turn_reads_as_the_chat_api_reads_it(parser):
    text = "Reading.\n" + render_tool_calls([*READS, ToolCall("unknown_tool", {"x": "1"})])
    ours = ChatFormat(TOOLS).turn(text)
    theirs = parser.extract_tool_calls(text, request())
    assert theirs.tools_called and theirs.content == ours.content
    assert [c.function.model_dump() for c in theirs.tool_calls] == [
        c["function"] for c in ours.tool_calls
    ]
    plain = parser.extract_tool_calls("No call here.", request())
    assert not plain.tools_called and plain.content == "No call here."


def test_a_streamed_turn_gives_each_call_whole_and_flushes_at_the_turn_s_end(parser, tokenizer):
    text = "Reading.\n" + render_tool_calls(READS) + "\nDone <"
    end_of_turn = tokenizer.convert_tokens_to_ids(IM_END)
    content, calls, previous = "", [], ""
    for start in range(0, len(text), 3):
        delta = text[start : start + 3]
        last = start + 3 >= len(text)
        message = parser.extract_tool_calls_streaming(
            previous, previous + delta, delta, [], [], [end_of_turn] if last else [1], request()
        )
        previous += delta
        if message is not None:
            content += message.content or ""
            calls += message.tool_calls
    assert content == "Reading.\n\n\nDone <"
    assert [(c.index, c.function.name) for c in calls] == [(0, "read_file"), (1, "grep")]
    assert parser.get_remaining_unstreamed_args() == ""
