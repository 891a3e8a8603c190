"""What `etude train` shows off a terminal (a CI log, `make run > log`): a line per change,
with the time of day, where a spinner or a progress bar would show nothing until the end."""

from __future__ import annotations

import io
import re

from rich.console import Console

from etude.cli.run_view import TerminalView
from etude.common.runs import RunRecord

RL_METRICS = {"reward_mean": 0.5, "pass_rate": 0.25, "tokens_per_second": 150.0,
              "staleness_mean": 0.0}  # fmt: skip


def record(progress: str = "", step: int = 0, metrics: dict | None = None) -> RunRecord:
    return RunRecord(
        run_id="r", name="r", config={}, status="running", created_ms=0, updated_ms=0,
        step=step, policy_version=step + 1, metrics=metrics or {}, progress=progress,
    )  # fmt: skip


def off_a_terminal() -> tuple[TerminalView, io.StringIO]:
    log = io.StringIO()
    return TerminalView(Console(file=log, force_terminal=False, width=100)), log


def lines(log: io.StringIO) -> list[str]:
    text = log.getvalue().splitlines()
    assert all(re.match(r"\d\d:\d\d:\d\d ", line) for line in text), text
    return [line[9:] for line in text]


def test_a_phase_prints_each_new_progress_line_once_and_how_long_it_took():
    view, log = off_a_terminal()
    with view.phase("Warm start (SFT on scripted demonstrations)…") as show:
        for progress in ("", "SFT step 1/3: loss 1.20", "SFT step 1/3: loss 1.20",
                         "SFT step 3/3: loss 0.40"):  # fmt: skip
            show(record(progress))
    assert lines(log) == [
        "Warm start (SFT on scripted demonstrations)…",
        "  SFT step 1/3: loss 1.20",
        "  SFT step 3/3: loss 0.40",
        "Warm start (SFT on scripted demonstrations): done in 0 s",
    ]


def test_rl_prints_a_line_per_step_and_the_publishes():
    view, log = off_a_terminal()
    with view.rl(2) as show:
        show(record())  # waiting for the first groups: nothing to say yet
        show(record("weights v2 published in 0.4 s", 1, RL_METRICS))
        show(record("weights v2 published in 0.4 s", 1, RL_METRICS))
        show(record("weights v3 published in 0.5 s", 2, RL_METRICS))
    assert lines(log) == [
        "  RL step 1/2: reward 0.50  pass 0.25  150 tok/s  staleness 0.0  v2",
        "  weights v2 published in 0.4 s",
        "  RL step 2/2: reward 0.50  pass 0.25  150 tok/s  staleness 0.0  v3",
        "  weights v3 published in 0.5 s",
    ]


def test_on_a_terminal_a_phase_is_one_spinner_line_not_a_log():
    log = io.StringIO()
    view = TerminalView(Console(file=log, force_terminal=True, width=100))
    with view.phase("Held-out pass@1 before RL…") as show:
        show(record("held-out pass@1 before RL (tier 3): episode 4/8: 1 passed"))
    assert "done in" not in log.getvalue()
