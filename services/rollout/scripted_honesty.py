"""The honesty check of a demonstration: does every argument follow from what the agent saw?

`derivable_violations(episode)` replays an episode turn by turn: each turn's calls are judged
against what the agent had been shown before that turn (etude.rollout.scripted_sight), then
the turn's results, as shown, are added. An episode is read back from the text of its
tokens (`episode_from_text`), so the check judges exactly what the policy was shown, not
what the solver believes it showed.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from etude.common.tool_text import cut_to
from etude.common.toolcalls import ToolCall, ToolSpec, parse_tool_calls
from etude.environment.types import ExecutedCall
from etude.rollout.prompt import IM_END, IM_START
from etude.rollout.scripted_patch import ScriptError
from etude.rollout.scripted_sight import Sight

if TYPE_CHECKING:
    from etude.rollout.scripted import ScriptedSolver

Execute = Callable[[list[ToolCall]], Awaitable[list[ExecutedCall]]]

_RESULT = re.compile(
    r'<tool_result id="([^"]*)" name="([^"]*)" exit_code="(-?[0-9]+)" truncated="[a-z]+">\n'
    r"(.*?)\n</tool_result>",
    re.S,
)
_ESCAPED_CLOSE = re.compile(r"<\\(\\*)(?=/tool_result>)")


@dataclass(frozen=True, slots=True)
class ShownResult:
    call_id: str
    name: str
    exit_code: int
    output: str
    """As the agent was shown it (cut to the loop's cap)."""


@dataclass(frozen=True, slots=True)
class Step:
    turn: str
    """The assistant turn as written: prose, then tool calls."""
    results: tuple[ShownResult, ...]


@dataclass(frozen=True, slots=True)
class Episode:
    instruction: str
    steps: tuple[Step, ...]


def derivable_violations(episode: Episode, tools: dict[str, ToolSpec]) -> list[str]:
    """Every argument (and every name in the prose) not justified by what the agent had seen
    when it wrote it, as `turn N: ...` lines; empty for an honest episode. `tools`: the
    environment's tool specs by name (`EpisodeRunner.tools`), which the calls are parsed with."""
    sight = Sight(episode.instruction)
    problems: list[str] = []
    for number, step in enumerate(episode.steps, 1):
        parsed = parse_tool_calls(step.turn, tools=tools)
        problems += [f"turn {number}: malformed call: {e.message}" for e in parsed.errors]
        prose = sight.unjustified_prose(parsed.text)
        if prose:
            problems.append(f"turn {number}: {prose}")
        for call in parsed.calls:
            problem = sight.unjustified(call)
            if problem:
                problems.append(f"turn {number}: {problem}")
        by_id = {call.id: call for call in parsed.calls}
        for result in step.results:
            call = by_id.get(result.call_id)
            if call is not None:
                sight.see(call, result.output, result.exit_code)
    return problems


def episode_from_text(text: str) -> Episode:
    """An episode from the text of its tokens: system, user (the instruction), then
    assistant turns and the user messages that hand back their results (ChatML)."""
    messages = []
    for chunk in text.split(IM_START)[1:]:
        role, _, body = chunk.partition("\n")
        messages.append((role, body.split(IM_END)[0]))
    if len(messages) < 2 or messages[1][0] != "user":
        raise ValueError("not an episode: no user message after the system prompt")
    instruction = messages[1][1]
    steps: list[Step] = []
    for role, body in messages[2:]:
        if role == "assistant":
            steps.append(Step(body, ()))
        elif role == "user" and steps:
            steps[-1] = Step(steps[-1].turn, tuple(_results(body)))
    return Episode(instruction, tuple(steps))


def _results(body: str) -> list[ShownResult]:
    return [
        ShownResult(m[1], m[2], int(m[3]), _ESCAPED_CLOSE.sub(r"<\1", m[4]))
        for m in _RESULT.finditer(body)
    ]


async def play(
    solver: ScriptedSolver,
    tools: dict[str, ToolSpec],
    execute: Execute | None = None,
    max_turns: int = 8,
):
    """Play `solver` to its submit as the agent loop would: parse each turn, run its calls as
    one batch with `execute` (an environment session), hand the results back. Without
    `execute` the solver's own in-process reading of the repository stands in for the
    environment. Returns the episode as the agent saw it."""
    steps: list[Step] = []
    results: list[ExecutedCall] | None = None
    while not solver.done:
        if len(steps) == max_turns:
            raise ScriptError(f"{solver.task.id}: no submit within {max_turns} turns")
        turn = solver.next_turn(results)
        parsed = parse_tool_calls(turn, tools=tools)
        if parsed.errors:
            raise ScriptError(f"{solver.task.id}: malformed turn: {parsed.errors[0].message}")
        if execute is None:
            results = [solver.simulate(call) for call in parsed.calls]
        else:
            results = await execute(parsed.calls)
        cap = solver.shown_chars
        steps.append(Step(turn, tuple(
            ShownResult(r.call_id, r.name, r.result.exit_code, cut_to(r.result.output, cap))
            for r in results
        )))  # fmt: skip
    return Episode(solver.instruction, tuple(steps))
