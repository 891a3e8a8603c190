"""`etude tasks …`: synthesize, materialize and list tasks."""

from __future__ import annotations

import asyncio
import os
import random
import tarfile
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from etude.reward.verify import Verdict, verify_all
from etude.sandbox.bwrap import Bwrap, configured_bwrap
from etude.sandbox.config import SandboxConfig, SandboxSettings
from etude.tasks.hinting import HintResult, hint_all
from etude.tasks.materialize import (
    HELD_OUT_PROJECTS,
    PROJECTS_DIR,
    TASKS_FILE,
    build_buggy_repository,
    materialize,
)
from etude.tasks.synth.synthesize import (
    Project,
    SynthOptions,
    kept_mutants,
    load_project,
    to_task,
)
from etude.tasks.task import Task, read_jsonl, write_jsonl
from etude.tasks.taskset import taskset_path

app = typer.Typer(help="Coding tasks: synthesize them, build their repositories, list them.")
console = Console(stderr=True)

HELD_OUT = HELD_OUT_PROJECTS


def _projects(names: list[str], paths: list[Path]) -> list[Project]:
    projects = []
    if not names and not paths:
        names = sorted(p.name for p in PROJECTS_DIR.iterdir() if (p / "tests").is_dir())
    for name in names:
        projects.append(load_project(PROJECTS_DIR / name, name))
    for path in paths:
        projects.append(load_project(_unpacked(path)))
    return projects


def _unpacked(path: Path) -> Path:
    """A project directory, or an sdist (.tar.gz / .zip) unpacked to a temporary one."""
    if path.is_dir():
        return path
    scratch = Path(tempfile.mkdtemp(prefix="etude-sdist-"))
    if path.name.endswith((".tar.gz", ".tgz")):
        with tarfile.open(path) as archive:
            archive.extractall(scratch, filter="data")
    elif path.suffix == ".zip":
        with zipfile.ZipFile(path) as archive:
            archive.extractall(scratch)
    else:
        raise typer.BadParameter(f"{path}: not a directory, .tar.gz or .zip")
    roots = [p for p in scratch.iterdir() if p.is_dir()]
    return roots[0] if len(roots) == 1 else scratch


def _grading_sandbox() -> tuple[Bwrap | None, SandboxConfig]:
    """The sandbox the reward service grades in, from the same settings
    (`ETUDE_SANDBOX__*`), so a task passes or fails here as it will in grading."""
    sandbox = SandboxSettings().sandbox.for_grading()
    return configured_bwrap(sandbox), sandbox


def _bar_columns(counter: str = "failed") -> tuple:
    return (
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn(f"{counter} {{task.fields[tried]}}"), TimeElapsedColumn(),
    )  # fmt: skip


@app.command()
def synth(
    project: Annotated[list[str], typer.Option(help="A bundled etude-mini project.")] = [],  # noqa: B006
    path: Annotated[list[Path], typer.Option(help="A project directory or sdist.")] = [],  # noqa: B006
    out: Annotated[Path, typer.Option(help="JSONL file to write.")] = TASKS_FILE,
    per_project: Annotated[int, typer.Option(help="Tasks kept per project.")] = 20,
    max_failing: Annotated[int, typer.Option(help="Most tests a kept bug may fail.")] = 8,
    seed: Annotated[int, typer.Option(help="Fixes which mutations are tried first.")] = 0,
    timeout: Annotated[float, typer.Option(help="Seconds a mutant's suite may run.")] = 15.0,
    workers: Annotated[int, typer.Option(help="Suites run at once.")] = os.cpu_count() or 1,
) -> None:
    """Mutate projects, keep bugs their tests catch, write SWE-bench-style records."""
    options = SynthOptions(seed, per_project, max_failing, timeout, workers, HELD_OUT)
    bwrap, sandbox = _grading_sandbox()
    tasks: list[Task] = []
    with Progress(*_bar_columns("tried"), console=console) as progress:
        for item in _projects(project, path):
            bar = progress.add_task(item.name, total=per_project, tried=0)

            def on_tried(tried: int, kept: int, bar=bar) -> None:
                progress.update(bar, completed=kept, tried=tried)

            for kept in kept_mutants(item, options, bwrap, on_tried, sandbox):
                with tempfile.TemporaryDirectory() as scratch:
                    preview = to_task(item, kept, options, base_commit="")
                    commit = build_buggy_repository(
                        item, preview.metadata["bug_patch"], Path(scratch)
                    )
                tasks.append(to_task(item, kept, options, base_commit=commit))
    out.parent.mkdir(parents=True, exist_ok=True)
    count = write_jsonl(out, tasks)
    held_out = sum(t.split == "held_out" for t in tasks)
    console.print(f"Wrote {count} tasks to {out} ({count - held_out} train, {held_out} held out).")


