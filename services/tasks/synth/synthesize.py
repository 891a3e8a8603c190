"""Synthesizing tasks from a project with a pytest suite (SWE-smith style).

First the suite runs on the project as it is (the baseline): the tests that pass there
are the ones a task is judged on; those that fail, are skipped or xfailed, or sit in a
module that cannot be collected in the sandbox (a dependency that is not installed) are
left out, and said so. Then for each candidate mutation (in an order fixed by the seed):
copy the project, apply the mutation, run the suite in a sandbox without network, and keep
the mutant when 1..N of those tests fail and every other one still passes. The failing
tests become FAIL_TO_PASS, the rest PASS_TO_PASS; the instruction is written from the
failing tests' names and messages only, never from the mutated line. Mutants run in
parallel over the cores, but which ones are kept depends only on the seed: results are
taken in candidate order.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import random
import re
import shlex
import tempfile
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from etude.sandbox.bwrap import WORKSPACE, Bwrap
from etude.sandbox.config import SandboxConfig
from etude.tasks.repo import content_hash, copy_files, project_files, unified_diff
from etude.tasks.synth.mutations import Mutation, find_mutations
from etude.tasks.synth.suite import Suite, discover
from etude.tasks.task import DEFAULT_TEST_COMMAND, Setup, Task
from etude.tasks.testrun import TestRun, error_line, run_pytest

# Plugins installed beside pytest (hypothesis, asyncio, …) are not what these suites need,
# and loading them more than doubles every run.
SUITE_COMMAND = f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {DEFAULT_TEST_COMMAND}"
# The synthesizer's own runs go on past a module that cannot be collected (an optional
# dependency missing in the sandbox): the other modules' tests still make tasks. Graded
# runs name the test files of the task, which all collected here.
SYNTH_ARGS = "--continue-on-collection-errors"
# Python files that are no part of the library: mutating them breaks no test.
NOT_LIBRARY_DIRS = frozenset({"docs", "doc", "examples", "example", "benchmarks", "benchmark",
                              "scripts", "tools", "ci", "bench"})  # fmt: skip
NOT_LIBRARY_FILES = frozenset({"setup.py", "noxfile.py", "fabfile.py", "versioneer.py",
                               "conftest.py", "tasks.py", "_version.py",
                               "benchmark.py"})  # fmt: skip
JUDGED = frozenset({"passed", "failed", "error"})


@dataclass(frozen=True, slots=True)
class Project:
    name: str
    root: Path
    files: list[str]
    """Every file of the project, tests included."""
    suite: Suite
    origin: dict[str, str] | None = None
    """Where a project given by path came from (`etude.tasks.synth.sources`); None for
    the bundled projects (and project folders loaded as they are), `etude-mini/<name>`."""

    @property
    def source_files(self) -> list[str]:
        hidden = set(self.suite.test_files)
        return [
            f for f in self.files
            if f.endswith(".py") and f not in hidden and not _tooling(f)
        ]  # fmt: skip

    @property
    def test_files(self) -> list[str]:
        return list(self.suite.test_files)

    @property
    def hash(self) -> str:
        return content_hash(self.root, self.files)

    @property
    def test_command(self) -> str:
        extra = shlex.join(self.suite.args)
        return f"{SUITE_COMMAND} {extra}" if extra else SUITE_COMMAND


def _tooling(path: str) -> bool:
    parts = Path(path).parts
    return parts[-1] in NOT_LIBRARY_FILES or (len(parts) > 1 and parts[0] in NOT_LIBRARY_DIRS)


def load_project(root: Path, name: str | None = None) -> Project:
    """A project folder as it is (the bundled ones); raises NoTestsError (a ValueError)
    when it has no tests. Projects given by the user: `etude.tasks.synth.sources`."""
    files = project_files(root)
    return Project(name or root.name, root, files, discover(root, files))


@dataclass(frozen=True, slots=True)
class SynthOptions:
    seed: int = 0
    per_project: int = 20
    max_failing: int = 8
    timeout_s: float = 15.0
    """A mutant whose suite runs longer (a loop that never ends) is dropped; raised to five
    times the baseline's duration for slower suites (runs slow down on a busy machine)."""
    workers: int = 2
    held_out: frozenset[str] = frozenset()
    baseline_timeout_s: float = 900.0
    """How long the suite may run on the unmutated project."""
    max_tries: int = 0
    """Mutants tried per project at most (0: every candidate): a large project has
    thousands, and a suite that catches few of them would run for hours."""
    time_limit_s: float = 0.0
    """Seconds spent trying a project's mutants at most (0: no limit); what was kept by
    then is written."""
    python_environment: Path | None = None
    """The project's Python environment (etude.tasks.pyenv), whose packages its tests
    import; None: the interpreter etude runs on."""
    setup: Setup = field(default_factory=Setup)
    """The install specification every task records (what that environment was built
    with beyond the project's own dependencies), so grading builds it alike."""


