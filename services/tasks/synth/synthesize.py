"""Synthesizing tasks from a project with a pytest suite (SWE-smith style).

For each candidate mutation (in an order fixed by the seed): copy the project, apply the
mutation, run the suite in a sandbox without network, and keep the mutant when 1..N tests
fail and every other test still passes. The failing tests become FAIL_TO_PASS, the rest
PASS_TO_PASS; the instruction is written from the failing tests' names and messages
only, never from the mutated line. Mutants run in parallel over the cores, but which ones
are kept depends only on the seed: results are taken in candidate order.
"""

from __future__ import annotations

import hashlib
import random
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from etude.sandbox.bwrap import Bwrap
from etude.sandbox.config import SandboxConfig
from etude.tasks.repo import content_hash, copy_files, project_files, unified_diff
from etude.tasks.synth.mutations import Mutation, find_mutations
from etude.tasks.task import DEFAULT_TEST_COMMAND, Task
from etude.tasks.testrun import TestRun, run_pytest

TEST_DIR = "tests"
# Plugins installed beside pytest (hypothesis, asyncio, …) are not what these suites need,
# and loading them more than doubles every run.
SUITE_COMMAND = f"PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 {DEFAULT_TEST_COMMAND}"


@dataclass(frozen=True, slots=True)
class Project:
    name: str
    root: Path
    files: list[str]
    """Every file of the project, tests included."""

    @property
    def source_files(self) -> list[str]:
        return [f for f in self.files if f.endswith(".py") and not _is_test(f)]

    @property
    def test_files(self) -> list[str]:
        return [f for f in self.files if _is_test(f)]

    @property
    def hash(self) -> str:
        return content_hash(self.root, self.files)


def _is_test(path: str) -> bool:
    return path.startswith(f"{TEST_DIR}/") or path == "conftest.py"


def load_project(root: Path, name: str | None = None) -> Project:
    if not (root / TEST_DIR).is_dir():
        raise ValueError(f"{root} has no {TEST_DIR}/ directory: the synthesizer needs a suite")
    return Project(name or root.name, root, project_files(root))


@dataclass(frozen=True, slots=True)
class SynthOptions:
    seed: int = 0
    per_project: int = 20
    max_failing: int = 8
    timeout_s: float = 15.0
    """A mutant whose suite runs longer (a loop that never ends) is dropped."""
    workers: int = 2
    held_out: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Kept:
    mutation: Mutation
    fail_to_pass: list[str]
    pass_to_pass: list[str]
    messages: dict[str, str]


def candidates(project: Project, seed: int) -> list[Mutation]:
    found = [
        mutation
        for path in project.source_files
        for mutation in find_mutations(path, (project.root / path).read_text())
    ]
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
) -> TestRun:
    with tempfile.TemporaryDirectory(prefix="etude-synth-") as scratch:
        workdir = Path(scratch)
        copy_files(project.root, workdir, project.files)
        if mutation is not None:
            target = workdir / mutation.path
            target.write_text(mutation.apply(target.read_text()))
        return run_pytest(
            workdir, SUITE_COMMAND, bwrap=bwrap, config=sandbox, timeout_s=timeout_s,
        )  # fmt: skip


def judge(baseline: TestRun, run: TestRun, max_failing: int) -> tuple[list[str], list[str]] | None:
    """(FAIL_TO_PASS, PASS_TO_PASS) when the mutant is a task, else None."""
    if run.timed_out or set(run.outcomes) != set(baseline.outcomes):
        return None  # a hang or a collection error: not a bug an agent can localize
    failing = run.failing
    if not 1 <= len(failing) <= max_failing:
        return None
    passing = sorted(t for t, o in run.outcomes.items() if o == "passed")
    if len(failing) + len(passing) != len(run.outcomes):
        return None
    return failing, passing


def kept_mutants(
    project: Project,
    options: SynthOptions,
    bwrap: Bwrap | None,
    on_tried: Callable[[int, int], None] = lambda tried, kept: None,
    sandbox: SandboxConfig | None = None,
) -> Iterator[Kept]:
    """The mutants of `project` that make tasks, in candidate order. `sandbox`: the
    limits and binds of the suite's runs, grading's (`SandboxConfig.for_grading()`) so a
    task is kept under the limits it will be graded with; unset, the defaults."""
    sandbox = sandbox or SandboxConfig()
    baseline = _run_mutant(project, None, bwrap, sandbox, options.timeout_s)
    if not baseline.outcomes or baseline.failing:
        raise ValueError(
            f"{project.name}: the suite must pass before mutating; failing: "
            f"{baseline.failing or 'no tests collected'}\n{baseline.output[-2000:]}"
        )
    order = candidates(project, options.seed)
    kept, tried, diffs = 0, 0, set()
    with ProcessPoolExecutor(max_workers=options.workers) as pool:
        # Submit a window at a time and read results in candidate order: the kept set
        # depends on the seed only, not on which worker finished first.
        window = options.workers * 2
        pending = []
        index = 0
        while kept < options.per_project and (pending or index < len(order)):
            while len(pending) < window and index < len(order):
                mutation = order[index]
                future = pool.submit(
                    _run_mutant, project, mutation, bwrap, sandbox, options.timeout_s
                )
                pending.append((mutation, future))
                index += 1
            mutation, future = pending.pop(0)
            run = future.result()
            tried += 1
            verdict = judge(baseline, run, options.max_failing)
            diff_key = (mutation.path, mutation.start, mutation.end, mutation.replacement)
            if verdict is not None and diff_key not in diffs:
                diffs.add(diff_key)
                kept += 1
                yield Kept(mutation, verdict[0], verdict[1], run.messages)
            on_tried(tried, kept)
        for _mutation, future in pending:
            future.cancel()


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


def to_task(project: Project, kept: Kept, options: SynthOptions, base_commit: str) -> Task:
    mutation = kept.mutation
    original = (project.root / mutation.path).read_text()
    buggy = mutation.apply(original)
    bug_patch = unified_diff(mutation.path, original, buggy)
    gold_patch = unified_diff(mutation.path, buggy, original)
    test_patch = "".join(
        unified_diff(f, None, (project.root / f).read_text()) for f in project.test_files
    )
    digest = hashlib.sha256(bug_patch.encode()).hexdigest()[:8]
    failing = len(kept.fail_to_pass)
    return Task(
        id=f"etude-mini.{project.name}.{mutation.kind}.{digest}",
        repo=f"etude-mini/{project.name}",
        base_commit=base_commit,
        instruction=instruction(project.name, kept.fail_to_pass, kept.messages),
        test_patch=test_patch,
        fail_to_pass=tuple(kept.fail_to_pass),
        pass_to_pass=tuple(kept.pass_to_pass),
        test_command=SUITE_COMMAND,
        gold_patch=gold_patch,
        metadata={
            "source": "etude-mini",
            "project": project.name,
            "project_hash": project.hash,
            "mutation": mutation.kind,
            "bug_patch": bug_patch,
            "difficulty": "easy" if failing >= 4 else "medium" if failing >= 2 else "hard",
            "split": "held_out" if project.name in options.held_out else "train",
            "seed": options.seed,
        },
    )
