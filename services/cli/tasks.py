"""`etude tasks …`: synthesize, materialize, verify, grade and list tasks.

Projects come from the bundled suite (`--project`) or from a path (`--path`: a project
directory or an sdist); a task synthesized from a path records where it came from.
`materialize`, `verify`, `grade` and `hints` build each task's repository from the sources
given (one `RepositorySources`): the same `--path` for those, `--checkouts DIR` and
`--repository owner/name=PATH` for SWE-bench-style tasks; `verify` and `grade` grade in
Python environments as a run does (`--environment`; etude.cli.task_sources).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import random
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from etude.cli.interrupt import terminate_as_interrupt
from etude.cli.synth_progress import SynthProgress
from etude.cli.task_progress import task_progress
from etude.cli.task_sources import (
    CacheOption,
    CheckoutsOption,
    EnvironmentOption,
    IndexUrlOption,
    PathsOption,
    RepositoryOption,
    WheelhouseOption,
    console,
    fail,
    task_provisioning,
    task_sources,
)
from etude.reward.config import RewardConfig
from etude.reward.verify import Verdict, grade_patch, verify_all
from etude.sandbox.bwrap import Bwrap, SandboxUnavailableError, configured_bwrap
from etude.sandbox.config import SandboxConfig, SandboxSettings
from etude.tasks.hinting import HintResult, hint_all
from etude.tasks.materialize import (
    BUNDLED_TASK_FILES,
    HELD_OUT_PROJECTS,
    PROJECTS_DIR,
    TASKS_FILE,
    MaterializeError,
    build_buggy_repository,
    materialize,
)
from etude.tasks.provisioning import ENVIRONMENTS_DIR
from etude.tasks.pyenv import PackageSource
from etude.tasks.repo import PatchError
from etude.tasks.synth import sources
from etude.tasks.synth.environment import (
    EnvironmentBuildError,
    ProjectEnvironment,
    project_environment,
)
from etude.tasks.synth.synthesize import (
    Project,
    SuiteError,
    SynthOptions,
    candidates,
    kept_mutants,
    load_project,
    run_baseline,
    to_task,
)
from etude.tasks.task import Task, read_jsonl, write_jsonl
from etude.tasks.taskset import taskset_path

app = typer.Typer(help="Coding tasks: synthesize them, build their repositories, list them.")

HELD_OUT = HELD_OUT_PROJECTS


@contextlib.contextmanager
def _opened(paths: list[Path]) -> Iterator[list[Project]]:
    """The projects at `paths` (archives unpacked while the context lasts)."""
    with contextlib.ExitStack() as stack:
        try:
            yield [stack.enter_context(sources.opened(path)) for path in paths]
        except sources.SourceError as error:
            raise fail(str(error)) from None


def _bundled(names: list[str]) -> list[Project]:
    known = sorted(p.name for p in PROJECTS_DIR.iterdir() if (p / "tests").is_dir())
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise fail(f"no bundled project {', '.join(unknown)}; known: {', '.join(known)}")
    return [load_project(PROJECTS_DIR / name, name) for name in names]


def _grading_sandbox() -> tuple[Bwrap | None, SandboxConfig]:
    """The sandbox the reward service grades in, from the same settings
    (`ETUDE_SANDBOX__*`), so a task passes or fails here as it will in grading."""
    sandbox = SandboxSettings().sandbox.for_grading()
    try:
        bwrap = configured_bwrap(sandbox)
    except SandboxUnavailableError as error:
        raise fail(str(error)) from None
    if bwrap is None:
        # The tasks' code (their suites, their builds) is data from the internet.
        console.print(
            "[yellow]warning:[/] ETUDE_SANDBOX__BACKEND=process: the tasks' suites and "
            "environment builds run on this host without isolation",
            highlight=False,
        )
    return bwrap, sandbox


def _write_line(out, task: Task) -> None:
    out.write(json.dumps(task.to_swe(), sort_keys=True) + "\n")
    out.flush()  # kept tasks are on disk as they are found: a stopped run keeps them


@app.command()
def synth(
    out: Annotated[Path, typer.Option(help="JSONL file to write (required).")],
    project: Annotated[list[str], typer.Option(help="A bundled etude-mini project.")] = [],  # noqa: B006
    path: Annotated[list[Path], typer.Option(help="A project directory or sdist.")] = [],  # noqa: B006
    per_project: Annotated[int, typer.Option(help="Tasks kept per project.")] = 20,
    max_failing: Annotated[int, typer.Option(help="Most tests a kept bug may fail.")] = 8,
    seed: Annotated[int, typer.Option(help="Fixes which mutations are tried first.")] = 0,
    timeout: Annotated[
        float, typer.Option(help="Seconds a mutant's suite may run (at least 5x the suite's).")
    ] = 15.0,
    workers: Annotated[int, typer.Option(help="Suites run at once.")] = os.cpu_count() or 1,
    max_tries: Annotated[
        int, typer.Option(help="Mutants tried per project at most (0: every candidate).")
    ] = 0,
    time_limit: Annotated[
        float, typer.Option(help="Seconds spent trying each project's mutants (0: no limit).")
    ] = 0.0,
    environment: Annotated[
        bool,
        typer.Option(
            "--environment",
            help="Run a --path project's suite in a Python environment of its dependencies, "
            "built with pip in a sandbox (implied by the next five options).",
        ),
    ] = False,
    wheelhouse: Annotated[
        Path | None, typer.Option(help="Build the environment from this directory of wheels only.")
    ] = None,
    index_url: Annotated[
        str | None, typer.Option(help="Build the environment from this package index.")
    ] = None,
    index_host: Annotated[
        list[str],
        typer.Option(help="Another host[:port] the index serves its files from (repeatable)."),
    ] = [],  # noqa: B006
    requirements: Annotated[
        list[str],
        typer.Option(help="A requirements file of the project (its test dependencies)."),
    ] = [],  # noqa: B006
    pip_package: Annotated[
        list[str], typer.Option(help="A package the tests need besides, as pip names it.")
    ] = [],  # noqa: B006
    cache: Annotated[Path, typer.Option(help="Where environments go (its envs/ folder).")] = Path(
        ".etude/tasks"
    ),
) -> None:
    """Mutate projects, keep bugs their tests catch, write SWE-bench-style records."""
    if not project and not path:
        project = sorted(p.name for p in PROJECTS_DIR.iterdir() if (p / "tests").is_dir())
    if path and out.resolve() in {f.resolve() for f in BUNDLED_TASK_FILES}:
        raise fail(f"{out} is a bundled task set: write tasks of --path projects elsewhere")
    if wheelhouse is not None and not wheelhouse.is_dir():
        raise fail(f"--wheelhouse {wheelhouse}: no such directory")
    wanted = ProjectEnvironment(
        PackageSource(wheelhouse, index_url, tuple(index_host)),
        tuple(requirements),
        tuple(pip_package),
    )
    environment = environment or wanted != ProjectEnvironment()
    if environment and not path:
        raise fail("--environment and its options are for --path projects")
    options = SynthOptions(
        seed, per_project, max_failing, timeout, workers, HELD_OUT,
        max_tries=max_tries, time_limit_s=time_limit,
    )  # fmt: skip
    bwrap, sandbox = _grading_sandbox()
    counts = {"train": 0, "held_out": 0}
    failed = []
    try:
        with (
            terminate_as_interrupt(),
            _opened(path) as given,
            SynthProgress(console, per_project) as progress,
        ):
            out.parent.mkdir(parents=True, exist_ok=True)
            with out.open("w") as lines:
                for item in [*_bundled(project), *given]:
                    try:
                        item_options = options
                        if environment and item.origin is not None:
                            item_options = _with_environment(item, options, wanted, cache, progress)
                        baseline = run_baseline(item, item_options, bwrap, sandbox)
                    except (SuiteError, EnvironmentBuildError) as error:
                        console.print(f"[red]error:[/] {escape(str(error))}", highlight=False)
                        failed.append(item.name)
                        continue
                    total = len(candidates(item, seed))
                    if max_tries:
                        total = min(total, max_tries)
                    uses_environment = item_options.python_environment is not None
                    on_tried = progress.project(item, baseline, total, uses_environment)
                    # Closed on the way out, whatever stops the loop: an interrupt in its
                    # body must stop the pool's workers now, not when collected.
                    found = kept_mutants(item, item_options, bwrap, on_tried, sandbox, baseline)
                    with contextlib.closing(found):
                        for kept in found:
                            task = _with_commit(item, kept, item_options)
                            _write_line(lines, task)
                            counts[task.split] = counts.get(task.split, 0) + 1
                            progress.line(
                                f"{item.name}: kept {task.id} (fails {len(task.fail_to_pass)})"
                            )
                    progress.done(item)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (terminate_as_interrupt)
        console.print(f"Stopped: the {sum(counts.values())} tasks kept so far are in {out}.")
        raise typer.Exit(130) from None
    count = sum(counts.values())
    console.print(
        f"Wrote {count} tasks to {out} ({counts['train']} train, {counts['held_out']} held out)."
    )
    if failed:
        raise typer.Exit(1)


def _with_environment(
    project: Project,
    options: SynthOptions,
    wanted: ProjectEnvironment,
    cache: Path,
    progress: SynthProgress,
) -> SynthOptions:
    """`options` with the project's Python environment (built unless already there) and the
    install specification its tasks record."""
    progress.line(f"{project.name}: building its Python environment with pip")
    started = time.monotonic()
    root = project_environment(project, wanted, cache / ENVIRONMENTS_DIR)
    progress.line(f"{project.name}: environment {root} ({time.monotonic() - started:.0f}s)")
    return dataclasses.replace(options, python_environment=root, setup=wanted.setup)


def _with_commit(project: Project, kept, options: SynthOptions) -> Task:
    """The task, with the commit its repository will have (built once to learn it)."""
    with tempfile.TemporaryDirectory() as scratch:
        preview = to_task(project, kept, options, base_commit="")
        commit = build_buggy_repository(project, preview.metadata["bug_patch"], Path(scratch))
    return to_task(project, kept, options, base_commit=commit)


def _read_tasks(source: str | Path) -> list[Task]:
    try:
        return list(read_jsonl(taskset_path(str(source))))
    except (FileNotFoundError, ValueError) as error:
        raise fail(str(error)) from None


@app.command("materialize")
def materialize_command(
    tasks: Annotated[Path, typer.Option(help="JSONL file of tasks.")] = TASKS_FILE,
    cache: CacheOption = Path(".etude/tasks"),
    task_id: Annotated[list[str], typer.Option("--id", help="Only these tasks.")] = [],  # noqa: B006
    path: PathsOption = [],  # noqa: B006
    checkouts: CheckoutsOption = [],  # noqa: B006
    repository: RepositoryOption = [],  # noqa: B006
) -> None:
    """Build each task's single-commit repository in the cache."""
    selected = [t for t in _read_tasks(tasks) if not task_id or t.id in task_id]
    given = task_sources(selected, path, checkouts, repository)
    with task_progress(console, "materializing", len(selected)) as advance:
        for task in selected:
            try:
                materialize(task, cache, sources=given)
            except (MaterializeError, PatchError) as error:
                raise fail(str(error)) from None
            advance(task.id, "")
    console.print(f"{len(selected)} repositories in {cache}")


