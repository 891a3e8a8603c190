"""The task format, and SWE-bench-style JSONL in and out.

A task is a repository at a commit, an instruction (the "issue"), hidden tests the agent
never sees (a test patch, applied only when grading), the command that runs them, and the
test ids that must pass: FAIL_TO_PASS (fail before the fix, pass after) and PASS_TO_PASS
(pass before and after). Records load from SWE-bench / SWE-Gym / SWE-smith / R2E-Gym
exports unchanged, given a directory of repository checkouts.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

DEFAULT_TEST_COMMAND = "python -m pytest -q -p no:cacheprovider"

# Keys of a SWE-bench record this module maps to Task fields; every other key is kept
# in `extra` and written back unchanged.
_SWE_KEYS = {
    "instance_id", "repo", "base_commit", "problem_statement", "test_patch", "patch",
    "FAIL_TO_PASS", "PASS_TO_PASS", "test_cmd", "test_command", "metadata",
}  # fmt: skip


@dataclass(frozen=True, slots=True)
class Task:
    id: str
    repo: str
    """Where the repository comes from: `owner/name` (looked up in a checkouts directory),
    a directory, or `etude-mini/<project>` for the bundled suite."""
    base_commit: str
    instruction: str
    test_patch: str
    """A unified diff that adds the hidden tests; applied only when grading."""
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    test_command: str = DEFAULT_TEST_COMMAND
    gold_patch: str = ""
    """A fix known to work (SWE-bench's `patch`); empty when none is known."""
    metadata: dict[str, Any] = field(default_factory=dict)
    """source, project, difficulty, split, and for synthesized tasks the bug as a patch."""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def split(self) -> str:
        return str(self.metadata.get("split", "train"))

    def to_swe(self) -> dict[str, Any]:
        record = {
            **self.extra,
            "instance_id": self.id,
            "repo": self.repo,
            "base_commit": self.base_commit,
            "problem_statement": self.instruction,
            "test_patch": self.test_patch,
            "patch": self.gold_patch,
            "FAIL_TO_PASS": list(self.fail_to_pass),
            "PASS_TO_PASS": list(self.pass_to_pass),
            "test_cmd": self.test_command,
            "metadata": self.metadata,
        }
        return record

    @classmethod
    def from_swe(cls, record: dict[str, Any]) -> Task:
        missing = {"instance_id", "repo", "base_commit", "problem_statement"} - record.keys()
        if missing:
            raise ValueError(f"task record lacks {sorted(missing)}")
        return cls(
            id=record["instance_id"],
            repo=record["repo"],
            base_commit=record["base_commit"],
            instruction=record["problem_statement"],
            test_patch=record.get("test_patch", "") or "",
            fail_to_pass=_test_ids(record.get("FAIL_TO_PASS")),
            pass_to_pass=_test_ids(record.get("PASS_TO_PASS")),
            test_command=(
                record.get("test_cmd") or record.get("test_command") or DEFAULT_TEST_COMMAND
            ),
            gold_patch=record.get("patch", "") or "",
            metadata=dict(record.get("metadata") or {}),
            extra={k: v for k, v in record.items() if k not in _SWE_KEYS},
        )


def _test_ids(value: Any) -> tuple[str, ...]:
    """SWE-bench stores the lists as JSON text; later exports store them as lists."""
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        value = json.loads(value)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"test ids must be a list of strings, got {value!r}")
    return tuple(value)


def read_jsonl(path: Path) -> Iterator[Task]:
    with path.open() as lines:
        for number, line in enumerate(lines, 1):
            if line.strip():
                try:
                    yield Task.from_swe(json.loads(line))
                except (ValueError, KeyError) as error:
                    raise ValueError(f"{path}:{number}: {error}") from error


def write_jsonl(path: Path, tasks: Iterable[Task]) -> int:
    count = 0
    with path.open("w") as out:
        for task in tasks:
            out.write(json.dumps(task.to_swe(), sort_keys=True) + "\n")
            count += 1
    return count


def as_dict(task: Task) -> dict[str, Any]:
    return asdict(task)
