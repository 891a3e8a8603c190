"""Reward functions turn test outcomes into a number."""

from __future__ import annotations

import pytest

from etude.reward.functions import REWARD_FUNCTIONS, Outcome

FIXED = {"t::a": True, "t::b": True}
HALF = {"t::a": True, "t::b": False}
KEPT = {"t::c": True}
BROKEN = {"t::c": False}


@pytest.mark.parametrize(
    ("fail_to_pass", "pass_to_pass", "binary", "partial"),
    [
        (FIXED, KEPT, 1.0, 1.0),
        (HALF, KEPT, 0.0, 0.5),
        (FIXED, BROKEN, 0.0, 0.0),
        ({}, {}, 0.0, 1.0),
    ],
)
def test_binary_and_partial(fail_to_pass, pass_to_pass, binary, partial):
    outcome = Outcome(fail_to_pass, pass_to_pass, {})
    assert REWARD_FUNCTIONS["binary"](outcome) == binary
    assert REWARD_FUNCTIONS["partial"](outcome) == partial


def test_style_counts_ruff_findings_on_changed_lines_only():
    content = "import os\nimport sys\n\n\ndef f():\n    return 1\n"
    only_first = Outcome(FIXED, KEPT, {"m.py": (content, frozenset({1}))})
    both = Outcome(FIXED, KEPT, {"m.py": (content, frozenset({1, 2}))})
    untouched = Outcome(FIXED, KEPT, {"m.py": (content, frozenset({6}))})
    assert REWARD_FUNCTIONS["style"](only_first) == pytest.approx(0.9)
    assert REWARD_FUNCTIONS["style"](both) == pytest.approx(0.8)
    assert REWARD_FUNCTIONS["style"](untouched) == 1.0
    assert REWARD_FUNCTIONS["style"](Outcome(HALF, KEPT, {"m.py": (content, frozenset({1}))})) == 0
