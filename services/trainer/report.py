"""Where a run's numbers go: one JSON line per step (metrics.jsonl), the experiment trackers
(etude.trainer.trackers: TensorBoard scalars, MLflow, W&B), the run registry (what
`etude runs show` and the gateway report), Prometheus gauges, and at the end a summary
(summary.json) and the reward curve (reward_curve.png)."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from etude.common.intervals import wilson_interval
from etude.common.run_config import RunConfig
from etude.common.run_metrics import METRICS_FILE, read_metrics
from etude.rollout.types import FINISH_PREFIX
from etude.trainer import metrics
from etude.trainer.trackers import TensorBoardTracker, Tracker


class Reporter:
    def __init__(
        self, output_dir: Path, tensorboard: bool = True, trackers: Sequence[Tracker] | None = None
    ) -> None:
        """`trackers` get every step's metrics and the summary (`open_trackers` starts those
        of a run config); None: TensorBoard alone, or none with `tensorboard=False`."""
        output_dir.mkdir(parents=True, exist_ok=True)
        self.output_dir = output_dir
        self.metrics_path = output_dir / METRICS_FILE
        if trackers is None:
            trackers = [TensorBoardTracker(output_dir)] if tensorboard else []
        self.trackers = list(trackers)

    def log(self, step: int, values: dict[str, float], phase: str = "rl") -> None:
        record = {"phase": phase, "step": step, "time": time.time(), **values}
        with self.metrics_path.open("a") as out:
            out.write(json.dumps(record) + "\n")
        for tracker in self.trackers:
            tracker.log(step, values, phase)
        if phase == "rl":
            _export(values)

    def abandon(self) -> None:
        """The run ends without a summary (failed, stopped): the trackers record it so,
        rather than leaving it running forever. Nothing after `finish`."""
        self._close_trackers({}, failed=True)

    def _close_trackers(self, summary: dict[str, Any], failed: bool) -> None:
        trackers, self.trackers = self.trackers, []
        for tracker in trackers:
            tracker.close(summary, failed=failed)

    def history(self, phase: str = "rl") -> list[dict[str, Any]]:
        return [r for r in read_metrics(self.output_dir) if r["phase"] == phase]

    def finish(self, summary: dict[str, Any]) -> Path:
        (self.output_dir / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
        self._close_trackers(summary, failed=False)
        curve = self.output_dir / "reward_curve.png"
        return plot_reward_curve(self.history(), curve, held_out_points(summary))


VERSIONED_PACKAGES = ("etude", "torch", "transformers", "vllm", "triton", "grpcio", "redis")


def write_run_snapshot(output_dir: Path, config: RunConfig) -> None:
    """What the run ran with, beside its results: the config as loaded (`config.yaml`, every
    default filled in) and the versions of Python and the packages that shape its numbers
    (`versions.json`). A resumed run rewrites them."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    document = config.model_dump(mode="json")
    (output_dir / "config.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    versions = {"python": platform.python_version(), "platform": platform.platform()}
    for package in VERSIONED_PACKAGES:
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            continue
    (output_dir / "versions.json").write_text(json.dumps(versions, indent=1) + "\n")


def held_out_points(summary: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary's held-out evaluations as points of the curve: before RL at step 0, after
    it at the run's last step (`steps`), one series per tier, each with its pass@1 and 95%
    interval."""
    points = []
    for label, step in (("eval_before", 0), ("eval_after", summary.get("steps") or 0)):
        for tier, e in ((summary.get(label) or {}).get("by_tier") or {}).items():
            points.append({"tier": str(tier), "step": step, "pass": e["pass_at_1"],
                           "low": e["ci_low"], "high": e["ci_high"]})  # fmt: skip
    return points


def _export(values: dict[str, float]) -> None:
    gauges = {
        "policy_version": metrics.POLICY_VERSION, "step": metrics.STEP, "loss": metrics.LOSS,
        "reward_mean": metrics.REWARD_MEAN, "pass_rate": metrics.PASS_RATE,
        "mismatch_kl": metrics.MISMATCH_KL, "grad_norm": metrics.GRAD_NORM,
        "tokens_per_second": metrics.TOKENS_PER_SECOND,
    }  # fmt: skip
    for key, gauge in gauges.items():
        if key in values:
            gauge.set(values[key])
    histograms = {
        "step_seconds": metrics.STEP_SECONDS, "weight_sync_seconds": metrics.WEIGHT_SYNC_SECONDS,
        "wait_seconds": metrics.WAIT_SECONDS,
    }  # fmt: skip
    for key, histogram in histograms.items():
        if key in values:
            histogram.observe(values[key])
    _export_behaviour(values)


def _export_behaviour(values: dict[str, float]) -> None:
    """The behaviour summary's gauges. A step that reports behaviour (every summary of a
    non-empty batch has `turns_per_episode`) sets all of them: a ratio it left out for want
    of a denominator reads NaN, a gap on the dashboard rather than the last step's value."""
    if "turns_per_episode" not in values:
        return
    for key, gauge in metrics.BEHAVIOUR.items():
        gauge.set(values.get(key, math.nan))
    for key, value in values.items():
        if key.startswith(FINISH_PREFIX):
            metrics.FINISH_SHARE.labels(key.removeprefix(FINISH_PREFIX)).set(value)


def plot_reward_curve(
    history: list[dict[str, Any]], path: Path, held_out: list[dict[str, Any]] = ()
) -> Path:
    """`reward_curve_figure` as a PNG at `path`."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure = reward_curve_figure(history, held_out)
    figure.savefig(path, bbox_inches="tight")  # the axis labels whole
    plt.close(figure)
    return path


def reward_curve_figure(history: list[dict[str, Any]], held_out: list[dict[str, Any]] = ()):
    """Two panels, so neither curve hides the other (both sit at 0 before anything is
    learned): the training reward per RL step, mean ± one standard deviation over the
    step's rollouts; the pass rate with its 95% interval over those rollouts, and held-out
    pass@1 (`held_out_points`) before and after RL with theirs — whether a gain is beyond
    the noise."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    steps = [r["step"] for r in history]
    figure, (rewards, passes) = plt.subplots(2, 1, figsize=(6, 5.5), dpi=100, sharex=True)
    mean = [r["reward_mean"] for r in history]
    spread = [r.get("reward_std", 0.0) for r in history]
    rewards.plot(steps, mean, marker="o", color="C0", label="mean reward")
    rewards.fill_between(
        steps, [m - s for m, s in zip(mean, spread, strict=True)],
        [m + s for m, s in zip(mean, spread, strict=True)],
        color="C0", alpha=0.2, label="± 1 std over rollouts",
    )  # fmt: skip
    rewards.set_ylabel("reward")
    rewards.set_title("Training reward and pass rate per RL step")

    rate = [r["pass_rate"] for r in history]
    counts = [int(r.get("sequences", 0)) for r in history]  # rollouts the rate is over
    intervals = [
        wilson_interval(round(p * n), n) if n else (p, p) for p, n in zip(rate, counts, strict=True)
    ]
    passes.plot(steps, rate, marker="s", color="C1", label="pass rate (training rollouts)")
    passes.fill_between(steps, [low for low, _ in intervals], [high for _, high in intervals],
                        color="C1", alpha=0.2, label="95% interval")  # fmt: skip
    for colour, tier in enumerate(sorted({p["tier"] for p in held_out}), start=2):
        series = [p for p in held_out if p["tier"] == tier]
        values = [p["pass"] for p in series]
        passes.errorbar(
            [p["step"] for p in series], values, capsize=4, marker="D", linestyle="--",
            color=f"C{colour}",
            yerr=[[max(0.0, v - p["low"]) for v, p in zip(values, series, strict=True)],
                  [max(0.0, p["high"] - v) for v, p in zip(values, series, strict=True)]],
            label=f"held-out pass@1, tier {tier} (95% CI)",
        )  # fmt: skip
    passes.set_ylim(-0.05, 1.05)
    passes.set_ylabel("pass rate")
    passes.set_xlabel("RL step")
    passes.xaxis.set_major_locator(MaxNLocator(integer=True))
    for axis in (rewards, passes):
        axis.grid(alpha=0.3)
        axis.legend(loc="upper left", fontsize="small")
    figure.tight_layout()
    return figure
