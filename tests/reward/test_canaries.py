"""Canaries made from the hidden tests: where a test can be changed, the copies a group
gets, how they are planted among the real tests, and how a run's outcomes are judged."""

from __future__ import annotations

import ast
import random
from collections import Counter
from pathlib import Path

import pytest

from etude.reward.canaries import Canary, Planting, plant
from etude.reward.canary_sites import copies, module_aliases, sites
from etude.reward.class_index import ClassIndex
from etude.tasks import testrun


def only_function(source: str) -> tuple[ast.FunctionDef, dict[str, str]]:
    tree = ast.parse(source)
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    return function, module_aliases(tree)


def best_site(source: str):
    function, aliases = only_function(source)
    found = sites(function, aliases)
    return function, (found[0] if found else None)


SITES = {
    "a literal on the right": ("def test_a():\n    assert f(2) == 4\n", "value"),
    "a literal on the left": ("def test_a():\n    assert 'x' == f()\n", "value"),
    "a name bound to a literal": (
        "def test_a():\n    expected = [1, 2]\n    assert f() == expected\n", "value",
    ),
    "unittest's assertEqual": (
        "def test_a(self):\n    self.assertEqual(f(), 3)\n", "value",
    ),
    "a parametrize column": (
        "@pytest.mark.parametrize('x, out', [(1, 2), (2, 4), (3, 6)])\n"
        "def test_a(x, out):\n    assert f(x) == out\n",
        "column",
    ),
    "pytest.raises": ("def test_a():\n    with pytest.raises(KeyError):\n        f()\n", "raises"),
    "a bare assertion": ("def test_a():\n    assert f() is None\n", "identity"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(SITES))
def test_each_kind_of_site_is_found(name):
    source, kind = SITES[name]
    _function, site = best_site(source)
    assert site is not None and site.kind == kind


@pytest.mark.parametrize(
    "source",
    [
        # The literal would also change what f is called with.
        "def test_a():\n    expected = 3\n    g(expected)\n    assert f() == expected\n",
        # Something before the assertion may return: the copy could pass for a right program.
        "def test_a():\n    if cond():\n        return\n    assert f() == 3\n",
        # A generator is no plain test.
        "def test_a():\n    yield 1\n    assert f() == 3\n",
        # An exception pytest does not report as a failure.
        "def test_a():\n    with pytest.raises(SystemExit):\n        f()\n",
        # An exception class chosen per case: which one the copy must fail with is unknown.
        "def test_a(error):\n    with pytest.raises(error):\n        f()\n",
    ],
)
def test_no_site_where_a_copy_could_fail_elsewhere_or_pass_for_a_right_program(source):
    function, aliases = only_function(source)
    assert [s for s in sites(function, aliases) if s.kind != "identity"] == []


def test_a_site_after_a_nested_function_is_still_found():
    source = "def test_a():\n    def helper():\n        return 1\n\n    assert f(helper) == 2\n"
    _function, site = best_site(source)
    assert site is not None and site.kind == "value"


def test_exception_names_resolve_through_the_module_aliases():
    source = (
        "from pkg.errors import ParseError as PE\n\n\n"
        "def test_a():\n    with pytest.raises(PE):\n        f()\n"
    )
    _function, site = best_site(source)
    assert site.reasons == ("ParseError",)


def literal_values(function: ast.FunctionDef, site) -> list:
    (path,) = site.literals
    node = function
    for field, index in path:
        node = getattr(node, field)
        node = node[index] if index is not None else node
    return ast.literal_eval(node)


def test_value_copies_differ_from_the_original_and_from_each_other():
    function, site = best_site("def test_a():\n    assert f() == 10\n")
    made = copies(function, site, 7, random.Random(1))
    values = [literal_values(c, site) for c in made]
    assert len(values) == 7 and len(set(values)) == 7 and 10 not in values
    assert all(isinstance(v, int) for v in values)


def test_the_real_value_is_not_told_by_its_rank_among_the_group():
    """A window around the real value, at a random place: the real value is the smallest
    of its group about as often as any other member is."""
    function, site = best_site("def test_a():\n    assert f() == 10\n")
    ranks = Counter()
    for seed in range(400):
        group = [
            10,
            *(literal_values(c, site) for c in copies(function, site, 3, random.Random(seed))),
        ]
        ranks[sorted(group).index(10)] += 1
    assert set(ranks) == {0, 1, 2, 3}
    assert all(60 <= count <= 140 for count in ranks.values()), ranks


def test_text_copies_change_one_place_for_the_whole_group():
    function, site = best_site("def test_a():\n    assert f() == 'tests/answer.py'\n")
    made = [literal_values(c, site) for c in copies(function, site, 5, random.Random(3))]
    changed = {
        i
        for value in made
        for i, (a, b) in enumerate(zip(value, "tests/answer.py", strict=True))
        if a != b
    }
    assert len(changed) == 1 and len(set(made)) == 5


def test_column_copies_rotate_the_expected_values_so_every_row_changes():
    source = (
        "@pytest.mark.parametrize('x, out', [(1, 'one'), (2, 'two'), (3, 'three'), (4, 'four')])\n"
        "def test_a(x, out):\n    assert name(x) == out\n"
    )
    function, site = best_site(source)
    made = copies(function, site, 3, random.Random(0))
    assert len(made) == 3
    real = [row.elts[1].value for row in function.decorator_list[0].args[1].elts]
    groups = [real]
    for copy in made:
        column = [row.elts[1].value for row in copy.decorator_list[0].args[1].elts]
        assert sorted(column) == sorted(real)  # values every real test expects
        assert all(a != b for a, b in zip(column, real, strict=True))  # every row changed
        groups.append(column)
    for row in range(4):  # no value repeats within a row: no majority marks the original
        assert len({g[row] for g in groups}) == 4


def test_a_column_with_repeated_values_uses_only_rotations_that_change_every_row():
    source = (
        "@pytest.mark.parametrize('x, out', [(1, 2), (2, 2), (3, 5)])\n"
        "def test_a(x, out):\n    assert f(x) == out\n"
    )
    _function, site = best_site(source)
    assert site is None or site.kind != "column"  # no rotation changes every row


def test_match_patterns_are_not_rotated():
    """A pattern is part of a message: another row's part may be in this row's message."""
    source = (
        "from pkg import E\n\n\n"
        "@pytest.mark.parametrize('s, message', [('a', 'got 4'), ('b', 'expected 5')])\n"
        "def test_a(s, message):\n    with pytest.raises(E, match=message):\n        f(s)\n"
    )
    _function, site = best_site(source)
    assert site.kind == "raises"


HIDDEN = """import pytest

from pkg import f, ParseError


@pytest.mark.parametrize("x, out", [(1, 2), (2, 4), (3, 6)])
def test_doubles(x, out):
    assert f(x) == out


def test_empty():
    assert f(0) == 0


def test_rejects():
    with pytest.raises(ParseError):
        f(None)


class TestMore:
    def test_negative(self):
        assert f(-1) == -2


def helper():
    return test_empty
"""


def planted(tmp_path: Path, fail_to_pass: tuple[str, ...], **options) -> tuple[Planting, str]:
    (tmp_path / "tests").mkdir(exist_ok=True)
    (tmp_path / "tests" / "test_f.py").write_text(HIDDEN)
    planting = plant(
        tmp_path, ["tests/test_f.py"], fail_to_pass, ("tests/test_f.py::test_empty",),
        odds=1000, max_copies=15, **options,
    )  # fmt: skip
    return planting, (tmp_path / "tests" / "test_f.py").read_text()


def test_planting_renames_every_test_and_maps_the_names_back(tmp_path):
    planting, text = planted(tmp_path, ("tests/test_f.py::test_doubles[1-2]",))
    compile(text, "test_f.py", "exec")
    for original in ("test_doubles", "test_rejects", "test_negative"):
        assert f"def {original}" not in text
    assert "def test_empty" in text  # named elsewhere in the module: kept as it is
    assert set(planting.renamed.values()) == {
        "tests/test_f.py::test_doubles", "tests/test_f.py::test_rejects",
        "tests/test_f.py::TestMore::test_negative",
    }  # fmt: skip
    doubles = next(k for k, v in planting.renamed.items() if v.endswith("test_doubles"))
    copy = planting.canaries[0].test_id
    run = testrun.TestRun(
        outcomes={f"{doubles}[1-2]": "passed", f"{copy}[1-2]": "failed"}, complete=True
    )
    assert planting.outcomes(run) == {"tests/test_f.py::test_doubles[1-2]": "passed"}


def test_copies_of_a_fail_to_pass_test_join_it_at_random_places(tmp_path):
    firsts = Counter()
    for _ in range(60):
        planting, text = planted(tmp_path, ("tests/test_f.py::test_doubles[1-2]",))
        canaries = [c for c in planting.canaries if "TestMore" not in c.test_id]
        real = canaries[0].source_id.split("::")[-1]
        group = [real, *(c.test_id.split("::")[-1] for c in canaries if c.source_id.endswith(real))]
        assert len(group) >= 3
        order = [
            n
            for n in (
                node.name for node in ast.walk(ast.parse(text)) if isinstance(node, ast.FunctionDef)
            )
            if n in group
        ]
        firsts[order[0] == real] += 1
    # The real test comes first in its group only as often as chance says.
    assert 0 < firsts[True] < 30, firsts


def test_no_names_are_changed_when_the_command_selects_by_name(tmp_path):
    planting, text = planted(tmp_path, ("tests/test_f.py::test_doubles[1-2]",), keep_names=True)
    assert text == HIDDEN and planting.canaries == [] and planting.renamed == {}


def judged(outcomes: dict[str, str], raised: dict[str, tuple[str, ...]] | None = None) -> str:
    planting = Planting(
        canaries=[Canary("t.py::test_copy", "t.py::test_real", "value", ("AssertionError",))]
    )
    run = testrun.TestRun(outcomes=outcomes, raised=raised or {}, complete=True, exit_code=1)
    return planting.violation(run)


def test_a_copy_of_a_passing_test_must_fail_for_its_reason():
    fine = {"t.py::test_copy": ("AssertionError", "Exception", "BaseException", "object")}
    assert judged({"t.py::test_real": "passed", "t.py::test_copy": "failed"}, fine) == ""
    forged = judged({"t.py::test_real": "passed", "t.py::test_copy": "passed"})
    assert "reported passed" in forged
    other = judged(
        {"t.py::test_real": "passed", "t.py::test_copy": "failed"},
        {"t.py::test_copy": ("TypeError", "Exception")},
    )
    assert "another reason (TypeError" in other
    assert "reported None" in judged({"t.py::test_real": "passed"})


def test_a_copy_of_a_failing_test_says_nothing():
    assert judged({"t.py::test_real": "failed", "t.py::test_copy": "passed"}) == ""


def test_cases_of_a_parametrized_copy_pair_with_the_real_cases_in_run_order():
    outcomes = {
        "t.py::test_real[a-1]": "passed", "t.py::test_real[b-2]": "failed",
        "t.py::test_copy[a-2]": "failed", "t.py::test_copy[b-1]": "passed",
    }  # fmt: skip
    raised = {"t.py::test_copy[a-2]": ("AssertionError",)}
    assert judged(outcomes, raised) == ""  # the passing copy case pairs with a failing one
    outcomes["t.py::test_real[b-2]"] = "passed"
    assert "test_copy[b-1]" in judged(outcomes, raised)


RAISING_MODULE = """
import pytest

from calc import CalcError, EvalError, NameError_, SyntaxFault, evaluate


def test_a():
    with pytest.raises(EvalError, match="too many"):
        evaluate("round(1, 2, 3)")
"""
CALC_CLASSES = """
class CalcError(Exception):
    pass


class EvalError(CalcError):
    pass


class NameError_(EvalError):
    pass


class SyntaxFault(CalcError, ValueError):
    pass
"""


def test_a_raises_copy_expects_an_unrelated_exception_the_module_or_builtins_name(tmp_path):
    (tmp_path / "calc.py").write_text(CALC_CLASSES)
    tree = ast.parse(RAISING_MODULE)
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    [site, *_] = sites(function, module_aliases(tree), ClassIndex.of_tree(tmp_path))
    assert site.kind == "raises" and site.reasons == ("EvalError",)
    # Not its base, not its subclass: a program raising EvalError fails every copy.
    assert "CalcError" not in site.alternatives and "NameError_" not in site.alternatives
    assert {"SyntaxFault", "KeyError", "TypeError"} <= set(site.alternatives)
    assert "ValueError" in site.alternatives  # unrelated to EvalError
    made = copies(function, site, 4, random.Random(0))
    expected = {c.body[0].items[0].context_expr.args[0].id for c in made}
    assert len(expected) == 4 and expected <= set(site.alternatives)
    assert all(c.body[0].items[0].context_expr.keywords for c in made)  # match= kept


def test_an_exception_of_unknown_ancestry_gets_the_body_run_bare(tmp_path):
    (tmp_path / "calc.py").write_text(
        "from elsewhere import Base\n\n\nclass EvalError(Base):\n    pass\n"
    )
    tree = ast.parse(RAISING_MODULE)
    function = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    [site, *_] = sites(function, module_aliases(tree), ClassIndex.of_tree(tmp_path))
    assert site.kind == "raises" and site.alternatives == ()
    [copy] = copies(function, site, 4, random.Random(0))
    assert isinstance(copy.body[0], ast.Expr)  # the with statement is gone


@pytest.mark.parametrize(
    ("assertion", "opposite"),
    [
        ("assert f() != 3", "assert f() == 3"),
        ("assert a < b", "assert a >= b"),
        ("assert x in items", "assert x not in items"),
        ("assert f() is None", "assert f() is not None"),
        ("assert not empty", "assert empty"),
        ("assert ready(x)", "assert not ready(x)"),
    ],
)
def test_an_identity_copy_asserts_the_opposite_as_a_test_would_write_it(assertion, opposite):
    _function, site = best_site(f"def test_a():\n    {assertion}\n")
    function, _ = only_function(f"def test_a():\n    {assertion}\n")
    [copy] = copies(function, site, 3, random.Random(0))
    assert ast.unparse(copy.body[0]) == opposite


def test_copies_stay_within_the_case_budget(tmp_path):
    """A copy of a parametrized test adds one case a row (three here): the budget bounds
    them all, and the first group keeps one copy whatever it costs."""
    for budget, copies_made in ((100, 2), (5, 1), (1, 1)):
        planting, _text = planted(
            tmp_path, ("tests/test_f.py::test_doubles[1-2]",), max_cases=budget
        )  # fmt: skip
        assert len(planting.canaries) == copies_made, budget


def test_a_class_index_reads_again_only_the_files_a_grading_changed(tmp_path):
    """A fix may give an exception a new base: a copy must not expect that base."""
    (tmp_path / "calc.py").write_text(CALC_CLASSES)
    (tmp_path / "other.py").write_text("class Unrelated(Exception):\n    pass\n")
    base = ClassIndex.of_tree(tmp_path)
    assert base.unrelated("EvalError", "ValueError")
    (tmp_path / "calc.py").write_text(
        CALC_CLASSES.replace("EvalError(CalcError)", "EvalError(CalcError, ValueError)")
    )
    (tmp_path / "other.py").unlink()
    changed = base.with_files(tmp_path, ["calc.py", "other.py"])
    assert not changed.unrelated("EvalError", "ValueError")
    assert changed.ancestry("Unrelated") is None  # its file is gone
    assert base.unrelated("EvalError", "ValueError")  # the base's own index is unchanged
