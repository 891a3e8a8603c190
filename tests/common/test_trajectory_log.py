"""A run's trajectories as a person reads them: the episode cut into the prompt, the
policy's turns (with the tool calls the rollout's parser finds in them) and what the
environment answered; written per step, a share of the groups kept, read back by step,
task and reward."""

from __future__ import annotations

import gzip

import pytest

from etude.common.payloads import Trajectory
from etude.common.trajectory_log import TrajectoryLog, read_trajectories, readable, step_file
from etude.model.tokenizer import load_tokenizer
from etude.rollout.prompt import episode_start, observation

CALL = (
    "<tool_call>\n<function=read_file>\n<parameter=path>\nstats.py\n</parameter>\n"
    "</function>\n</tool_call>"
)
DIFF = "--- a/stats.py\n+++ b/stats.py\n@@ -1 +1 @@\n-return total / (n - 1)\n+return total / n\n"


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer()


def episode(tokenizer, task: str, reward: float, index: int = 0, group: str = "g") -> Trajectory:
    prompt = tokenizer.encode(episode_start("Fix the mean.", "You are a coding agent."))
    first = tokenizer.encode(f"Let me look.\n{CALL}")
    result = tokenizer.encode(observation("def mean(xs): ..."))
    second = tokenizer.encode("Done.")
    tokens = prompt + first + result + second
    mask = [0] * len(prompt) + [1] * len(first) + [0] * len(result) + [1] * len(second)
    versions = [-1 if m == 0 else 3 for m in mask]
    versions[-1] = 4  # the last token under a newer policy (a partial rollout)
    return Trajectory(
        run_id="r", task_id=task, group_id=group, sample_index=index, token_ids=tokens,
        logprobs=[0.0] * len(tokens), policy_versions=versions, loss_mask=mask,
        reward=reward, reward_components={"correctness": reward, "turn_cost": 0.0}, turns=2,
        calls_per_turn=[1, 0], finish_reason="no_tool_call", diff=DIFF,
        fail_to_pass={"tests/test_stats.py::test_mean": reward > 0},
        pass_to_pass_broken=[], pass_to_pass_count=4,
    )  # fmt: skip


def test_an_episode_reads_as_prompt_policy_turns_and_environment_answers(tokenizer):
    record = readable(episode(tokenizer, "stats-1", 1.0), tokenizer, step=2)
    roles = [m["role"] for m in record["messages"]]
    assert roles == ["prompt", "policy", "environment", "policy"]
    prompt, first, answer, second = record["messages"]
    assert "Fix the mean." in prompt["text"]
    assert first["text"] == f"Let me look.\n{CALL}"  # exactly what was sampled
    assert first["tool_calls"] == [
        {"id": "call_0", "name": "read_file", "arguments": {"path": "stats.py"}}
    ]
    assert first["parse_errors"] == [] and first["policy_versions"] == [3, 3]
    assert "def mean(xs): ..." in answer["text"]
    assert second["tool_calls"] == [] and second["policy_versions"] == [3, 4]
    assert (record["step"], record["policy_versions"], record["diff"]) == (2, [3, 4], DIFF)
    assert record["fail_to_pass"] == {"tests/test_stats.py::test_mean": True}


def test_steps_are_written_whole_and_read_back_by_step_task_and_reward(tmp_path, tokenizer):
    log = TrajectoryLog(tmp_path, tokenizer, keep=1.0)
    groups = [
        [episode(tokenizer, "a", 0.0, 0, "ga"), episode(tokenizer, "a", 1.0, 1, "ga")],
        [episode(tokenizer, "b", 0.5, 0, "gb"), episode(tokenizer, "b", 0.25, 1, "gb")],
    ]
    assert log.write(1, groups) == step_file(tmp_path, 1)
    log.write(2, groups[:1])
    with gzip.open(step_file(tmp_path, 1), "rt") as lines:
        assert len(lines.readlines()) == 4
    assert [r["reward"] for r in read_trajectories(tmp_path, order="worst", limit=3)] == [
        0.0, 0.0, 0.25,
    ]  # fmt: skip
    best = read_trajectories(tmp_path, order="best", step=1)
    assert [(r["task_id"], r["reward"]) for r in best] == [
        ("a", 1.0), ("b", 0.5), ("b", 0.25), ("a", 0.0),
    ]  # fmt: skip
    assert {r["step"] for r in read_trajectories(tmp_path, task="a")} == {1, 2}
    assert read_trajectories(tmp_path, task="nope") == []
    with pytest.raises(ValueError, match="worst, best"):
        read_trajectories(tmp_path, order="random")


def test_a_share_of_the_groups_is_kept_whole_and_none_with_keep_0(tmp_path, tokenizer):
    groups = [[episode(tokenizer, f"t{i}", 0.0, j, f"g{i}") for j in range(2)] for i in range(8)]
    TrajectoryLog(tmp_path, tokenizer, keep=0.25).write(1, groups)
    kept = read_trajectories(tmp_path, limit=100)
    by_group = {r["group_id"] for r in kept}
    assert len(by_group) == 2 and len(kept) == 4  # two groups, each whole
    assert TrajectoryLog(tmp_path / "off", tokenizer, keep=0.0).write(1, groups) is None
    assert read_trajectories(tmp_path / "off") == []
