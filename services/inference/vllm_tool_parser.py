"""The policy's tool-call format for vLLM's own OpenAI server (`vllm serve CHECKPOINT`), as
a tool-parser plugin: the same block-by-block split as the inference service's chat API
(etude.inference.chat_format.TurnStream), not a second parser.

    PLUGIN=$(python -c "import etude.inference.vllm_tool_parser as m; print(m.__file__)")
    vllm serve CHECKPOINT --enable-auto-tool-choice --tool-call-parser etude \\
        --tool-parser-plugin "$PLUGIN"

A checkpoint etude saves carries a chat template that documents `tools` and writes tool
calls and results as the rollout does (etude.model.chat_template), so vLLM's server renders
a conversation as the policy was trained on it and this parser reads its answers.

A streamed turn cut by `max_tokens` inside an unclosed block keeps that block's text back
(vLLM gives a parser no end-of-stream call); the whole-turn path returns it as content.
"""

from __future__ import annotations

from collections.abc import Sequence

from vllm.entrypoints.generate.base.protocol import (
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
    ExtractedToolCallInformation,
    FunctionCall,
    ToolCall,
)
from vllm.tool_parsers.abstract_tool_parser import ToolParser, ToolParserManager

from etude.inference.chat_format import IM_END, ChatFormat, TurnStream
from etude.inference.openai_protocol import Tool

PARSER_NAME = "etude"


def _chat_format(request) -> ChatFormat:
    tools = [
        Tool.model_validate(
            {
                "type": "function",
                "function": {
                    "name": tool.function.name,
                    "description": tool.function.description or "",
                    "parameters": tool.function.parameters or {},
                },
            }
        )
        for tool in request.tools or []
    ]
    return ChatFormat(tools, request.tool_choice)


@ToolParserManager.register_module(PARSER_NAME)
class EtudeToolParser(ToolParser):
    # Calls are XML blocks, never the JSON that vLLM's guided decoding writes for
    # tool_choice "required" or a named function: those are read like "auto".
    supports_required_and_named = False

    def __init__(self, tokenizer, tools=None) -> None:
        super().__init__(tokenizer, tools)
        self._stream: TurnStream | None = None
        # vLLM does not say which delta is a stream's last; a turn ends with one of these
        # (kept in the token ids, skipped in the text), and then what was held back goes.
        vocab = tokenizer.get_vocab()
        self._ends = {tokenizer.eos_token_id, vocab.get(IM_END)} - {None}

    def extract_tool_calls(self, model_output: str, request) -> ExtractedToolCallInformation:
        turn = _chat_format(request).turn(model_output)
        calls = [
            ToolCall(id=call["id"], type="function", function=FunctionCall(**call["function"]))
            for call in turn.tool_calls
        ]
        return ExtractedToolCallInformation(
            tools_called=bool(calls), tool_calls=calls, content=turn.content
        )

    def extract_tool_calls_streaming(
        self,
        previous_text: str,
        current_text: str,
        delta_text: str,
        previous_token_ids: Sequence[int],
        current_token_ids: Sequence[int],
        delta_token_ids: Sequence[int],
        request,
    ) -> DeltaMessage | None:
        if self._stream is None:
            self._stream = TurnStream(_chat_format(request))
        content, calls = "", []
        final = bool(delta_token_ids) and delta_token_ids[-1] in self._ends
        for part in self._stream.feed(delta_text, final=final):
            if isinstance(part, str):
                content += part
                continue
            index = len(self.prev_tool_call_arr)
            function = part["function"]
            # What vLLM's server checks at the end of a stream for arguments left unsent.
            self.prev_tool_call_arr.append({"name": function["name"],
                                            "arguments": function["arguments"]})  # fmt: skip
            self.streamed_args_for_tool.append(function["arguments"])
            self.current_tool_id = index
            calls.append(DeltaToolCall(
                index=index, id=part["id"], type="function",
                function=DeltaFunctionCall(**function).model_dump(exclude_none=True),
            ))  # fmt: skip
        if not content and not calls:
            return None
        return DeltaMessage(content=content or None, tool_calls=calls)
