"""Mutations rewrite only the mutated span: one- or two-line diffs, comments kept."""

from __future__ import annotations

import ast
import difflib

from etude.tasks.synth.mutations import find_mutations
from tests.tasks.conftest import SOURCE


def test_every_kind_is_found_and_every_mutant_parses():
    mutations = find_mutations("mathbits/core.py", SOURCE)
    kinds = {m.kind for m in mutations}
    assert kinds >= {
        "comparison_swap", "off_by_one", "negated_condition", "wrong_variable",
        "dropped_statement", "swapped_arguments",
    }  # fmt: skip
    for mutation in mutations:
        mutated = mutation.apply(SOURCE)
        ast.parse(mutated)
        changed = [
            line
            for line in difflib.unified_diff(SOURCE.splitlines(), mutated.splitlines(), n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))
        ]
        assert 1 <= len(changed) <= 2, (mutation, changed)
        assert "# Keep value inside [low, high]." in mutated


def test_comparison_swap_rewrites_the_operator_only():
    [swap] = [
        m
        for m in find_mutations("f.py", "def f(a, b):\n    return a < b  # why\n")
        if m.kind == "comparison_swap"
    ]
    assert swap.apply("def f(a, b):\n    return a < b  # why\n") == (
        "def f(a, b):\n    return a <= b  # why\n"
    )


def test_docstrings_and_annotations_are_left_alone():
    source = 'def f(x: int = 3) -> list[int]:\n    """Return 2 things."""\n    return [x, 2]\n'
    for mutation in find_mutations("f.py", source):
        mutated = mutation.apply(source)
        assert '"""Return 2 things."""' in mutated
        assert "-> list[int]" in mutated and "x: int" in mutated


def test_the_same_source_gives_the_same_mutations():
    assert find_mutations("a.py", SOURCE) == find_mutations("a.py", SOURCE)
