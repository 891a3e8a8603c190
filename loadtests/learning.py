"""Does the policy learn? One whole training run through `etude train` (the README's path):
the local stack, the SFT warm start (reused from the cache when `make run` built it), held-out
pass@1 before RL, GRPO steps, held-out pass@1 after — at the tier the run trains on and at
tier 0, several sampled episodes per held-out task, with 95% Wilson intervals. The behaviour
of the policy (parallel batches, blind edits, malformed calls) is read from the first and the
last quarter of the RL steps.

    python loadtests/learning.py --json out.json          # the full run (≤ 2 h on 2 cores)
    python loadtests/learning.py --quick --json out.json  # a smoke of the same path

With `--json out.json` the run's curve goes to out.png: training reward and pass rate per
step, held-out pass@1 before and after at each tier with its 95% interval.

`--quick` runs the same command on the 11 M `tiny` preset with a handful of tasks and steps,
so it finishes in about a minute; its figures check the path, not learning.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchlib import argument_parser, metric, print_metrics, write_json

REPOSITORY = Path(__file__).resolve().parents[1]
CONFIG = REPOSITORY / "configs" / "locate-smollm2.yaml"
# Held-out episodes per evaluation and tier: the task set's 22 held-out tasks × 8 samples.
FULL = {"tasks.eval_samples": 8, "tasks.eval_temperature": 1.0, "trainer.steps": 20}
QUICK = {
    "policy.init": "tiny", "policy.serve_with": "torch", "tasks.train_limit": 2,
    "tasks.eval_limit": 1, "tasks.eval_samples": 1, "tasks.hint_tier": 3, "sft.steps": 2,
    "sft.cache_dir": None, "sft.trainable_layers": None, "sft.held_out_fraction": 0.0,
    "rollout.group_size": 2, "rollout.groups_per_step": 1, "rollout.max_new_tokens": 32,
    "trainer.steps": 1, "trainer.trainable_layers": None,
}  # fmt: skip
BEHAVIOUR = ("parallel_share", "blind_edit_rate", "malformed_rate")


def train(
    overrides: dict, output_dir: Path, run_dir: Path, plot: Path | None
) -> tuple[dict, list[dict], float]:
    """Run `etude train`; its summary.json, its metrics.jsonl records and the wall time. The
    run's curve (training reward, held-out pass@1 with intervals) is copied to `plot`."""
    command = [sys.executable, "-m", "etude.cli", "train", str(CONFIG),
               "--run-dir", str(run_dir), "--set", f"output_dir={output_dir}"]  # fmt: skip
    for key, value in overrides.items():
        command += ["--set", f"{key}={'null' if value is None else json.dumps(value)}"]
    started = time.perf_counter()
    subprocess.run(command, cwd=REPOSITORY, check=True, env=os.environ.copy())
    wall = time.perf_counter() - started
    [run] = [d for d in output_dir.iterdir() if d.is_dir()]
    summary = json.loads((run / "summary.json").read_text())
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    if plot is not None:
        shutil.copyfile(run / "reward_curve.png", plot)
    return summary, records, wall


def quarter_means(records: list[dict], key: str) -> tuple[float, float]:
    """Mean of `key` over the first and over the last quarter of the RL steps (≥ 1 step)."""
    values = [r[key] for r in records if r["phase"] == "rl" and key in r]
    if not values:
        return float("nan"), float("nan")
    k = max(1, len(values) // 4)
    return sum(values[:k]) / k, sum(values[-k:]) / k


def figures(summary: dict, records: list[dict], wall: float) -> dict:
    before, after = summary["eval_before"], summary["eval_after"]
    tier = str(before["tier"])
    b, a = before["by_tier"][tier], after["by_tier"][tier]
    out = {
        "pass1_before": metric(b["pass_at_1"], f"share of {b['episodes']} episodes"),
        "pass1_after": metric(a["pass_at_1"], f"share of {a['episodes']} episodes",
                              target=round(b["pass_at_1"] + 0.10, 4)),
        "pass1_ci_low_after": metric(a["ci_low"], "share", target=round(b["ci_high"], 4)),
        "pass1_ci_high_before": metric(b["ci_high"], "share"),
        "train_reward_first": metric(summary.get("train_reward_first", float("nan")), "reward"),
        "train_reward_last": metric(summary.get("train_reward_last", float("nan")), "reward",
                                    target=round(summary.get("train_reward_first", 0) + 0.2, 4)),
    }  # fmt: skip
    for key in BEHAVIOUR:
        first, last = quarter_means(records, key)
        out[f"{key}_first"] = metric(first, "share")
        out[f"{key}_last"] = metric(last, "share")
    for other, b0 in before["by_tier"].items():
        if other != tier:
            a0 = after["by_tier"][other]
            out[f"pass1_before_tier{other}"] = metric(b0["pass_at_1"], "share")
            out[f"pass1_after_tier{other}"] = metric(a0["pass_at_1"], "share")
    out["wall_s"] = metric(wall, "s")
    return out


def main() -> None:
    args = argument_parser(__doc__).parse_args()
    overrides = dict(QUICK if args.quick else FULL)
    tier = overrides.get("tasks.hint_tier", 3)
    overrides["tasks.eval_tiers"] = [tier] if args.quick else [tier, 0]
    with tempfile.TemporaryDirectory(prefix="etude-learning-") as scratch:
        plot = Path(args.json).with_suffix(".png") if args.json else None
        summary, records, wall = train(
            overrides, Path(scratch) / "runs", Path(scratch) / "stack", plot
        )
    results = figures(summary, records, wall)
    print_metrics("learning" + (" (quick: the path, not learning)" if args.quick else ""), results)
    write_json(args.json, "learning", results, quick=args.quick,
               sft_reused=bool(summary.get("sft_from_cache")))  # fmt: skip


if __name__ == "__main__":
    main()
