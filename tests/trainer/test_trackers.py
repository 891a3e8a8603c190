"""The experiment trackers a run config chooses (etude.trainer.trackers): what MLflow's file
store and W&B's offline run hold after a run's SFT and RL steps, read back with each tool's
own reader; a tracker whose package is missing stops the run as it starts; an unknown
tracker is a config error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from etude.common.run_config import RunConfig, RunConfigError, load_run_config
from etude.trainer.report import Reporter
from etude.trainer.trackers import (
    MLFLOW_PARAM_LENGTH,
    TensorBoardTracker,
    TrackerUnavailableError,
    open_trackers,
)

RUN = "demo-0123abcd"
SFT = [(0, 2.5), (1, 1.75), (2, 1.0)]  # (step, loss)
RL = [(1, 0.25), (2, 0.5)]  # (step, reward_mean): RL counts from 1 while SFT counted from 0


def config(*trackers: str, **tracking) -> RunConfig:
    document = {"trainer": {"lr": 0.0005}, "tracking": {"trackers": list(trackers), **tracking}}
    return RunConfig.model_validate(document)


def run_steps(reporter: Reporter) -> dict:
    """A short run through the Reporter, as TrainingRun reports one; returns its summary."""
    for step, loss in SFT:
        reporter.log(step, {"loss": loss, "tokens": 100.0 * (step + 1)}, "sft")
    for step, reward in RL:
        reporter.log(step, {"reward_mean": reward, "pass_rate": reward, "step": step}, "rl")
    tier = {"pass_at_1": 0.375, "ci_low": 0.2, "ci_high": 0.6}
    summary = {"run_id": RUN, "steps": 2, "late": 0,
               "eval_after": {**tier, "by_tier": {"0": tier}}}  # fmt: skip
    reporter.finish(summary)
    return summary


# -- MLflow ---------------------------------------------------------------------------------


@pytest.fixture
def mlflow_env(monkeypatch):
    """MLflow 3 opens a file store only with MLFLOW_ALLOW_FILE_STORE set: unset here, so the
    tracker's own opt-in is what the test relies on (and undone after it)."""
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE")
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    return pytest.importorskip("mlflow", reason="the mlflow extra is not installed")


def mlflow_runs(uri: str, experiment: str = "etude"):
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    found = client.get_experiment_by_name(experiment)
    assert found is not None, f"no experiment {experiment!r} in {uri}"
    return client, client.search_runs([found.experiment_id])


