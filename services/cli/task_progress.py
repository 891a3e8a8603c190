"""Progress over a list of tasks (`etude tasks verify`, `hints`, `materialize`): a bar on a
terminal; elsewhere (a log file, CI, a pipe) a line per task as it finishes, since a bar
written to a file shows nothing until the end."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

from rich.console import Console
from rich.progress import Progress

from etude.cli.synth_progress import bar_columns

Advance = Callable[[str, str], None]
"""advance(task_id, problem): one task finished; problem empty when it went well."""


@contextlib.contextmanager
def task_progress(console: Console, verb: str, total: int) -> Iterator[Advance]:
    failed = 0
    if console.is_terminal:
        with Progress(*bar_columns(), console=console) as progress:
            bar = progress.add_task(verb, total=total, tried=0)

            def advance_bar(task_id: str, problem: str) -> None:
                nonlocal failed
                failed += bool(problem)
                progress.update(bar, advance=1, tried=failed)

            yield advance_bar
        return
    done = 0

    def advance_line(task_id: str, problem: str) -> None:
        nonlocal done
        done += 1
        outcome = f"failed: {problem.splitlines()[0][:200]}" if problem else "ok"
        console.print(f"{verb} {done}/{total} {task_id}: {outcome}", markup=False, highlight=False)

    yield advance_line