@app.command("list")
def list_command(
    tasks: Annotated[Path, typer.Option(help="JSONL file of tasks.")] = TASKS_FILE,
    split: Annotated[str | None, typer.Option(help="train or held_out.")] = None,
) -> None:
    """Count tasks by project, split and mutation."""
    table = Table(title=str(tasks))
    for column in ("project", "split", "tasks", "kinds"):
        table.add_column(column)
    groups: dict[tuple[str, str], list[Task]] = {}
    for task in read_jsonl(tasks):
        if split is None or task.split == split:
            key = (str(task.metadata.get("project", task.repo)), task.split)
            groups.setdefault(key, []).append(task)
    for (name, part), members in sorted(groups.items()):
        kinds = sorted({str(t.metadata.get("mutation", "")) for t in members})
        table.add_row(name, part, str(len(members)), ", ".join(kinds))
    Console().print(table)


@app.command()
def verify(
    tasks: Annotated[Path, typer.Option(help="JSONL file of tasks.")] = TASKS_FILE,
    sample: Annotated[int, typer.Option(help="Check this many, chosen by --seed (0: all).")] = 0,
    seed: Annotated[int, typer.Option(help="Chooses the sample.")] = 0,
    cache: CacheOption = Path(".etude/tasks"),
    workers: Annotated[int, typer.Option(help="Tasks checked at once.")] = os.cpu_count() or 1,
    path: PathsOption = [],  # noqa: B006
    checkouts: CheckoutsOption = [],  # noqa: B006
    repository: RepositoryOption = [],  # noqa: B006
    environment: EnvironmentOption = None,
    wheelhouse: WheelhouseOption = None,
    index_url: IndexUrlOption = None,
) -> None:
    """Check that each task's bug fails its FAIL_TO_PASS tests and its gold patch fixes them."""
    selected = _read_tasks(tasks)
    if sample:
        selected = random.Random(seed).sample(selected, min(sample, len(selected)))
    given = task_sources(selected, path, checkouts, repository)
    provisioning = task_provisioning(selected, given, environment, wheelhouse, index_url)
    failed: list[Verdict] = []
    with task_progress(console, "verifying", len(selected)) as advance:

        def on_done(verdict: Verdict) -> None:
            if not verdict.ok:
                failed.append(verdict)
            advance(verdict.task_id, "" if verdict.ok else verdict.problem)

        bwrap, sandbox = _grading_sandbox()
        try:
            asyncio.run(verify_all(
                selected, cache.resolve(), bwrap, workers, on_done=on_done, sandbox=sandbox,
                provisioning=provisioning,
            ))  # fmt: skip
        except (MaterializeError, PatchError, EnvironmentBuildError) as error:
            raise fail(str(error)) from None
    for verdict in failed:
        console.print(
            f"[red]{escape(verdict.task_id)}[/]: {escape(verdict.problem)}", highlight=False
        )
    console.print(f"{len(selected) - len(failed)} of {len(selected)} tasks verified.")
    raise typer.Exit(1 if failed else 0)


