"""The agent loop on a real environment session and the real grader: what the trajectory
holds, how malformed calls and budgets end up, and the scripted demonstration path."""

from __future__ import annotations

from pathlib import Path

import pytest

from etude.common.payloads import RolloutRequest
from etude.common.run_config import RolloutConfig
from etude.common.toolcalls import ToolCall, render_tool_calls
from etude.environment.local import InProcessEnvironment
from etude.model.tokenizer import load_tokenizer
from etude.reward.config import RewardConfig
from etude.reward.grader import Grader
from etude.reward.types import Score
from etude.rollout.agent import EpisodeRunner, SampledTurn
from etude.rollout.prompt import IM_END
from etude.rollout.samplers import ScriptedSampler
from etude.rollout.scripted import ScriptedSolver
from etude.rollout.service import repositories_only
from etude.tasks.materialize import TASKS_FILE, materialize
from etude.tasks.task import read_jsonl
from tests.environment.conftest import make_manager
from tests.tasks.conftest import bwrap  # noqa: F401

pytestmark = pytest.mark.integration

TASK = next(read_jsonl(TASKS_FILE))
TOKENIZER = load_tokenizer()
REQUEST = RolloutRequest(
    run_id="r", task_id=TASK.id, group_id="g", sample_index=0, min_policy_version=0
)


class SessionGrader:
    """The reward service's grading, in process: the session's diff through the Grader."""

    def __init__(self, environment: InProcessEnvironment, grader: Grader) -> None:
        self.environment, self.grader = environment, grader

    async def score(self, task_id: str, *, session_id: str = "", patch: str = "") -> Score:
        assert task_id == TASK.id
        diff = (await self.environment.diff(session_id)).unified_diff
        return await self.grader.score(TASK, diff)


class TextTurns:
    """Turns written in advance, tokenized like a policy's (each closed by IM_END)."""

    def __init__(self, *texts: str) -> None:
        self.texts = list(texts)
        self.contexts: list[int] = []

    async def sample(self, context_ids, results, max_new_tokens) -> SampledTurn:
        self.contexts.append(len(context_ids))
        text = self.texts.pop(0)
        tokens = [*TOKENIZER.encode(text), TOKENIZER.convert_tokens_to_ids(IM_END)]
        return SampledTurn(tokens, [-0.5] * len(tokens), [7] * len(tokens), text)


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("tasks")


@pytest.fixture
async def runner(tmp_path, bwrap, cache):  # noqa: F811
    manager = make_manager(tmp_path)
    environment = InProcessEnvironment(manager)
    grader = Grader(RewardConfig(cache_dir=cache, tasks_files=(), timeout_seconds=60), bwrap)

    def make(**config) -> EpisodeRunner:
        return EpisodeRunner(
            environment, SessionGrader(environment, grader), TOKENIZER,
            RolloutConfig(**config), repositories_only(lambda task: materialize(task, cache)),
        )  # fmt: skip

    yield make
    await manager.close_all()


def call(name: str, **arguments: str) -> str:
    return render_tool_calls([ToolCall(name, arguments, "call_0")])


async def test_a_malformed_call_is_an_observation_and_the_mask_covers_only_sampled_tokens(runner):
    turns = TextTurns(
        "<tool_call>\n<function=read_file>\n</tool_call>",  # broken: the episode goes on
        call("list_dir", path="."),
        call("submit", message="done"),
    )
    trajectory = await runner(max_turns=5).run(REQUEST, TASK, turns)
    assert trajectory.finish_reason == "submitted"
    assert trajectory.turns == 3 and trajectory.calls_per_turn == [0, 1, 1]
    assert trajectory.tool_counts == {"list_dir": 1, "submit": 1}
    assert trajectory.reward == 0.0  # nothing fixed
    text = TOKENIZER.decode(trajectory.token_ids)
    assert "<tool_error" in text and "list_dir" in text
    sampled = [i for i, m in enumerate(trajectory.loss_mask) if m]
    assert {trajectory.policy_versions[i] for i in sampled} == {7}
    assert all(
        trajectory.policy_versions[i] == -1 for i, m in enumerate(trajectory.loss_mask) if not m
    )
    assert all(trajectory.logprobs[i] == 0.0 for i, m in enumerate(trajectory.loss_mask) if not m)
    # Every turn's tokens are in the episode as sampled, the observations between them.
    assert sum(trajectory.loss_mask) == sum(
        len(TOKENIZER.encode(t)) + 1
        for t in ("<tool_call>\n<function=read_file>\n</tool_call>", call("list_dir", path="."),
                  call("submit", message="done"))
    )  # fmt: skip
    assert len(turns.contexts) == 3 and turns.contexts == sorted(turns.contexts)


async def test_a_turn_without_a_call_ends_the_episode(runner):
    trajectory = await runner().run(REQUEST, TASK, TextTurns("I am done."))
    assert (trajectory.finish_reason, trajectory.turns, trajectory.reward) == (
        "no_tool_call",
        1,
        0.0,
    )


async def test_the_turn_and_token_budgets_end_the_episode(runner):
    looping = TextTurns(*[call("list_dir", path=".")] * 3)
    trajectory = await runner(max_turns=2).run(REQUEST, TASK, looping)
    assert (trajectory.finish_reason, trajectory.turns) == ("max_turns", 2)
    prompt_tokens = trajectory.loss_mask.index(1)
    tight = await runner(max_episode_tokens=prompt_tokens + 40).run(
        REQUEST, TASK, TextTurns(*[call("list_dir", path=".")] * 3)
    )
    assert tight.finish_reason == "max_tokens"
    assert len(tight.token_ids) <= prompt_tokens + 40


async def test_a_scripted_demonstration_solves_the_task_through_the_loop(runner):
    sampler = ScriptedSampler(ScriptedSolver(TASK), TOKENIZER)
    trajectory = await runner(max_episode_tokens=4096).run(REQUEST, TASK, sampler)
    assert (trajectory.finish_reason, trajectory.reward) == ("submitted", 1.0)
    assert trajectory.calls_per_turn[0] >= 2  # the opening batch of parallel reads
