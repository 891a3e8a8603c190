"""What `etude train` and `etude sft` show while the run driver works: each phase with the
trainer's progress line (SFT steps with loss and ETA, evaluation episodes, weight publishes),
the RL steps (step, reward, pass rate, tokens/s, staleness, policy version), all read from the
run registry, and the summary table at the end (stderr for progress, stdout for the table).

On a terminal, a phase is a spinner and the RL steps a progress bar. Off one (CI logs,
`make run > log`), where a spinner shows nothing until it ends, each change is a line of its
own with the time of day, so a log shows a long run is alive and how far it has got.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from etude.common.runs import RunRecord

console = Console(stderr=True)


class TerminalView:
    """The run driver's `RunView` on the terminal, or on a log when stderr is not one."""

    def __init__(self, out: Console | None = None) -> None:
        self.out = out or console

    @contextlib.contextmanager
    def phase(self, text: str) -> Iterator[Callable[[RunRecord], None]]:
        if self.out.is_terminal:
            with self.out.status(text) as status:
                yield lambda record: status.update(f"{text} {record.progress}".rstrip())
            return
        started = time.monotonic()
        self._line(text)
        yield self._changes(lambda record: record.progress)
        self._line(f"{text.rstrip('…')}: done in {_duration(time.monotonic() - started)}")

    def engines(self, addresses: Sequence[str]) -> None:
        self.out.print(f"Inference engines: {', '.join(addresses)}")

    def policy_saved(self, path: str) -> None:
        self.out.print(f"SFT policy saved to [bold]{path}[/]")

    @contextlib.contextmanager
    def rl(self, steps: int) -> Iterator[Callable[[RunRecord], None]]:
        if not self.out.is_terminal:
            step_line = self._changes(
                lambda r: f"RL step {r.step}/{steps}: {_rl(r)}" if r.metrics else ""
            )
            progress_line = self._changes(lambda record: record.progress)
            yield lambda record: (step_line(record), progress_line(record))
            return
        columns = (
            TextColumn("[bold]RL[/]"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
            TextColumn("{task.description}"), TimeElapsedColumn(),
        )  # fmt: skip
        with Progress(*columns, console=self.out) as progress:
            bar = progress.add_task("waiting for the first groups…", total=steps)

            def show(record: RunRecord) -> None:
                if record.metrics:
                    progress.update(bar, completed=record.step, description=_rl(record))

            yield show

    def _changes(self, line_of: Callable[[RunRecord], str]) -> Callable[[RunRecord], None]:
        """Prints `line_of(record)` when it is new and not empty."""
        last = ""

        def show(record: RunRecord) -> None:
            nonlocal last
            line = line_of(record)
            if line and line != last:
                last = line
                self._line(f"  {line}")

        return show

    def _line(self, text: str) -> None:
        self.out.print(f"{time.strftime('%H:%M:%S')} {text}", highlight=False, soft_wrap=True)

    def summary(self, run_id: str, summary: dict[str, Any], output_dir: Path) -> None:
        table = Table(title=f"Run {run_id}")
        table.add_column("")
        table.add_column("value")
        before, after = summary.get("eval_before") or {}, summary.get("eval_after") or {}
        rows = [
            ("RL steps", summary.get("steps")),
            ("demonstrations (SFT)", summary.get("demonstrations")),
            ("SFT loss first → last",
             _pair(summary.get("sft_first_loss"), summary.get("sft_final_loss"))),
            ("SFT held-out loss first → last",
             _pair(summary.get("sft_held_out_first_nll"), summary.get("sft_held_out_final_nll"))),
            ("training reward, first → last quarter of the steps",
             _pair(summary.get("train_reward_first"), summary.get("train_reward_last"))),
        ]  # fmt: skip
        for tier, first in (before.get("by_tier") or {}).items():
            last = (after.get("by_tier") or {}).get(tier, {})
            rows.append((f"held-out pass@1, tier {tier}, before → after", _counts(first, last)))
        for key in BEHAVIOUR_SHOWN:
            first, last = before.get("behaviour", {}), after.get("behaviour", {})
            rows.append((f"held-out {key.replace('_', ' ')}", _pair(first.get(key), last.get(key))))
        rows.append(("output", str(output_dir)))
        for name, value in rows:
            table.add_row(name, "—" if value is None else str(value))
        Console().print(table)


# Eval behaviour the summary shows before → after (all of it is in metrics.jsonl).
BEHAVIOUR_SHOWN = (
    "turns_per_episode", "tool_calls_per_turn", "parallel_share", "reads_before_first_edit",
    "blind_edit_rate", "malformed_rate", "finish_submitted",
)  # fmt: skip


def _counts(first: dict, last: dict) -> str | None:
    """`3/40 (0.03–0.20) → 9/40 (0.12–0.38)`: passes / episodes with the 95% interval."""
    if not first or not last:
        return None
    return " → ".join(
        f"{e['passed']}/{e['episodes']} ({e['ci_low']:.2f}–{e['ci_high']:.2f})"
        for e in (first, last)
    )


def _rl(record: RunRecord) -> str:
    m = record.metrics
    return (
        f"reward {m['reward_mean']:.2f}  pass {m['pass_rate']:.2f}  "
        f"{m['tokens_per_second']:.0f} tok/s  staleness {m['staleness_mean']:.1f}  "
        f"v{record.policy_version}"
    )


def _duration(seconds: float) -> str:
    return f"{seconds / 60:.1f} min" if seconds >= 90 else f"{seconds:.0f} s"


def _pair(first: float | None, last: float | None) -> str | None:
    if first is None or last is None:
        return None
    return f"{first:.3f} → {last:.3f}"