def history(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return [(m.step, m.value) for m in client.get_metric_history(run_id, key)]


def test_mlflow_holds_the_sft_and_rl_steps_the_config_and_a_finished_run(tmp_path, mlflow_env):
    out = tmp_path / RUN
    reporter = Reporter(out, trackers=open_trackers(config("mlflow"), out, RUN))
    summary = run_steps(reporter)

    client, [run] = mlflow_runs(f"file:{out / 'mlruns'}")
    assert run.info.run_name == RUN and run.info.status == "FINISHED"
    assert history(client, run.info.run_id, "sft/loss") == SFT
    assert history(client, run.info.run_id, "sft/tokens") == [(0, 100.0), (1, 200.0), (2, 300.0)]
    assert history(client, run.info.run_id, "rl/reward_mean") == RL
    params = run.data.params
    assert params["trainer.lr"] == "0.0005" and params["tracking.trackers"] == '["mlflow"]'
    assert params["trainer.loss.clip_high"] == "0.28" and params["name"] == "run"
    metrics = run.data.metrics
    assert metrics["summary/steps"] == summary["steps"]
    assert metrics["summary/eval_after/by_tier/0/pass_at_1"] == 0.375
    assert not (out / "tensorboard").exists()  # only what the config asked for


def test_a_resumed_run_goes_on_in_its_mlflow_run(tmp_path, mlflow_env):
    out = tmp_path / RUN
    first = Reporter(out, trackers=open_trackers(config("mlflow"), out, RUN))
    first.log(1, {"reward_mean": 0.25}, "rl")  # then the process died: no finish
    again = Reporter(out, trackers=open_trackers(config("mlflow"), out, RUN))
    again.log(2, {"reward_mean": 0.5}, "rl")
    again.trackers[0].close({"steps": 2})

    client, [run] = mlflow_runs(f"file:{out / 'mlruns'}")
    assert run.info.status == "FINISHED"
    assert history(client, run.info.run_id, "rl/reward_mean") == RL


def test_a_run_that_ends_without_finishing_is_failed_in_mlflow_not_left_running(
    tmp_path, mlflow_env
):
    out = tmp_path / RUN
    reporter = Reporter(out, trackers=open_trackers(config("mlflow"), out, RUN))
    reporter.log(1, {"reward_mean": 0.25}, "rl")
    reporter.abandon()  # what TrainingRun.close does for a run that failed or was stopped
    reporter.abandon()  # and again: already closed, nothing happens
    client, [run] = mlflow_runs(f"file:{out / 'mlruns'}")
    assert run.info.status == "FAILED"
    assert history(client, run.info.run_id, "rl/reward_mean") == RL[:1]


def test_the_configured_store_and_experiment_are_used_and_long_params_cut(tmp_path, mlflow_env):
    store = tmp_path / "shared-mlruns"
    # A mapping setting is one param, its JSON here far over MLflow's length limit.
    repositories = {f"owner/project-{i}": f"/srv/mirrors/project-{i}" for i in range(300)}
    run_config = RunConfig.model_validate({
        "tasks": {"sources": {"repositories": repositories}},
        "tracking": {"trackers": ["mlflow"], "mlflow_tracking_uri": f"file:{store}",
                     "experiment": "ablations"},
    })  # fmt: skip
    out = tmp_path / RUN
    tracker = open_trackers(run_config, out, RUN)[0]
    tracker.close({})

    _, [run] = mlflow_runs(f"file:{store}", "ablations")
    assert not (out / "mlruns").exists()
    cut = run.data.params["tasks.sources.repositories"]
    assert len(cut) == MLFLOW_PARAM_LENGTH and cut.endswith("…")
    assert cut.startswith('{"owner/project-0": "/srv/mirrors/project-0"')


# -- Weights & Biases -------------------------------------------------------------------


@pytest.fixture
def wandb_env(monkeypatch, tmp_path):
    """W&B offline, silent, with its own files under tmp_path. WANDB_BASE_URL points at a
    port nothing listens on, so a run that tried the network anyway could reach no server;
    no API key is set."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    for name in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(name, str(tmp_path / "wandb-home" / name.lower()))
    for name in ("WANDB_API_KEY", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_DIR", "WANDB_RUN_ID"):
        monkeypatch.delenv(name, raising=False)
    return pytest.importorskip("wandb", reason="the wandb extra is not installed")


def wandb_records(run_dir: Path) -> list[dict]:
    """The records of an offline run's transaction log (`run-<id>.wandb`), through W&B's own
    reader (`wandb leet inspect --json`): one JSON object per record."""
    listing = subprocess.run(
        [sys.executable, "-m", "wandb", "leet", "inspect", "--json", str(run_dir)],
        capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    return [json.loads(line) for line in listing.stdout.splitlines() if line.strip()]


def test_wandb_offline_run_holds_each_phase_against_its_own_step(tmp_path, wandb_env):
    out = tmp_path / RUN
    reporter = Reporter(out, trackers=open_trackers(config("wandb", "tensorboard"), out, RUN))
    summary = run_steps(reporter)

    [run_dir] = (out / "wandb").glob("offline-run-*")
    records = wandb_records(run_dir)
    rows = [r["history"]["item"] for r in records if r["type"] == "history"]
    assert [(r["sft/step"], r["sft/loss"]) for r in rows if "sft/loss" in r] == SFT
    assert [(r["rl/step"], r["rl/reward_mean"]) for r in rows if "rl/reward_mean" in r] == RL
    # W&B's own step only grows, although RL started again from 1 after SFT's 2.
    assert [r["_step"] for r in rows] == sorted(r["_step"] for r in rows)
    step_metrics = {
        r["metric"]["glob_name"]: r["metric"]["step_metric"]
        for r in records
        if r["type"] == "metric" and "glob_name" in r["metric"]
    }
    assert step_metrics == {"sft/*": "sft/step", "rl/*": "rl/step"}

    [run] = [r["run"] for r in records if r["type"] == "run"]
    assert run["display_name"] == RUN and run["project"] == "etude"
    assert run["config"]["update"]["trainer"]["lr"] == 0.0005
    [exit_record] = [r["exit"] for r in records if r["type"] == "exit"]
    assert exit_record.get("exit_code", 0) == 0
    final = {}
    for record in records:
        if record["type"] == "summary":
            final.update(record["summary"]["update"])
    assert final["steps"] == summary["steps"] and final["eval_after/pass_at_1"] == 0.375
    assert final["rl/reward_mean"] == 0.5
    assert any((out / "tensorboard").iterdir())  # both trackers, side by side


# -- what the run is refused ------------------------------------------------------------


@pytest.mark.parametrize("name", ["mlflow", "wandb"])
def test_a_tracker_not_installed_fails_as_the_run_starts_naming_the_extra(
    tmp_path, monkeypatch, name
):
    # Both packages are installed here: a None in sys.modules, which makes `import name`
    # raise ImportError, is the only way to see what a machine without them does.
    monkeypatch.setitem(sys.modules, name, None)
    out = tmp_path / RUN
    with pytest.raises(TrackerUnavailableError, match=rf"pip install 'etude\[{name}\]'"):
        open_trackers(config("tensorboard", name), out, RUN)
    assert not out.exists()  # no tracker was started, TensorBoard included


@pytest.mark.parametrize(
    ("tracking", "message"),
    [
        ({"trackers": ["neptune"]}, r"tracking\.trackers\.0: Input should be 'tensorboard'"),
        ({"trackers": ["mlflow", "mlflow"]}, "'mlflow' is listed twice"),
        ({"trackers": ["wandb"], "experiment": "team/etude"}, "W&B's project name"),
        ({"tracker": ["mlflow"]}, "tracking.tracker: Extra inputs are not permitted"),
    ],
)
def test_a_bad_tracking_section_is_refused_naming_the_key(tracking, message):
    with pytest.raises(RunConfigError, match=message):
        load_run_config(None, [f"tracking={json.dumps(tracking)}"])


def test_by_default_a_run_reports_to_tensorboard_alone(tmp_path):
    assert RunConfig().tracking.trackers == ("tensorboard",)
    [tracker] = open_trackers(RunConfig(), tmp_path, RUN)
    assert isinstance(tracker, TensorBoardTracker)
    assert [type(t) for t in Reporter(tmp_path / "plain").trackers] == [TensorBoardTracker]
    assert Reporter(tmp_path / "none", tensorboard=False).trackers == []
