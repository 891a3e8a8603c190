"""The system prompts document their tools, their examples are batches the parser accepts, the
prompt rendered from the environment's ListTools over gRPC is the local one byte for byte, and
an episode at hint tier 3 opens with the short prompt and the function's source."""

from __future__ import annotations

import pytest

from etude.common.payloads import RolloutRequest
from etude.common.run_config import RolloutConfig
from etude.common.toolcalls import ToolCall, parse_tool_calls, render_tool_calls, tools_by_name
from etude.environment.local import InProcessEnvironment
from etude.environment.tools import TOOLS, tool_catalog, tool_specs
from etude.model.tokenizer import load_tokenizer
from etude.reward.config import RewardConfig
from etude.reward.grader import Grader
from etude.reward.types import Score
from etude.rollout.agent import EpisodeRunner, SampledTurn
from etude.rollout.prompt import (
    IM_END,
    IM_START,
    SHORT_TOOLS,
    episode_start,
    observation,
    system_prompt,
)
from etude.rollout.service import repositories_only
from etude.tasks.hints import instruction_at_tier, task_hints
from etude.tasks.materialize import TASKS_FILE, materialize
from etude.tasks.task import Task, read_jsonl
from tests.environment.conftest import make_manager, serving
from tests.tasks.conftest import bwrap  # noqa: F401

LOCAL = tool_catalog()
"""The tools as this process registers them; the agent asks the environment instead."""


def test_the_system_prompt_lists_every_tool_with_its_parameters():
    prompt = system_prompt(LOCAL)
    for tool in TOOLS.values():
        assert f"{tool.name}(" in prompt
        for parameter in tool.parameters:
            assert parameter in prompt


def test_the_example_in_the_prompt_parses_as_a_parallel_batch():
    prompt = system_prompt(LOCAL)
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


def test_the_short_prompt_documents_only_editing_and_submitting():
    short = system_prompt(LOCAL, short=True)
    assert "edit_file(path, old_string, new_string" in short and "submit(message)" in short
    others = [name for name in TOOLS if name not in SHORT_TOOLS]
    assert others and not any(f"{name}(" in short for name in others)
    example = short.split("# Calling tools\n\n")[1].split("\n\n# Rules")[0]
    turn = parse_tool_calls(example, tools=tools_by_name(tool_specs()))
    assert turn.ok and [c.name for c in turn.calls] == ["edit_file", "submit"]
    tokenizer = load_tokenizer()
    assert len(tokenizer.encode(short)) * 2 < len(tokenizer.encode(system_prompt(LOCAL)))


def test_a_run_can_document_more_tools_in_the_short_prompt_but_not_unknown_ones():
    searching = system_prompt(LOCAL, short=True, tools=("grep", "edit_file", "submit"))
    assert searching.index("grep(pattern, ") < searching.index("edit_file(path, ")
    assert "read_file(" not in searching
    with pytest.raises(ValueError, match="grepp"):
        system_prompt(LOCAL, short=True, tools=("grepp", "submit"))


async def test_the_prompt_from_the_environments_answer_is_the_local_one_byte_for_byte(
    tmp_path,
    bwrap,  # noqa: F811
):
    """SFT caches and trained policies depend on the exact prompt text: rendering it from
    what a real environment server returns over gRPC changes nothing."""
    manager = make_manager(tmp_path)
    try:
        async with serving(manager) as (client, _runtime):
            served = await client.list_tools()
    finally:
        await manager.close_all()
    assert served == LOCAL
    for short, tools in ((False, SHORT_TOOLS), (True, SHORT_TOOLS), (True, tuple(TOOLS))):
        assert system_prompt(served, short, tools) == system_prompt(LOCAL, short, tools)
    assert [tool.spec for tool in served.tools] == tool_specs()  # what the parser checks


class FixFromTheHints:
    """A turn that does what tier 3 asks: edit the shown lines as the gold patch does, submit.
    Records the context it was given."""

    def __init__(self, task: Task, tokenizer) -> None:
        removed = [line[1:] for line in task.gold_patch.splitlines()
                   if line.startswith("-") and not line.startswith("---")]  # fmt: skip
        added = [line[1:] for line in task.gold_patch.splitlines()
                 if line.startswith("+") and not line.startswith("+++")]  # fmt: skip
        self.text = render_tool_calls([
            ToolCall("edit_file", {"path": task_hints(task).path, "old_string": "\n".join(removed),
                                   "new_string": "\n".join(added)}, "call_0"),
            ToolCall("submit", {"message": "fixed"}, "call_1"),
        ])  # fmt: skip
        self.tokenizer = tokenizer
        self.contexts: list[list[int]] = []

    async def sample(self, context_ids, results, max_new_tokens) -> SampledTurn:
        self.contexts.append(list(context_ids))
        tokens = [*self.tokenizer.encode(self.text), self.tokenizer.convert_tokens_to_ids(IM_END)]
        return SampledTurn(tokens, [-0.1] * len(tokens), [1] * len(tokens), self.text)


class GradeById:
    """The reward service's part: the session's diff graded against the task the id names."""

    def __init__(self, environment: InProcessEnvironment, grader: Grader, tasks) -> None:
        self.environment, self.grader, self.tasks = environment, grader, {t.id: t for t in tasks}

    async def score(self, task_id: str, *, session_id: str = "", patch: str = "") -> Score:
        diff = (await self.environment.diff(session_id)).unified_diff
        return await self.grader.score(self.tasks[task_id], diff)


@pytest.mark.integration
async def test_a_tier_3_episode_opens_with_the_short_prompt_and_the_shown_code_fixes_it(
    tmp_path,
    bwrap,  # noqa: F811
):
    task = next(read_jsonl(TASKS_FILE))
    tokenizer = load_tokenizer()
    manager = make_manager(tmp_path)
    environment = InProcessEnvironment(manager)
    cache = tmp_path / "tasks"
    grader = Grader(RewardConfig(cache_dir=cache, tasks_files=(), timeout_seconds=60), bwrap)
    runner = EpisodeRunner(
        environment, GradeById(environment, grader, [task]), tokenizer,
        RolloutConfig(max_episode_tokens=8192), repositories_only(lambda t: materialize(t, cache)),
    )  # fmt: skip
    try:
        for tier, short in ((3, True), (0, False)):
            request = RolloutRequest(
                run_id="r", task_id=task.id, group_id="g", sample_index=0, min_policy_version=0,
                hint_tier=tier,
            )  # fmt: skip
            sampler = FixFromTheHints(task, tokenizer)
            trajectory = await runner.run(request, task, sampler)
            expected = episode_start(
                instruction_at_tier(task, tier), system_prompt(LOCAL, short=short)
            )
            assert sampler.contexts[0] == tokenizer.encode(expected)
            assert (trajectory.finish_reason, trajectory.reward) == ("submitted", 1.0)
    finally:
        await manager.close_all()
