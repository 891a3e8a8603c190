"""A run's trajectories, kept where a person can read them: what the agent said, which tools
it called with what, what came back, the diff it left, the hidden tests' verdict and the
reward's parts. The trainer drops trajectories from Redis once it has read them; this is
their record.

Each RL step's trajectories (a `trajectories.keep` share of its groups, chosen by the
run's seed) go to `<run dir>/trajectories/step-<N>.jsonl.gz`, one JSON object per line. The
text comes from the tokens the trainer trained on: the episode is cut where the loss mask
changes, so each policy turn is exactly what was sampled, and each environment message
exactly what the policy was shown. Tool calls are parsed by the rollout's own parser
(etude.common.toolcalls), so the record shows the calls as the environment saw them.
"""

from __future__ import annotations

import gzip
import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from etude.common.payloads import Trajectory
from etude.common.toolcalls import parse_tool_calls

TRAJECTORIES_DIR = "trajectories"


def step_file(run_dir: Path, step: int) -> Path:
    return run_dir / TRAJECTORIES_DIR / f"step-{step:06d}.jsonl.gz"


def _spans(loss_mask: list[int]) -> Iterator[tuple[int, int, bool]]:
    """(start, stop, sampled) of each run of equal loss-mask values."""
    start = 0
    for i in range(1, len(loss_mask) + 1):
        if i == len(loss_mask) or loss_mask[i] != loss_mask[start]:
            yield start, i, bool(loss_mask[start])
            start = i


def readable(trajectory: Trajectory, tokenizer: Any, step: int) -> dict[str, Any]:
    """One trajectory as a JSON-ready record (module doc)."""
    t = trajectory
    messages: list[dict[str, Any]] = []
    for start, stop, sampled in _spans(t.loss_mask):
        text = tokenizer.decode(t.token_ids[start:stop])
        if not sampled:
            messages.append({"role": "prompt" if start == 0 else "environment", "text": text})
            continue
        parsed = parse_tool_calls(text)
        versions = t.policy_versions[start:stop]
        messages.append({
            "role": "policy", "text": text,
            "tool_calls": [{"id": c.id, "name": c.name, "arguments": c.arguments}
                           for c in parsed.calls],
            "parse_errors": [e.message for e in parsed.errors],
            "policy_versions": [min(versions), max(versions)],
        })  # fmt: skip
    sampled_versions = [v for v in t.policy_versions if v >= 0]
    return {
        "step": step, "task_id": t.task_id, "group_id": t.group_id,
        "sample_index": t.sample_index, "reward": t.reward,
        "reward_components": t.reward_components, "finish_reason": t.finish_reason,
        "turns": t.turns, "calls_per_turn": t.calls_per_turn, "turn_seconds": t.turn_seconds,
        "policy_versions": [min(sampled_versions, default=-1), max(sampled_versions, default=-1)],
        "tokens": len(t.token_ids), "sampled_tokens": sum(t.loss_mask),
        "diff": t.diff, "fail_to_pass": t.fail_to_pass,
        "pass_to_pass_broken": t.pass_to_pass_broken, "pass_to_pass_count": t.pass_to_pass_count,
        "grading_error": t.grading_error, "messages": messages,
    }  # fmt: skip


class TrajectoryLog:
    """Writes a run's trajectories (module doc); `keep` is the share of each step's groups."""

    def __init__(self, run_dir: Path, tokenizer: Any, keep: float, seed: int = 0) -> None:
        self.run_dir, self.tokenizer, self.keep, self.seed = run_dir, tokenizer, keep, seed

    def write(self, step: int, groups: list[list[Trajectory]]) -> Path | None:
        """The step's kept groups in one file (replaced whole: a resumed run rewrites the
        step it redoes); None when it keeps none."""
        if self.keep <= 0 or not groups:
            return None
        count = max(1, round(len(groups) * self.keep))
        drawn = random.Random(self.seed * 1_000_003 + step).sample(range(len(groups)), count)
        path = step_file(self.run_dir, step)
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(path.name + ".partial")
        with gzip.open(partial, "wt", encoding="utf-8") as out:
            for index in sorted(drawn):
                for trajectory in groups[index]:
                    record = readable(trajectory, self.tokenizer, step)
                    out.write(json.dumps(record) + "\n")
        partial.replace(path)
        return path


def read_trajectories(
    run_dir: Path, *, step: int | None = None, task: str | None = None,
    order: str = "", limit: int = 20,
) -> list[dict[str, Any]]:  # fmt: skip
    """Records from the run's files: one step's (or every step's), one task's (or all),
    `order` "worst" or "best" by reward (else as written), at most `limit`."""
    if step is None:  # every step's, in order (a file being written is `….partial`)
        files = sorted((run_dir / TRAJECTORIES_DIR).glob("step-*.jsonl.gz"))
    else:
        files = [path for path in [step_file(run_dir, step)] if path.is_file()]
    records = []
    for path in files:
        with gzip.open(path, "rt", encoding="utf-8") as lines:
            records += [r for r in map(json.loads, lines) if task is None or r["task_id"] == task]
    if order in ("worst", "best"):
        records.sort(key=lambda r: r["reward"], reverse=order == "best")
    elif order:
        raise ValueError(f"order {order!r}: worst, best or nothing")
    return records[:limit]