@dataclass(frozen=True, slots=True)
class Kept:
    mutation: Mutation
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    messages: dict[str, str]


class SuiteError(ValueError):
    """The project's suite cannot serve to judge mutants; the message says why."""


@dataclass(frozen=True, slots=True)
class Baseline:
    """The suite on the unmutated project."""

    run: TestRun
    passing: frozenset[str]
    """The tests a mutant is judged on: passed, in a hidden test file."""
    left_out: dict[str, str]
    """Test id, or module that did not collect → why it is not judged."""
    mutant_timeout_s: float

    @property
    def missing_modules(self) -> dict[str, int]:
        """Module a test module could not import → how many test modules need it: a
        dependency the suite's Python lacks, whose tests are left out."""
        counts: dict[str, int] = {}
        for message in self.run.collection_errors.values():
            if found := MISSING_MODULE.search(message):
                counts[found[1]] = counts.get(found[1], 0) + 1
        return counts


MISSING_MODULE = re.compile(r"No module named '([\w.]+)'")


def run_baseline(
    project: Project, options: SynthOptions, bwrap: Bwrap | None, sandbox: SandboxConfig
) -> Baseline:
    run = _run_mutant(
        project, None, bwrap, sandbox, options.baseline_timeout_s, options.python_environment
    )
    if run.timed_out:
        raise SuiteError(f"{project.name}: the suite ran past {run.seconds:.0f}s unmutated")
    started = _startup_error(run)
    if started is None and (not run.complete or run.problem):
        tail = run.output.strip().splitlines()[-3:]
        raise SuiteError(
            f"{project.name}: the suite ended without reporting its end (exit code "
            f"{run.exit_code}{'; ' + run.problem if run.problem else ''}): {' | '.join(tail)}"
        )
    if started is not None or run.suite_error:
        why = started or run.suite_error
        raise SuiteError(f"{project.name}: the suite could not run: {why}{_hint(why, options)}")
    hidden = set(project.test_files)
    left_out = {f: f"not collected: {error_line(m)}" for f, m in run.collection_errors.items()}
    passing = set()
    for test, outcome in run.outcomes.items():
        if test.split("::")[0] not in hidden:
            left_out[test] = "not in a test module (a doctest, or outside the test folders)"
        elif outcome != "passed":
            message = error_line(run.messages.get(test, ""))
            left_out[test] = f"{outcome}: {message}" if message else outcome
        else:
            passing.add(test)
    if not passing:
        shown = "; ".join(f"{t}: {why}" for t, why in list(left_out.items())[:5])
        raise SuiteError(f"{project.name}: no test passes unmutated: {shown}")
    timeout = max(options.timeout_s, 5 * run.seconds)
    return Baseline(run, frozenset(passing), left_out, timeout)


def _startup_error(run: TestRun) -> str | None:
    """What stopped pytest before it collected anything — a conftest.py that does not
    import, a hook written for another pytest — from its output; None when it got that
    far. pytest then reports only an exit code (a usage error, or 1 with a traceback),
    which tells the user nothing."""
    if run.timed_out or run.problem or run.outcomes or run.collection_errors:
        return None
    if run.complete and run.exit_code not in (1, 3, 4):
        return None
    # Paths as the user knows them: relative to the project, not to the sandbox's mount.
    output = run.output.replace(f"{WORKSPACE}/", "")
    # An exception in a hook (a conftest's) comes as pytest's INTERNALERROR lines.
    lines = [line.rstrip().removeprefix("INTERNALERROR> ") for line in output.splitlines()]
    for index, line in enumerate(lines):
        if line.startswith("ImportError while loading conftest"):
            raised = [x.removeprefix("E").strip() for x in lines[index:] if x.startswith("E ")]
            where = line.removeprefix("ImportError while loading ").rstrip(".")
            return f"{where} does not import: {raised[-1] if raised else 'ImportError'}"
    # The last exception of a traceback: `package.module.SomeError: message`, which may
    # go on over a few lines (pluggy's PluginValidationError does).
    exception = re.compile(r"^(?:[A-Za-z_][\w]*\.)*([A-Za-z_]\w*(?:Error|Exception)): (.*)")
    for index in range(len(lines) - 1, -1, -1):
        if found := exception.match(lines[index]):
            more = [x.strip() for x in lines[index + 1 : index + 3] if x.strip()]
            return " ".join([f"{found[1]}: {found[2]}", *more])[:600]
    return None


