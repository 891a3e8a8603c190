"""The agent loop: one episode of one task, turn by turn, into a scored trajectory.

    prompt → sample a turn → parse its tool calls → execute them as one batch in the task's
    session → append the results → … until submit, no tool call, max turns, the token budget
    or the wall clock → score the session → trajectory

Who writes the turns is a `TurnSampler`: the policy (through inference) for RL, a scripted
solver for SFT demonstrations. Either way the episode's tokens are exactly what the
trainer will see: the loop records token ids, not text, so nothing is re-tokenized.
A malformed call becomes a <tool_error> observation the policy can read (it loses the call,
not the episode); a dead service raises, and the rollout worker gives the entry back.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from etude.common.payloads import RolloutRequest, Trajectory
from etude.common.run_config import RolloutConfig
from etude.common.tool_text import cut_to
from etude.common.toolcalls import (
    ToolSpec,
    parse_tool_calls,
    render_parse_errors,
    render_tool_result,
    tools_by_name,
)
from etude.environment.client import EnvironmentClient
from etude.environment.types import ExecutedCall
from etude.reward.types import Score
from etude.rollout import metrics
from etude.rollout.prompt import IM_END, episode_start, observation, system_prompt
from etude.rollout.trajectory import TrajectoryBuilder
from etude.tasks.hints import at_tier
from etude.tasks.provisioning import PreparedTask
from etude.tasks.task import Task

# Below this many tokens of budget a turn cannot hold even one tool call.
log = logging.getLogger(__name__)

_MIN_TURN_TOKENS = 16


@dataclass(frozen=True, slots=True)
class SampledTurn:
    token_ids: list[int]
    logprobs: list[float]
    policy_versions: list[int]
    text: str
    """The turn as text, for the tool-call parser (special tokens left out)."""


class TurnSampler(Protocol):
    async def sample(
        self, context_ids: list[int], results: list[ExecutedCall] | None, max_new_tokens: int
    ) -> SampledTurn:
        """The next assistant turn given the episode so far (and, for samplers that react
        to them, the previous turn's results; None before the first turn)."""
        ...


class Scorer(Protocol):
    async def score(self, task_id: str, *, session_id: str = "", patch: str = "") -> Score: ...


TaskPreparation = Callable[[str, Task], Awaitable[PreparedTask]]
"""(run id, task) → what the task's session opens: its repository, and its Python environment
where the run wants one (etude.rollout.repositories)."""


class Tokenizer(Protocol):
    def encode(self, text: str) -> list[int]: ...
    def convert_tokens_to_ids(self, token: str) -> int: ...


class EpisodeRunner:
    def __init__(
        self,
        environment: EnvironmentClient,
        reward: Scorer,
        tokenizer: Tokenizer,
        config: RolloutConfig,
        prepare: TaskPreparation,
    ) -> None:
        self.environment = environment
        self.reward = reward
        self.tokenizer = tokenizer
        self.config = config
        self.prepare = prepare
        self.end_of_turn_id = tokenizer.convert_tokens_to_ids(IM_END)
        self._tools: dict[str, ToolSpec] = {}  # with the prompts, from the environment's tools
        self._full_prompt = self._short_prompt = ""

    @property
    def tools(self) -> dict[str, ToolSpec]:
        """The specs of the environment's tools, by name; empty until the first episode."""
        return self._tools

    async def _learn_tools(self) -> None:
        """The parser's specs and the system prompts, rendered once from the tools the
        environment reports, so the policy is told about exactly the tools that will run its
        calls. An unknown tool in `short_prompt_tools` fails the first episode."""
        catalog = await self.environment.list_tools()
        short = system_prompt(catalog, short=True, tools=self.config.short_prompt_tools)
        self._full_prompt, self._short_prompt = system_prompt(catalog), short
        self._tools = tools_by_name(tool.spec for tool in catalog.tools)

    async def run(self, request: RolloutRequest, task: Task, sampler: TurnSampler) -> Trajectory:
        if not self._tools:
            await self._learn_tools()
        task = at_tier(task, request.hint_tier)  # graded by id: the hints change no test
        system = self._short_prompt if request.hint_tier == 3 else self._full_prompt
        prepared = await self.prepare(request.run_id, task)
        environment = prepared.python_environment
        session = await self.environment.create_session(
            task.id, str(prepared.repository),
            python_environment=str(environment) if environment is not None else "",
        )  # fmt: skip
        builder = TrajectoryBuilder(request)
        builder.add_context(self.tokenizer.encode(episode_start(task.instruction, system)))
        try:
            try:
                reason = await asyncio.wait_for(
                    self._turns(session.session_id, builder, sampler),
                    timeout=self.config.wall_clock_seconds,
                )
            except TimeoutError:
                reason = "timeout"
            diff = await self._diff(session.session_id)
            score = await self.reward.score(task.id, session_id=session.session_id)
            builder.graded(diff, score)
        finally:
            await self.environment.close_session(session.session_id)
        config = self.config
        trajectory = builder.finish(
            score.reward, score.components, reason, config.turn_cost, config.malformed_cost
        )
        metrics.record_episode(trajectory)
        return trajectory

    async def _diff(self, session_id: str) -> str:
        """The workspace's diff for reading the trajectory later; an episode is not lost for
        want of it (the reward service takes the diff it grades itself)."""
        try:
            return (await self.environment.diff(session_id)).unified_diff
        except Exception as error:
            log.warning("no diff of session %s for its trajectory: %s", session_id, error)
            return ""

    async def _turns(
        self, session_id: str, builder: TrajectoryBuilder, sampler: TurnSampler
    ) -> str:
        config = self.config
        results: list[ExecutedCall] | None = None
        for _ in range(config.max_turns):
            budget = config.max_episode_tokens - len(builder.token_ids)
            if budget < _MIN_TURN_TOKENS:
                return "max_tokens"
            started = time.perf_counter()
            turn = await sampler.sample(
                builder.token_ids, results, min(config.max_new_tokens, budget)
            )
            metrics.GENERATE_SECONDS.observe(time.perf_counter() - started)
            builder.add_sampled(turn.token_ids, turn.logprobs, turn.policy_versions)
            parsed = parse_tool_calls(turn.text, tools=self._tools)
            if not parsed.calls and not parsed.errors:
                builder.end_turn([], time.perf_counter() - started)
                return "no_tool_call"
            results = (
                await self.environment.execute(session_id, parsed.calls) if parsed.calls else []
            )
            builder.end_turn([c.name for c in parsed.calls], time.perf_counter() - started)
            builder.behaviour.observe(parsed.calls, parsed.errors, results)
            metrics.record_tool_calls(results)
            if any(r.result.ends_episode for r in results):
                return "submitted"
            closed = bool(turn.token_ids) and turn.token_ids[-1] == self.end_of_turn_id
            text = self._observation_text(results, parsed.errors)
            observed = self.tokenizer.encode(observation(text, turn_closed=closed))
            if (
                len(builder.token_ids) + len(observed) + _MIN_TURN_TOKENS
                > config.max_episode_tokens
            ):
                return "max_tokens"
            builder.add_context(observed)
        return "max_turns"

    def _observation_text(self, results: list[ExecutedCall], errors) -> str:
        parts = [_shown(r, self.config.max_tool_output_chars) for r in results]
        parts.append(render_parse_errors(errors))
        return "\n".join(part for part in parts if part)


def _shown(executed: ExecutedCall, cap: int) -> str:
    """A result as the policy reads it, its output cut to `cap` characters."""
    result = executed.result
    truncated = result.truncated or len(result.output) > cap
    return render_tool_result(
        executed.call_id, executed.name, cut_to(result.output, cap), result.exit_code, truncated
    )
