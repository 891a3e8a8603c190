"""Building a trajectory turn by turn: the episode's tokens in order, with what the trainer
needs aligned to each — the behaviour logprob and policy version of every token the policy
sampled, and a loss mask that is 1 exactly there (the prompt and tool results are context,
not actions) — plus how the episode went about it (etude.rollout.behaviour) and its reward,
less the turns' cost when the run makes efficiency part of it (`efficiency_reward`)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from etude.common.payloads import RolloutRequest, Trajectory
from etude.rollout.behaviour import EpisodeBehaviour

NOT_SAMPLED_VERSION = -1
REWARD_FLOOR = -1.0
"""The turn cost takes a reward down to this at most; a correctness already below it stays."""


def efficiency_reward(correctness: float, turns: int, turn_cost: float) -> tuple[float, float]:
    """(reward, deduction): the reward service's `correctness` less `turn_cost` per turn,
    floored at `REWARD_FLOOR` (or at `correctness` where that is lower already), so a long
    episode cannot run up an unbounded penalty; the deduction is what was actually taken."""
    if turn_cost < 0 or turns < 0:
        raise ValueError(f"turn_cost ({turn_cost}) and turns ({turns}) must not be negative")
    if not turn_cost:
        return correctness, 0.0
    reward = max(correctness - turn_cost * turns, min(correctness, REWARD_FLOOR))
    return reward, correctness - reward


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

    @property
    def sampled_tokens(self) -> int:
        return sum(self.loss_mask)

    def finish(
        self, reward: float, components: dict[str, float], reason: str, turn_cost: float = 0.0
    ) -> Trajectory:
        """The trajectory of an episode the reward service scored `reward` (its correctness);
        the trajectory's reward is `efficiency_reward(reward, turns, turn_cost)`, and its
        components keep both parts (`correctness`, and `turn_cost`, the deduction)."""
        r, b, turns = self.request, self.behaviour, len(self.calls_per_turn)
        correctness = reward
        reward, deduction = efficiency_reward(correctness, turns, turn_cost)
        components = {**components, "correctness": correctness, "turn_cost": deduction}
        return Trajectory(
            run_id=r.run_id, task_id=r.task_id, group_id=r.group_id,
            sample_index=r.sample_index, token_ids=self.token_ids, logprobs=self.logprobs,
            policy_versions=self.policy_versions, loss_mask=self.loss_mask, reward=reward,
            reward_components=components, turns=turns,
            calls_per_turn=self.calls_per_turn, tool_counts=dict(self.tool_counts),
            turn_seconds=self.turn_seconds, finish_reason=reason,
            valid_calls=b.valid_calls, malformed_calls=b.malformed_calls, edits=b.edits,
            blind_edits=b.blind_edits, reads_before_first_edit=b.reads_before_first_edit,
        )  # fmt: skip