def _hint(why: str, options: SynthOptions) -> str:
    """What the user can do about a suite that could not run, where the cause is known."""
    if "PackageNotFoundError" in why and options.python_environment is None:
        # `importlib.metadata.version(__name__)` at import: suites run the project's
        # source, never an installed copy; an environment holds a record of its metadata.
        return (
            " (the project reads its own installed package metadata, and its suite runs "
            "its source uninstalled: build the project an environment with --environment, "
            "which holds that metadata)"
        )
    if "No module named" in why:
        if options.python_environment is not None:
            return (
                " (the project's Python environment lacks it: name the test dependencies "
                "with --requirements FILE or --pip-package SPEC)"
            )
        return (
            " (a dependency the suite's Python lacks: build the project an environment with "
            "--environment, --wheelhouse DIR or --index-url URL, or install it where etude runs)"
        )
    if "conftest" in why or "hookimpl" in why or "Plugin" in why:
        return (
            " (the project's conftest.py or plugins do not work with pytest "
            f"{importlib.metadata.version('pytest')}, the pytest etude runs its suites with)"
        )
    return ""


def candidates(project: Project, seed: int) -> list[Mutation]:
    found = []
    for path in project.source_files:
        try:
            found += find_mutations(path, (project.root / path).read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue  # not Python this interpreter parses (Python 2, a template): no mutants
    # A stable per-project seed: the same project gives the same order wherever it runs.
    salt = int(hashlib.sha256(f"{seed}:{project.name}".encode()).hexdigest()[:8], 16)
    random.Random(salt).shuffle(found)
    return found


def _run_mutant(
    project: Project,
    mutation: Mutation | None,
    bwrap: Bwrap | None,
    sandbox: SandboxConfig,
    timeout_s: float,
    python_environment: Path | None = None,
) -> TestRun:
    with tempfile.TemporaryDirectory(prefix="etude-synth-") as scratch:
        workdir = Path(scratch)
        copy_files(project.root, workdir, project.files)
        if mutation is not None:
            target = workdir / mutation.path
            target.write_text(mutation.apply(target.read_text(encoding="utf-8")), encoding="utf-8")
        return run_pytest(
            workdir, f"{project.test_command} {SYNTH_ARGS}", bwrap=bwrap, config=sandbox,
            timeout_s=timeout_s, python_environment=python_environment,
        )  # fmt: skip


def judge(baseline: Baseline, run: TestRun, max_failing: int) -> tuple[list[str], list[str]] | None:
    """(FAIL_TO_PASS, PASS_TO_PASS) when the mutant is a task, else None. Only the tests
    that pass unmutated count: a skipped or xfailed test is neither."""
    if run.timed_out or not run.complete or run.problem or run.suite_error:
        return None  # a hang, or a suite that could not run: no bug an agent can localize
    if set(run.collection_errors) - set(baseline.run.collection_errors):
        return None  # a test module no longer imports
    outcomes = {t: run.outcomes.get(t) for t in baseline.passing}
    if any(o not in JUDGED for o in outcomes.values()):
        return None  # a judged test vanished or is now skipped
    failing = sorted(t for t, o in outcomes.items() if o != "passed")
    if not 1 <= len(failing) <= max_failing:
        return None
    return failing, sorted(t for t, o in outcomes.items() if o == "passed")


def kept_mutants(
    project: Project,
    options: SynthOptions,
    bwrap: Bwrap | None,
    on_tried: Callable[[int, int, int], None] = lambda tried, kept, timed_out: None,
    sandbox: SandboxConfig | None = None,
    baseline: Baseline | None = None,
) -> Iterator[Kept]:
    """The mutants of `project` that make tasks, in candidate order. `sandbox`: the
    limits and binds of the suite's runs, grading's (`SandboxConfig.for_grading()`) so a
    task is kept under the limits it will be graded with; unset, the defaults.
    `baseline`: `run_baseline`'s, when the caller has it already. `on_tried` hears the
    mutants tried, kept and timed out so far after each one. Raises SuiteError."""
    sandbox = sandbox or SandboxConfig()
    baseline = baseline or run_baseline(project, options, bwrap, sandbox)
    order = candidates(project, options.seed)
    if options.max_tries:
        order = order[: options.max_tries]
    deadline = time.monotonic() + options.time_limit_s if options.time_limit_s else None
    kept, tried, timed_out, diffs = 0, 0, 0, set()
    with ProcessPoolExecutor(max_workers=options.workers) as pool:
        pending: list[tuple[Mutation, Future[TestRun]]] = []
        try:
            # Submit a window at a time and read results in candidate order: the kept set
            # depends on the seed only, not on which worker finished first.
            window = options.workers * 2
            index = 0
            while kept < options.per_project and (pending or index < len(order)):
                if deadline is not None and time.monotonic() >= deadline:
                    break  # out of time: no other mutant starts (those running end first)
                while len(pending) < window and index < len(order):
                    mutation = order[index]
                    future = pool.submit(
                        _run_mutant, project, mutation, bwrap, sandbox, baseline.mutant_timeout_s,
                        options.python_environment,
                    )  # fmt: skip
                    pending.append((mutation, future))
                    index += 1
                mutation, future = pending.pop(0)
                run = future.result()
                tried += 1
                timed_out += run.timed_out
                verdict = judge(baseline, run, options.max_failing)
                diff_key = (mutation.path, mutation.start, mutation.end, mutation.replacement)
                if verdict is not None and diff_key not in diffs:
                    diffs.add(diff_key)
                    kept += 1
                    yield Kept(mutation, verdict[0], verdict[1], run.messages)
                on_tried(tried, kept, timed_out)
        except BaseException:
            # Interrupted (Ctrl-C, SIGTERM, an error of the caller's): the mutants running
            # may have minutes left, so their workers are stopped rather than waited for.
            _kill_workers(pool)
            raise
        finally:
            # Also when the caller stops early (a closed generator): the mutants not started
            # yet never run, so the pool shuts down once those running end.
            for _mutation, future in pending:
                future.cancel()


def _kill_workers(pool: ProcessPoolExecutor) -> None:
    """Kill the pool's worker processes: a worker catches an interrupt of the mutant it runs
    and goes on with the next one. Their sandboxes die with them (bwrap --die-with-parent).
    Python has no public way before 3.14 (`kill_workers`), hence the private mapping.
    The shutdown waits for the pool's manager thread, which sees its workers dead and ends
    at once: left running, it races the interpreter's exit on their shared wakeup pipe
    (`OSError: Bad file descriptor` printed at exit)."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        with contextlib.suppress(OSError, ValueError):
            process.kill()
    pool.shutdown(wait=True, cancel_futures=True)


def instruction(project: str, failing: list[str], messages: dict[str, str]) -> str:
    lines = [
        f"Some behaviour of `{project}` is broken: these tests fail.",
        "",
    ]
    for test in failing:
        message = _first_line(messages.get(test, ""))
        lines.append(f"- `{test}`" + (f": {message}" if message else ""))
    lines += [
        "",
        "The tests are right; the library is wrong. Find the cause and fix it so these tests "
        "pass and every other test keeps passing. The test files are not in the repository; "
        "they are run against your changes when you submit.",
    ]
    return "\n".join(lines)


def _first_line(message: str, limit: int = 200) -> str:
    first = message.strip().splitlines()[0] if message.strip() else ""
    return first if len(first) <= limit else first[: limit - 1] + "…"


def _added(root: Path, path: str) -> str:
    """A diff that creates the file; an empty one (a `tests/__init__.py`) too, which a
    plain unified diff cannot say."""
    text = (root / path).read_text(encoding="utf-8")
    return unified_diff(path, None, text) or f"diff --git a/{path} b/{path}\nnew file mode 100644\n"


def to_task(project: Project, kept: Kept, options: SynthOptions, base_commit: str) -> Task:
    mutation = kept.mutation
    original = (project.root / mutation.path).read_text(encoding="utf-8")
    buggy = mutation.apply(original)
    bug_patch = unified_diff(mutation.path, original, buggy)
    gold_patch = unified_diff(mutation.path, buggy, original)
    test_patch = "".join(_added(project.root, f) for f in project.test_files)
    digest = hashlib.sha256(bug_patch.encode()).hexdigest()[:8]
    failing = len(kept.fail_to_pass)
    bundled = project.origin is None
    slug = re.sub(r"[^a-z0-9_.-]+", "-", project.name.lower())
    metadata = {
        "source": "etude-mini" if bundled else "synth",
        "project": project.name,
        "project_hash": project.hash,
        "mutation": mutation.kind,
        "bug_patch": bug_patch,
        "difficulty": "easy" if failing >= 4 else "medium" if failing >= 2 else "hard",
        "split": "held_out" if project.name in options.held_out else "train",
        "seed": options.seed,
    }
    if not bundled:
        # What rebuilds the repository from the same source (etude.tasks.synth.sources).
        metadata["origin"] = dict(project.origin or {})
    if project.suite.notes:
        metadata["notes"] = project.suite.notes
    if options.python_environment is not None:
        # Its tests import more than the interpreter etude runs on has: say so, for the
        # commands that grade on that interpreter.
        metadata["python_environment"] = True
    return Task(
        id=f"etude-mini.{project.name}.{mutation.kind}.{digest}"
        if bundled
        else f"{slug}.{mutation.kind}.{digest}",
        repo=f"etude-mini/{project.name}" if bundled else project.name,
        base_commit=base_commit,
        instruction=instruction(project.name, kept.fail_to_pass, kept.messages),
        test_patch=test_patch,
        fail_to_pass=tuple(kept.fail_to_pass),
        pass_to_pass=tuple(kept.pass_to_pass),
        test_command=project.test_command,
        gold_patch=gold_patch,
        metadata=metadata,
        setup=options.setup,
    )
