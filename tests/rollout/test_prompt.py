"""The system prompt documents every tool, and its example is a batch the parser accepts."""

from __future__ import annotations

from etude.common.toolcalls import parse_tool_calls, tools_by_name
from etude.environment.tools import TOOLS, tool_specs
from etude.model.tokenizer import load_tokenizer
from etude.rollout.prompt import IM_END, IM_START, episode_start, observation, system_prompt


def test_the_system_prompt_lists_every_tool_with_its_parameters():
    prompt = system_prompt()
    for tool in TOOLS.values():
        assert f"{tool.name}(" in prompt
        for parameter in tool.parameters:
            assert parameter in prompt


def test_the_example_in_the_prompt_parses_as_a_parallel_batch():
    prompt = system_prompt()
    example = prompt.split("# Calling tools\n\n")[1].split("\n\n# Rules")[0]
    turn = parse_tool_calls(example, tools=tools_by_name(tool_specs()))
    assert turn.ok
    assert [c.name for c in turn.calls] == ["read_file", "grep"]


def test_turn_markers_are_single_tokens_and_turns_alternate():
    tokenizer = load_tokenizer()
    for marker in (IM_START, IM_END):
        assert len(tokenizer.encode(marker)) == 1
    start = episode_start("Fix the failing test.", system="S")
    assert start.endswith(f"{IM_START}assistant\n")
    after = observation("<tool_result>…</tool_result>")
    assert after.startswith(IM_END) and after.endswith(f"{IM_START}assistant\n")
