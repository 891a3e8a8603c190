"""`etude train` as a user runs it (a real subprocess, the whole local stack): on the Ray
path, resumed from its checkpoint, and a run started and stopped through the gateway of a
running `etude up`."""

from __future__ import annotations

import json
import os
import re
import struct
import time
from pathlib import Path

import pytest
import yaml

from tests.cli.test_cli_integration import ETUDE, REPO_ROOT, etude, running_stack  # noqa: F401

pytestmark = pytest.mark.integration

# The smallest run that still has every phase: SFT, pass@1 before, RL steps, pass@1 after.
SMALL_RUN = {
    "name": "smoke",
    "tasks": {"train_limit": 2, "eval_limit": 1, "hint_tier": 3},  # two-turn episodes
    "sft": {"steps": 2, "batch_size": 2},
    "rollout": {"group_size": 2, "groups_per_step": 1, "over_provision": 0, "max_turns": 2,
                "max_new_tokens": 32, "max_episode_tokens": 2048, "concurrency": 4},
    "trainer": {"steps": 2, "micro_batch": 2},
}  # fmt: skip


def write_config(tmp_path: Path, **changes) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({**SMALL_RUN, "output_dir": str(tmp_path / "out"), **changes}))
    return path


def png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", header[16:24])


def test_train_with_ray_runs_every_phase_and_writes_its_outputs(tmp_path):
    config = write_config(tmp_path)
    # A relative run directory, as `make run`'s default `.etude` is: the task repositories
    # under it must still reach the environment service as absolute paths.
    stack = Path(os.path.relpath(tmp_path / "stack", REPO_ROOT))
    done = etude("train", str(config), "--ray", run_dir=stack, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    [out] = list((tmp_path / "out").iterdir())
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines if r["phase"] == "sft"] == [1, 2]
    rl = [r for r in lines if r["phase"] == "rl"]
    assert [r["step"] for r in rl] == [1, 2]
    assert rl[1]["policy_version"] == rl[0]["policy_version"] + 1
    for key in ("reward_mean", "pass_rate", "tokens_per_second", "staleness_mean", "grad_norm",
                "mismatch_kl", "weight_sync_seconds", "trainer_idle_fraction"):  # fmt: skip
        assert key in rl[-1]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2
    assert 0 <= summary["eval_before"]["pass_at_1"] <= 1
    assert 0 <= summary["eval_after"]["pass_at_1"] <= 1
    assert png_size(out / "reward_curve.png")[0] > 100
    assert list((out / "tensorboard").glob("events.out.tfevents.*"))
    assert sorted(p.name for p in (out / "checkpoints").iterdir())[-1] == "step-00000002"
    assert "held-out pass@1" in done.stdout
    # Off a terminal (captured here, as in a CI log) every phase prints its progress lines.
    progress_lines = (
        r"Warm start \(SFT on scripted demonstrations\)…", r"  weights v1 published in [\d.]+ s",
        r"  held-out pass@1 before RL \(tier 3\): episode (\d+)/\1: \d+ passed",
        r"  RL step 2/2: reward [\d.]+  pass", r"Held-out pass@1 after RL: done in",
    )  # fmt: skip
    for line in progress_lines:
        assert re.search(line, done.stderr), (line, done.stderr[-3000:])

    # --resume continues the same run from its newest checkpoint: step 3, not step 1 again.
    again = etude(
        "train", str(config), "--run-id", out.name, "--resume", "--set", "trainer.steps=3",
        run_dir=stack, timeout=600,
    )  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines if r["phase"] == "rl"] == [1, 2, 3]
    assert [r["step"] for r in lines if r["phase"] == "sft"] == [1, 2]  # no second warm start
    assert sorted(p.name for p in (out / "checkpoints").iterdir())[-1] == "step-00000003"


def test_a_run_started_through_the_gateway_is_stopped_through_it(running_stack, tmp_path):  # noqa: F811
    run_dir, _proc, _log, _status = running_stack
    # A run started through the gateway writes under the stack's runs directory: a relative
    # output_dir is placed there (an absolute one elsewhere is refused).
    config = write_config(tmp_path, trainer={"steps": 200, "micro_batch": 2}, output_dir="gw")
    started = etude("runs", "start", str(config), "--json", run_dir=run_dir)
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["run_id"]

    def show() -> dict:
        result = etude("runs", "show", run_id, "--json", run_dir=run_dir)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    deadline = time.monotonic() + 400
    while (record := show())["step"] < 1:
        assert record["status"] in ("queued", "running"), record
        assert time.monotonic() < deadline, record
        time.sleep(2)
    assert etude("runs", "stop", run_id, run_dir=run_dir).returncode == 0
    while (record := show())["status"] not in ("stopped", "failed", "finished"):
        assert time.monotonic() < deadline, record
        time.sleep(2)
    assert record["status"] == "stopped", record
    assert 1 <= record["step"] < 200
    assert Path(record["output_dir"]).is_relative_to(Path(run_dir).resolve() / "runs")
    listed = etude("runs", "list", "--json", run_dir=run_dir)
    assert run_id in {r["run_id"] for r in json.loads(listed.stdout)}
