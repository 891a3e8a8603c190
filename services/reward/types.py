"""The reward service's plain types, what its clients may import: a grading's outcome.

Kept apart from the grader so that a client (the rollout worker) does not load the grader
and the sandbox just to read a score."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Score:
    reward: float
    components: dict[str, float] = field(default_factory=dict)
    fail_to_pass: dict[str, bool] = field(default_factory=dict)
    pass_to_pass: dict[str, bool] = field(default_factory=dict)
    seconds: float = 0.0
    error: str = ""
    timed_out: bool = False

    @property
    def result(self) -> str:
        """A label for metrics: passed, failed, timeout or error."""
        if self.error:
            return "error"
        if self.timed_out:
            return "timeout"
        return "passed" if self.reward > 0 else "failed"