@app.command()
def grade(
    taskset: Annotated[
        str, typer.Argument(help="etude-mini, another bundled set, or a JSONL file.")
    ],
    instance_id: Annotated[str, typer.Argument(help="The task's id.")],
    patch: Annotated[Path | None, typer.Option(help="A diff file to grade.")] = None,
    gold: Annotated[bool, typer.Option("--gold", help="Grade the task's gold patch.")] = False,
    empty: Annotated[bool, typer.Option("--empty", help="Grade no change at all.")] = False,
    cache: CacheOption = Path(".etude/tasks"),
    path: PathsOption = [],  # noqa: B006
    checkouts: CheckoutsOption = [],  # noqa: B006
    repository: RepositoryOption = [],  # noqa: B006
    environment: EnvironmentOption = None,
    wheelhouse: WheelhouseOption = None,
    index_url: IndexUrlOption = None,
) -> None:
    """Grade one patch on one task as the reward service would: the score, each hidden
    test's outcome and the reward's components."""
    if sum((patch is not None, gold, empty)) != 1:
        raise fail("give exactly one of --patch FILE, --gold, --empty")
    found = [t for t in _read_tasks(taskset) if t.id == instance_id]
    if not found:
        raise fail(f"no task {instance_id!r} in {taskset}")
    task = found[0]
    if patch is not None and not patch.is_file():
        raise fail(f"{patch}: no such file")
    diff = patch.read_text() if patch is not None else task.gold_patch if gold else ""
    if gold and not diff:
        raise fail(f"{task.id} has no gold patch")
    given = task_sources([task], path, checkouts, repository)
    provisioning = task_provisioning([task], given, environment, wheelhouse, index_url)
    bwrap, sandbox = _grading_sandbox()
    config = RewardConfig(cache_dir=cache.resolve(), projects_dir=PROJECTS_DIR)
    try:
        score = asyncio.run(
            grade_patch(task, diff, config, bwrap, sandbox, provisioning=provisioning)
        )
    except (MaterializeError, PatchError, EnvironmentBuildError) as error:
        raise fail(str(error)) from None
    # Plain lines, not a table: test ids stay whole and greppable in any terminal width.
    error = f" (error: {score.error})" if score.error else ""
    typer.echo(f"{task.id}: score {score.reward:g}{error}")
    for kind, results in (
        ("FAIL_TO_PASS", score.fail_to_pass),
        ("PASS_TO_PASS", score.pass_to_pass),
    ):
        for test, passed in results.items():
            typer.echo(f"  {'passed' if passed else 'FAILED'}  {kind}  {test}")
    typer.echo("components:")
    for name, value in score.components.items():
        typer.echo(f"  {name} = {value:g}")
    raise typer.Exit(1 if score.error else 0)


