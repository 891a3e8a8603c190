"""Building a trajectory turn by turn: the episode's tokens in order, with what the trainer
needs aligned to each — the behaviour logprob and policy version of every token the policy
sampled, and a loss mask that is 1 exactly there (the prompt and tool results are context,
not actions)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from etude.common.payloads import RolloutRequest, Trajectory

NOT_SAMPLED_VERSION = -1


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

    def finish(self, reward: float, components: dict[str, float], reason: str) -> Trajectory:
        r = self.request
        return Trajectory(
            run_id=r.run_id, task_id=r.task_id, group_id=r.group_id,
            sample_index=r.sample_index, token_ids=self.token_ids, logprobs=self.logprobs,
            policy_versions=self.policy_versions, loss_mask=self.loss_mask, reward=reward,
            reward_components=components, turns=len(self.calls_per_turn),
            calls_per_turn=self.calls_per_turn, tool_counts=dict(self.tool_counts),
            turn_seconds=self.turn_seconds, finish_reason=reason,
        )  # fmt: skip
