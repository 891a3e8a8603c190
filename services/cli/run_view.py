"""What `etude train` and `etude sft` show while the run driver works: each phase as a
spinner, the RL steps as a progress bar (step, reward, pass rate, tokens/s, staleness, policy
version, read from the run registry), and the summary table at the end (stderr for the
spinners and the bar, stdout for the table)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from etude.common.runs import RunRecord

console = Console(stderr=True)


class TerminalView:
    """The run driver's `RunView` on the terminal."""

    def phase(self, text: str) -> contextlib.AbstractContextManager[object]:
        return console.status(text)

    def engines(self, addresses: Sequence[str]) -> None:
        console.print(f"Inference engines: {', '.join(addresses)}")

    def policy_saved(self, path: str) -> None:
        console.print(f"SFT policy saved to [bold]{path}[/]")

    @contextlib.contextmanager
    def rl(self, steps: int) -> Iterator[Callable[[RunRecord], None]]:
        columns = (
            TextColumn("[bold]RL[/]"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
            TextColumn("{task.description}"), TimeElapsedColumn(),
        )  # fmt: skip
        with Progress(*columns, console=console) as progress:
            bar = progress.add_task("waiting for the first groups…", total=steps)

            def show(record: RunRecord) -> None:
                if m := record.metrics:
                    progress.update(bar, completed=record.step, description=(
                        f"reward {m['reward_mean']:.2f}  pass {m['pass_rate']:.2f}  "
                        f"{m['tokens_per_second']:.0f} tok/s  staleness {m['staleness_mean']:.1f}"
                        f"  v{record.policy_version}"))  # fmt: skip

            yield show

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


def _pair(first: float | None, last: float | None) -> str | None:
    if first is None or last is None:
        return None
    return f"{first:.3f} → {last:.3f}"
