"""Judging a mutant against the baseline: only the tests that passed unmutated count, so a
skipped or xfailed test never voids a candidate."""

from __future__ import annotations

from etude.tasks import testrun
from etude.tasks.synth.suite import discover
from etude.tasks.synth.synthesize import Baseline, judge
from tests.tasks.layouts import DATEPARTS, TEXTBITS, write

A, B, C, SKIPPED = (f"tests/test_x.py::test_{n}" for n in ("a", "b", "c", "skipped"))


def baseline(**outcomes: str) -> Baseline:
    run = testrun.TestRun(outcomes=outcomes, exit_code=0, complete=True,
                  collection_errors={"tests/test_np.py": "No module named numpy"})  # fmt: skip
    passing = frozenset(t for t, o in outcomes.items() if o == "passed")
    return Baseline(run, passing, {}, 15.0)


def mutant(exit_code: int = 1, errors: dict | None = None, **outcomes: str) -> testrun.TestRun:
    errors = {"tests/test_np.py": "No module named numpy"} if errors is None else errors
    return testrun.TestRun(
        outcomes=outcomes, exit_code=exit_code, complete=True, collection_errors=errors
    )


BASE = baseline(**{A: "passed", B: "passed", C: "passed", SKIPPED: "skipped"})


def test_a_skipped_test_does_not_void_the_mutant():
    verdict = judge(BASE, mutant(**{A: "failed", B: "passed", C: "passed", SKIPPED: "skipped"}), 4)
    assert verdict == ([A], [B, C])


def test_setup_errors_count_as_failing():
    verdict = judge(BASE, mutant(**{A: "error", B: "failed", C: "passed", SKIPPED: "skipped"}), 4)
    assert verdict == ([A, B], [C])


def test_a_judged_test_that_vanishes_or_is_skipped_is_no_task():
    assert judge(BASE, mutant(**{A: "failed", B: "passed"}), 4) is None
    assert judge(BASE, mutant(**{A: "failed", B: "passed", C: "skipped"}), 4) is None


def test_a_module_that_no_longer_imports_is_no_task():
    errors = {"tests/test_np.py": "No module named numpy", "tests/test_y.py": "NameError"}
    assert judge(BASE, mutant(errors=errors, **{A: "failed", B: "passed", C: "passed"}), 4) is None


def test_nothing_failing_or_too_much_failing_is_no_task():
    assert judge(BASE, mutant(exit_code=0, **{A: "passed", B: "passed", C: "passed"}), 4) is None
    assert judge(BASE, mutant(**{A: "failed", B: "failed", C: "failed"}), 2) is None


def test_a_suite_that_could_not_run_is_no_task():
    interrupted = mutant(exit_code=2, errors={"tests/test_x.py": "E   SyntaxError: bad"})
    assert interrupted.suite_error
    assert judge(BASE, interrupted, 4) is None


def test_pytest_own_warnings_stay_warnings_where_the_project_makes_warnings_errors(tmp_path):
    """`filterwarnings = error` written for another pytest, or with plugins: pytest's own
    deprecations and unknown plugin marks would stop the whole run."""
    root = write(tmp_path / "dateparts", DATEPARTS)
    args = discover(root, sorted(DATEPARTS)).args
    assert args == ("-W", "ignore::pytest.PytestDeprecationWarning",
                    "-W", "ignore::pytest.PytestUnknownMarkWarning")  # fmt: skip
    root = write(tmp_path / "textbits", TEXTBITS)
    assert "-W" not in discover(root, sorted(TEXTBITS)).args


def test_missing_modules_are_counted_from_the_collection_errors():
    run = testrun.TestRun(exit_code=1, complete=True, collection_errors={
        "tests/a.py": "E   ModuleNotFoundError: No module named 'six'",
        "tests/b.py": "E   ModuleNotFoundError: No module named 'six.moves'",
        "tests/c.py": "E   ModuleNotFoundError: No module named 'six'",
        "tests/d.py": "E   NameError: name 'x' is not defined",
    })  # fmt: skip
    assert Baseline(run, frozenset(), {}, 15.0).missing_modules == {"six": 2, "six.moves": 1}
