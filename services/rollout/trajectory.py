"""Building a trajectory turn by turn: the episode's tokens in order, with what the trainer
needs aligned to each — the behaviour logprob and policy version of every token the policy
sampled, and a loss mask that is 1 exactly there (the prompt and tool results are context,
not actions) — plus how the episode went about it (etude.rollout.behaviour) and its reward,
less the costs the run deducts for turns and malformed calls (`shaped_reward`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from etude.common.payloads import MAX_DIFF_CHARS, RolloutRequest, Trajectory
from etude.reward.types import Score
from etude.rollout.behaviour import EpisodeBehaviour

NOT_SAMPLED_VERSION = -1
REWARD_FLOOR = -1.0
"""The costs take a reward down to this at most; a correctness already below it stays."""


def shaped_reward(correctness: float, costs: dict[str, float]) -> tuple[float, dict[str, float]]:
    """(reward, deductions): the reward service's `correctness` less every cost (e.g.
    `turn_cost` × turns, `malformed_cost` × malformed calls), floored at `REWARD_FLOOR` (or
    at `correctness` where that is lower already), so a long or garbled episode cannot run
    up an unbounded penalty. The deductions are what was actually taken: where the floor
    bounds the total, each cost is scaled down by the same factor."""
    if any(cost < 0 for cost in costs.values()):
        raise ValueError(f"costs must not be negative: {costs}")
    total = sum(costs.values())
    if not total:
        return correctness, {name: 0.0 for name in costs}
    reward = max(correctness - total, min(correctness, REWARD_FLOOR))
    taken = (correctness - reward) / total
    return reward, {name: cost * taken for name, cost in costs.items()}


@dataclass(slots=True)
class TrajectoryBuilder:
    request: RolloutRequest
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    policy_versions: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    calls_per_turn: list[int] = field(default_factory=list)
    turn_seconds: list[float] = field(default_factory=list)
    tool_counts: Counter = field(default_factory=Counter)
    behaviour: EpisodeBehaviour = field(default_factory=EpisodeBehaviour)
    outcome: dict = field(default_factory=dict)
    """What was graded and how, for reading the trajectory (`graded`)."""

    def add_context(self, token_ids: list[int]) -> None:
        """Tokens the policy did not choose: the prompt, tool results, turn markers."""
        self.token_ids += token_ids
        self.logprobs += [0.0] * len(token_ids)
        self.policy_versions += [NOT_SAMPLED_VERSION] * len(token_ids)
        self.loss_mask += [0] * len(token_ids)

    def add_sampled(self, token_ids: list[int], logprobs: list[float], versions: list[int]):
        """Tokens the policy sampled, with their behaviour logprobs and versions."""
        if not len(token_ids) == len(logprobs) == len(versions):
            raise ValueError("tokens, logprobs and versions must have the same length")
        self.token_ids += token_ids
        self.logprobs += logprobs
        self.policy_versions += versions
        self.loss_mask += [1] * len(token_ids)

    def end_turn(self, tool_names: list[str], seconds: float) -> None:
        self.calls_per_turn.append(len(tool_names))
        self.tool_counts.update(tool_names)
        self.turn_seconds.append(seconds)

    def graded(self, diff: str, score: Score) -> None:
        """The diff the episode left and the hidden tests' verdict on it."""
        cut = diff if len(diff) <= MAX_DIFF_CHARS else diff[:MAX_DIFF_CHARS] + "\n[diff cut]\n"
        self.outcome = {
            "diff": cut, "fail_to_pass": dict(score.fail_to_pass),
            "pass_to_pass_broken": sorted(t for t, ok in score.pass_to_pass.items() if not ok),
            "pass_to_pass_count": len(score.pass_to_pass), "grading_error": score.error,
        }  # fmt: skip

    @property
    def sampled_tokens(self) -> int:
        return sum(self.loss_mask)

    def finish(
        self,
        reward: float,
        components: dict[str, float],
        reason: str,
        turn_cost: float = 0.0,
        malformed_cost: float = 0.0,
    ) -> Trajectory:
        """The trajectory of an episode the reward service scored `reward` (its correctness);
        the trajectory's reward is that less `turn_cost` per turn and `malformed_cost` per
        malformed call (`shaped_reward`), and its components keep every part
        (`correctness`, and the deductions `turn_cost` and `malformed_cost`)."""
        r, b, turns = self.request, self.behaviour, len(self.calls_per_turn)
        correctness = reward
        reward, deductions = shaped_reward(
            correctness,
            {"turn_cost": turn_cost * turns, "malformed_cost": malformed_cost * b.malformed_calls},
        )
        components = {**components, "correctness": correctness, **deductions}
        return Trajectory(
            run_id=r.run_id, task_id=r.task_id, group_id=r.group_id,
            sample_index=r.sample_index, token_ids=self.token_ids, logprobs=self.logprobs,
            policy_versions=self.policy_versions, loss_mask=self.loss_mask, reward=reward,
            reward_components=components, turns=turns,
            calls_per_turn=self.calls_per_turn, tool_counts=dict(self.tool_counts),
            turn_seconds=self.turn_seconds, finish_reason=reason,
            valid_calls=b.valid_calls, malformed_calls=b.malformed_calls, edits=b.edits,
            blind_edits=b.blind_edits, reads_before_first_edit=b.reads_before_first_edit,
            **self.outcome,
        )  # fmt: skip
