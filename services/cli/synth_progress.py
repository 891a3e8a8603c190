"""How `etude tasks synth` reports its progress.

On a terminal a bar per project; elsewhere (a log file, CI, a pipe) plain lines.
"""

from __future__ import annotations

import time

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from etude.tasks.synth.synthesize import Baseline, Project


def bar_columns(counter: str = "failed") -> tuple:
    return (
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn(f"{counter} {{task.fields[tried]}}"), TimeElapsedColumn(),
    )  # fmt: skip


class SynthProgress:
    """A bar per project on a terminal; elsewhere (a log file, CI, a pipe) plain lines: the
    baseline, a line per kept task and one every `every_s` seconds while trying."""

    def __init__(self, console: Console, wanted: int, every_s: float = 30.0) -> None:
        self.console, self.wanted, self.every_s = console, wanted, every_s
        self.bar = Progress(*bar_columns("tried"), console=console) if console.is_terminal else None

    def __enter__(self) -> SynthProgress:
        if self.bar is not None:
            self.bar.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.__exit__(*exc)

    def line(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False)

    def project(
        self, project: Project, baseline: Baseline, total: int, project_uses_environment: bool
    ):
        """The callback `kept_mutants` reports each tried mutant to."""
        self.line(
            f"{project.name}: {len(baseline.passing)} tests pass unmutated "
            f"({baseline.run.seconds:.1f}s), {len(baseline.left_out)} left out; "
            f"{total} candidate mutations, up to {baseline.mutant_timeout_s:.0f}s each"
        )
        # Skips are routine (an optional dependency, another platform); failures and modules
        # that do not import are worth seeing one by one.
        skipped = sum(why == "skipped" for why in baseline.left_out.values())
        if skipped:
            self.line(f"{project.name}: left out {skipped} skipped or xfailed tests")
        shown = [(t, why) for t, why in baseline.left_out.items() if why != "skipped"]
        for test, why in shown[:10]:
            self.line(f"{project.name}: left out {test}: {why.splitlines()[0][:200]}")
        if len(shown) > 10:
            self.line(f"{project.name}: left out {len(shown) - 10} more")
        if missing := baseline.missing_modules:
            # A dependency the suite's Python lacks: those tests make no tasks, and the
            # code only they import is mutated in vain.
            named = ", ".join(f"{m} ({n} modules)" for m, n in sorted(missing.items()))
            where = (
                "its environment lacks them: add --requirements FILE or --pip-package SPEC"
                if project_uses_environment
                else "give it an environment: --environment, --wheelhouse DIR or --index-url "
                "URL, with --requirements FILE for its test dependencies"
            )
            self.line(f"{project.name}: test modules need what is not installed: {named}; "
                      f"{where}")  # fmt: skip
        for note in project.suite.notes:
            self.line(f"{project.name}: {note}")
        started = last = time.monotonic()
        bar = self.bar.add_task(project.name, total=self.wanted, tried=0) if self.bar else None

        def on_tried(tried: int, kept: int, timed_out: int) -> None:
            nonlocal last
            if self.bar is not None:
                self.bar.update(bar, completed=kept, tried=tried)
            elif time.monotonic() - last >= self.every_s or tried == total:
                last = time.monotonic()
                # Many timeouts mean a busy machine or a slow suite, not bad mutants.
                slow = f", {timed_out} ran past the time limit" if timed_out else ""
                self.line(
                    f"{project.name}: tried {tried} of {total}, kept {kept} of {self.wanted}"
                    f"{slow} ({last - started:.0f}s)"
                )
            self.tally = (tried, kept, timed_out)

        self.tally, self.total = (0, 0, 0), total
        return on_tried

    def done(self, project: Project) -> None:
        tried, kept, timed_out = self.tally
        slow = (
            f"; {timed_out} ran past the time limit (a busy machine? raise --timeout)"
            if timed_out > tried // 4
            else ""
        )
        name = project.name
        self.line(f"{name}: kept {kept} of {self.wanted}, tried {tried} of {self.total}{slow}")
