"""Reward functions, chosen by name: how test outcomes become one number."""

from __future__ import annotations

import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True, slots=True)
class Outcome:
    fail_to_pass: dict[str, bool]
    pass_to_pass: dict[str, bool]
    changed_files: dict[str, tuple[str, frozenset[int]]]
    """Path → (new content, changed line numbers) of each Python file the patch changed."""

    @property
    def all_pass(self) -> bool:
        groups = (*self.fail_to_pass.values(), *self.pass_to_pass.values())
        return bool(groups) and all(groups)


RewardFunction = Callable[[Outcome], float]
REWARD_FUNCTIONS: dict[str, RewardFunction] = {}


def reward_function(name: str) -> Callable[[RewardFunction], RewardFunction]:
    def register(function: RewardFunction) -> RewardFunction:
        REWARD_FUNCTIONS[name] = function
        return function

    return register


@reward_function("binary")
def binary(outcome: Outcome) -> float:
    """1 when every FAIL_TO_PASS and PASS_TO_PASS test passes, else 0."""
    return 1.0 if outcome.all_pass else 0.0


@reward_function("partial")
def partial(outcome: Outcome) -> float:
    """The share of FAIL_TO_PASS tests fixed, but 0 if any PASS_TO_PASS test broke."""
    if not all(outcome.pass_to_pass.values()):
        return 0.0
    if not outcome.fail_to_pass:
        return 1.0
    return sum(outcome.fail_to_pass.values()) / len(outcome.fail_to_pass)


@reward_function("style")
def style(outcome: Outcome) -> float:
    """Binary, less 0.1 per ruff finding on a changed line (at most 0.5)."""
    base = binary(outcome)
    if base == 0.0 or not outcome.changed_files:
        return base
    return max(base - 0.5, base - 0.1 * ruff_findings(outcome.changed_files))


def ruff_findings(files: dict[str, tuple[str, frozenset[int]]]) -> int:
    """Ruff findings (pycodestyle, pyflakes) that fall on changed lines."""
    with tempfile.TemporaryDirectory() as scratch:
        for name, (content, _lines) in files.items():
            path = Path(scratch, name)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
        done = subprocess.run(
            [sys.executable, "-m", "ruff", "check", "--quiet", "--output-format", "concise",
             "--select", "E,F,W", "--no-cache", "."],
            capture_output=True, text=True, cwd=scratch,
        )  # fmt: skip
    count = 0
    for finding in done.stdout.splitlines():
        name, _, rest = finding.partition(":")
        line = rest.partition(":")[0]
        if name in files and line.isdigit() and int(line) in files[name][1]:
            count += 1
    return count