@app.command("materialize")
def materialize_command(
    tasks: Annotated[Path, typer.Option(help="JSONL file of tasks.")] = TASKS_FILE,
    cache: Annotated[Path, typer.Option(help="Where repositories go.")] = Path(".etude/tasks"),
    checkouts: Annotated[Path | None, typer.Option(help="Checkouts for SWE-bench tasks.")] = None,
    task_id: Annotated[list[str], typer.Option("--id", help="Only these tasks.")] = [],  # noqa: B006
) -> None:
    """Build each task's single-commit repository in the cache."""
    selected = [t for t in read_jsonl(tasks) if not task_id or t.id in task_id]
    with Progress(console=console) as progress:
        for task in progress.track(selected, description="materializing"):
            materialize(task, cache, checkouts_dir=checkouts)
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
    cache: Annotated[Path, typer.Option(help="Where repositories go.")] = Path(".etude/tasks"),
    workers: Annotated[int, typer.Option(help="Tasks checked at once.")] = os.cpu_count() or 1,
) -> None:
    """Check that each task's bug fails its FAIL_TO_PASS tests and its gold patch fixes them."""
    selected = list(read_jsonl(tasks))
    if sample:
        selected = random.Random(seed).sample(selected, min(sample, len(selected)))
    failed: list[Verdict] = []
    with Progress(*_bar_columns(), console=console) as progress:
        bar = progress.add_task("verifying", total=len(selected), tried=0)

        def on_done(verdict: Verdict) -> None:
            if not verdict.ok:
                failed.append(verdict)
            progress.update(bar, advance=1, tried=len(failed))

        bwrap, sandbox = _grading_sandbox()
        asyncio.run(verify_all(selected, cache, bwrap, workers, on_done=on_done, sandbox=sandbox))
    for verdict in failed:
        console.print(f"[red]{verdict.task_id}[/]: {verdict.problem}")
    console.print(f"{len(selected) - len(failed)} of {len(selected)} tasks verified.")
    raise typer.Exit(1 if failed else 0)


@app.command()
def hints(
    taskset: Annotated[str, typer.Argument(help="etude-mini or a JSONL file.")] = "etude-mini",
    out: Annotated[Path | None, typer.Option(help="JSONL to write (default: in place).")] = None,
    cache: Annotated[Path, typer.Option(help="Where repositories go.")] = Path(".etude/tasks"),
    checkouts: Annotated[Path | None, typer.Option(help="Checkouts for SWE-bench tasks.")] = None,
    workers: Annotated[int, typer.Option(help="Tasks run at once.")] = os.cpu_count() or 1,
) -> None:
    """Compute each task's hints (the first failing test's traceback, the function to fix
    and its source) into metadata.hints, for training at hint tiers 1-3."""
    source = taskset_path(taskset)
    selected = list(read_jsonl(source))
    failed: list[HintResult] = []
    started = time.perf_counter()
    with Progress(*_bar_columns(), console=console) as progress:
        bar = progress.add_task("hinting", total=len(selected), tried=0)

        def on_done(result: HintResult) -> None:
            if result.problem:
                failed.append(result)
            progress.update(bar, advance=1, tried=len(failed))

        bwrap, sandbox = _grading_sandbox()
        results = hint_all(
            selected, cache, bwrap, workers=workers, checkouts_dir=checkouts, sandbox=sandbox,
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