@app.command()
def hints(
    taskset: Annotated[str, typer.Argument(help="etude-mini or a JSONL file.")] = "etude-mini",
    out: Annotated[Path | None, typer.Option(help="JSONL to write (default: in place).")] = None,
    cache: Annotated[Path, typer.Option(help="Where repositories go.")] = Path(".etude/tasks"),
    workers: Annotated[int, typer.Option(help="Tasks run at once.")] = os.cpu_count() or 1,
    path: PathsOption = [],  # noqa: B006
    checkouts: CheckoutsOption = [],  # noqa: B006
    repository: RepositoryOption = [],  # noqa: B006
) -> None:
    """Compute each task's hints (the first failing test's traceback, the function to fix
    and its source) into metadata.hints, for training at hint tiers 1-3."""
    source = taskset_path(taskset)
    selected = _read_tasks(source)
    given = task_sources(selected, path, checkouts, repository)
    failed: list[HintResult] = []
    started = time.perf_counter()
    with task_progress(console, "hinting", len(selected)) as advance:

        def on_done(result: HintResult) -> None:
            if result.problem:
                failed.append(result)
            advance(result.task.id, result.problem)

        bwrap, sandbox = _grading_sandbox()
        results = hint_all(
            selected, cache, bwrap, workers=workers, sandbox=sandbox, sources=given,
            on_done=on_done,
        )  # fmt: skip
    target = out or source
    write_jsonl(target, [r.task for r in results])
    for result in failed:
        console.print(f"[red]{result.task.id}[/]: {result.problem}")
    console.print(
        f"Hints for {len(selected) - len(failed)} of {len(selected)} tasks in {target} "
        f"({time.perf_counter() - started:.0f}s)."
    )
    raise typer.Exit(1 if failed else 0)
