"""The rollout's plain types, what its clients may import: what the trainer reads back from it.

* a step's batch of GRPO groups, as the orchestrator hands it over (`WaitedBatch`,
  `StepBatch`, `Group`);
* how the policy behaved over a batch of trajectories (`behaviour_summary`, the keys a
  dashboard follows);
* a held-out evaluation (`Evaluation`);
* the scripted demonstrations SFT trains on (`Demonstrations`, with what each one is and
  how each hint tier fared).

Plain data over etude.common.payloads.Trajectory: importing this loads neither the agent
loop nor the queue.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from etude.common.payloads import Trajectory

# -- a step's batch ----------------------------------------------------------------------------


@dataclass(slots=True)
class Group:
    group_id: str
    size: int
    """Completions the trainer compares (G)."""
    trajectories: list[Trajectory] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return len(self.trajectories) >= self.size


@dataclass(frozen=True, slots=True)
class StepBatch:
    groups: list[Group]
    staleness: list[int]
    """Per trajectory with a token to train: trainer version − the oldest policy version
    among its trained tokens."""
    in_flight: list[int] = field(default_factory=list)
    """Per trajectory with a token to train: versions published while its trained tokens
    were sampled (newest − oldest)."""
    in_queue: list[int] = field(default_factory=list)
    """Per trajectory with a token to train: versions published after its last trained
    token, until it is trained."""
    stale_tokens: int = 0
    """Sampled tokens left out of the loss: older than the run's `max_staleness` allows."""


@dataclass(frozen=True, slots=True)
class WaitedBatch:
    batch: StepBatch
    entry_ids: list[str]
    waited_seconds: float
    """How long the trainer sat idle waiting for this batch."""


# -- how the policy behaved over a batch -------------------------------------------------------

PARALLEL_CALLS = 2
"""A turn with at least this many calls is a parallel batch."""
FINISH_REASONS = ("submitted", "no_tool_call", "max_turns", "max_tokens", "timeout")
"""Reported in every summary, 0 when absent, so each reason's series is continuous."""
FINISH_PREFIX = "finish_"
"""A summary's `finish_<reason>` keys are the shares of episodes by finish reason."""


def parallel_turns(calls_per_turn: Sequence[int]) -> int:
    return sum(n >= PARALLEL_CALLS for n in calls_per_turn)


def behaviour_summary(trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Behaviour over a batch of episodes (a step's, an evaluation's), from what each
    trajectory recorded (etude.rollout.behaviour.EpisodeBehaviour fed it turn by turn).

    Keys: `tool_calls_per_turn`, `parallel_share` (turns with a parallel batch / turns),
    `reads_before_first_edit` (mean over episodes that edited), `blind_edit_rate` (blind
    edits / edits), `turns_per_episode`, `generated_tokens_per_episode` (sampled tokens),
    `malformed_rate` (malformed / (valid + malformed) calls) and `finish_<reason>` (share of
    episodes). A ratio whose denominator is zero (no edit, no call) is left out rather
    than reported as 0; an empty batch gives {}.
    """
    if not trajectories:
        return {}
    episodes = len(trajectories)
    turns = [n for t in trajectories for n in t.calls_per_turn]
    edited = [
        t.reads_before_first_edit for t in trajectories if t.reads_before_first_edit is not None
    ]
    edits = sum(t.edits for t in trajectories)
    malformed = sum(t.malformed_calls for t in trajectories)
    attempted = malformed + sum(t.valid_calls for t in trajectories)
    summary = {
        "turns_per_episode": len(turns) / episodes,
        "generated_tokens_per_episode": sum(sum(t.loss_mask) for t in trajectories) / episodes,
    }
    if turns:
        summary["tool_calls_per_turn"] = sum(turns) / len(turns)
        summary["parallel_share"] = parallel_turns(turns) / len(turns)
    if edited:
        summary["reads_before_first_edit"] = sum(edited) / len(edited)
    if edits:
        summary["blind_edit_rate"] = sum(t.blind_edits for t in trajectories) / edits
    if attempted:
        summary["malformed_rate"] = malformed / attempted
    reasons = Counter(t.finish_reason for t in trajectories if t.finish_reason)
    for reason in (*FINISH_REASONS, *sorted(reasons.keys() - set(FINISH_REASONS))):
        summary[FINISH_PREFIX + reason] = reasons[reason] / episodes
    return summary


# -- a held-out evaluation ---------------------------------------------------------------------


EpisodeDone = Callable[[int, int, int], None]
"""Told after each episode of an evaluation: (episodes done, episodes in all, passed so far)."""


@dataclass(frozen=True, slots=True)
class Evaluation:
    pass_at_1: float
    """Passing episodes / episodes."""
    mean_reward: float
    rewards: dict[str, float]
    """Per task: mean reward over its episodes."""
    finish_reasons: dict[str, int]
    seconds: float
    behaviour: dict[str, float] = field(default_factory=dict)
    """`behaviour_summary` of the evaluation's episodes."""
    tier: int = 0
    episodes: int = 0
    passed: int = 0
    ci_low: float = 0.0
    """95% Wilson interval of pass@1."""
    ci_high: float = 0.0


# -- scripted demonstrations -------------------------------------------------------------------

DROP_REASONS = ("unscriptable", "unsolved", "over_budget", "dishonest", "failed")


@dataclass(frozen=True, slots=True)
class Demonstration:
    task_id: str
    tier: int
    variant: int
    style: str
    """The solver's style label (etude.rollout.scripted_styles.Style.label)."""
    trajectory: Trajectory


@dataclass(slots=True)
class TierCounts:
    """How one tier's demonstrations fared: `written` episodes (or attempts), of which
    `kept`; the others were `unscriptable` (no honest script for the task at that tier:
    no hints, no search that finds the location), `unsolved` (no submit or reward below 1),
    `over_budget` (out of turns or tokens), `dishonest` (the check on the shown tokens
    failed, which the solver's own checks should make impossible) or `failed` (the session
    or the grading raised)."""

    written: int = 0
    kept: int = 0
    unscriptable: int = 0
    unsolved: int = 0
    over_budget: int = 0
    dishonest: int = 0
    failed: int = 0
    turns: list[int] = field(default_factory=list)
    """Turns of each kept demonstration."""
    tokens: list[int] = field(default_factory=list)
    """Episode tokens of each kept demonstration."""


class Demonstrations(Sequence[Trajectory]):
    """The kept demonstrations, a sequence of their trajectories, with what each one is
    (`entries`) and how each tier fared (`counts`)."""

    def __init__(self, entries: list[Demonstration], counts: dict[int, TierCounts]) -> None:
        self.entries = entries
        self.counts = counts

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [e.trajectory for e in self.entries[index]]
        return self.entries[index].trajectory

    def __len__(self) -> int:
        return len(self.entries)

    def __iter__(self) -> Iterator[Trajectory]:
        return (e.trajectory for e in self.entries)

    def summary(self) -> dict[str, float]:
        """Flat numbers for a run's summary: per tier `sft_tier<k>_written`, `_kept`, the
        drop reasons, mean turns and tokens of the kept ones."""
        out: dict[str, float] = {"demonstrations": len(self.entries)}
        for tier, c in sorted(self.counts.items()):
            prefix = f"sft_tier{tier}_"
            for name in ("written", "kept", *DROP_REASONS):
                out[prefix + name] = getattr(c, name)
            if c.turns:
                out[prefix + "mean_turns"] = sum(c.turns) / len(c.turns)
                out[prefix + "mean_tokens"] = sum(c.tokens) / len(c.tokens)
        return out
