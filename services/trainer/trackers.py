"""Experiment trackers: where each step's metrics go besides metrics.jsonl, the run registry
and Prometheus, chosen by the run config's `tracking.trackers`.

- `tensorboard`: scalars `<phase>/<key>` in `<run dir>/tensorboard`;
- `mlflow`: a run of MLflow experiment `tracking.experiment`, in a local file store
  (`<run dir>/mlruns`) unless `tracking.mlflow_tracking_uri` names another store: the run
  config as params, each metric with its step, the summary's numbers at the end;
- `wandb`: a Weights & Biases run in offline mode (`<run dir>/wandb/offline-run-*`; it never
  contacts a server, `wandb sync` uploads it later).

MLflow and W&B are optional extras, imported only by a run that asks for them; one that is
not installed fails the run as it starts, not at its first step.
"""

from __future__ import annotations

import importlib
import json
import os
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from pydantic import BaseModel

from etude.common.run_config import RunConfig, TrackerName

# The module each optional tracker imports; the pip extra that installs it has the
# tracker's name.
_MODULES: dict[str, str] = {"mlflow": "mlflow", "wandb": "wandb"}

# MLflow's limits (mlflow.utils.validation): a param's value, params per batch, metrics per
# batch.
MLFLOW_PARAM_LENGTH = 6000
_MLFLOW_PARAMS_PER_BATCH = 100
_MLFLOW_METRICS_PER_BATCH = 1000


class Tracker(Protocol):
    def log(self, step: int, values: Mapping[str, float], phase: str) -> None:
        """One step's numbers of one phase (`sft`, `rl`, `eval_before/tier0`, …); each phase
        counts its own steps."""

    def close(self, summary: Mapping[str, Any], failed: bool = False) -> None:
        """The run ended with `summary` (summary.json's document), or `failed` (stopped,
        crashed: `summary` is then empty) before it could finish."""


class TrackerUnavailableError(RuntimeError):
    """The run config asks for a tracker whose package is not installed."""


def open_trackers(config: RunConfig, output_dir: Path, run_name: str) -> list[Tracker]:
    """The trackers `config.tracking` names, started for the run `run_name` whose files are in
    `output_dir`. Every package is imported before any tracker starts, so a missing one
    leaves no half-made run behind."""
    tracking = config.tracking
    for name in tracking.trackers:
        _require(name)
    output_dir.mkdir(parents=True, exist_ok=True)
    trackers: list[Tracker] = []
    for name in tracking.trackers:
        if name == "tensorboard":
            trackers.append(TensorBoardTracker(output_dir))
        elif name == "mlflow":
            uri = tracking.mlflow_tracking_uri or (output_dir / "mlruns").resolve().as_uri()
            trackers.append(
                MLflowTracker(uri, tracking.experiment, run_name, config_params(config))
            )
        elif name == "wandb":
            document = config.model_dump(mode="json")
            trackers.append(WandbTracker(output_dir, tracking.experiment, run_name, document))
    return trackers


def _require(name: TrackerName) -> None:
    module = _MODULES.get(name)
    if module is None:
        return
    try:
        importlib.import_module(module)
    except ImportError as error:
        raise TrackerUnavailableError(
            f"tracking.trackers lists {name!r}, but the {module} package is not installed: "
            f"pip install 'etude[{name}]'"
        ) from error


class TensorBoardTracker:
    """Scalars `<phase>/<key>` at each step in `<run dir>/tensorboard`."""

    def __init__(self, output_dir: Path) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self._writer = SummaryWriter(log_dir=str(output_dir / "tensorboard"))

    def log(self, step: int, values: Mapping[str, float], phase: str) -> None:
        for key, value in values.items():
            self._writer.add_scalar(f"{phase}/{key}", value, step)
        self._writer.flush()  # readable while the run goes on

    def close(self, summary: Mapping[str, Any], failed: bool = False) -> None:
        self._writer.close()


class MLflowTracker:
    """One MLflow run named `run_name` in experiment `experiment` of the tracking store at
    `uri`: `params` once, each metric `<phase>/<key>` with its step, and at the end the
    summary's numbers as `summary/<path>` and the run FINISHED. A resumed run goes on in the
    MLflow run it started."""

    def __init__(self, uri: str, experiment: str, run_name: str, params: Mapping[str, str]):
        if urlparse(uri).scheme in ("", "file"):
            # MLflow 3 refuses its file store (kept, but no longer developed) unless asked
            # for; it is the store that needs no server and no database.
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.entities import Metric, Param
        from mlflow.tracking import MlflowClient

        self._metric, self._param = Metric, Param
        self._client = client = MlflowClient(uri)
        experiment_id = _experiment_id(client, experiment)
        found = client.search_runs(
            [experiment_id], filter_string=f"attributes.run_name = '{run_name}'", max_results=1
        )
        if found:
            self.run_id = found[0].info.run_id
            client.update_run(self.run_id, status="RUNNING")
            # MLflow refuses to change a param's value; the first start's values stand.
            params = {k: v for k, v in params.items() if k not in found[0].data.params}
        else:
            self.run_id = client.create_run(experiment_id, run_name=run_name).info.run_id
        entries = [Param(key, value) for key, value in params.items()]
        for batch in _batches(entries, _MLFLOW_PARAMS_PER_BATCH):
            client.log_batch(self.run_id, params=batch)

    def log(self, step: int, values: Mapping[str, float], phase: str) -> None:
        self._log_metrics({f"{phase}/{key}": value for key, value in values.items()}, step)

    def close(self, summary: Mapping[str, Any], failed: bool = False) -> None:
        numbers = numeric_values(summary)
        self._log_metrics({f"summary/{key}": value for key, value in numbers.items()}, 0)
        self._client.set_terminated(self.run_id, "FAILED" if failed else "FINISHED")

    def _log_metrics(self, values: Mapping[str, float], step: int) -> None:
        now = int(time.time() * 1000)
        metrics = [self._metric(key, float(value), now, step) for key, value in values.items()]
        for batch in _batches(metrics, _MLFLOW_METRICS_PER_BATCH):
            self._client.log_batch(self.run_id, metrics=batch)


def _experiment_id(client: Any, name: str) -> str:
    from mlflow.exceptions import MlflowException

    found = client.get_experiment_by_name(name)
    if found is not None:
        return found.experiment_id
    try:
        return client.create_experiment(name)
    except MlflowException:
        # Another run sharing the store created it in between.
        found = client.get_experiment_by_name(name)
        if found is None:
            raise
        return found.experiment_id


class WandbTracker:
    """A Weights & Biases run in offline mode under `<run dir>/wandb/`: `config` as the run's
    config, each metric `<phase>/<key>` against the phase's own step, and at the end the
    summary's numbers in the run's summary. `wandb sync <run dir>/wandb/offline-run-*`
    uploads it; a resumed run starts another offline run."""

    def __init__(self, output_dir: Path, project: str, run_name: str, config: dict[str, Any]):
        import wandb

        self._run = wandb.init(
            project=project, name=run_name, dir=output_dir, config=config,
            mode="offline",  # never the network, whatever WANDB_MODE says
            reinit="create_new",  # a run of its own, beside any other in the process
            # console "off": W&B leaves the trainer's stdout and stderr alone.
            settings=wandb.Settings(silent=True, console="off"),
        )  # fmt: skip
        self._phases: set[str] = set()

    def log(self, step: int, values: Mapping[str, float], phase: str) -> None:
        if phase not in self._phases:
            # W&B's own step may only grow, but SFT, RL and the evaluations each count from
            # 0 or 1: each phase's metrics are plotted against a step metric of its own.
            self._run.define_metric(f"{phase}/step", hidden=True)
            self._run.define_metric(f"{phase}/*", step_metric=f"{phase}/step")
            self._phases.add(phase)
        self._run.log({**{f"{phase}/{k}": v for k, v in values.items()}, f"{phase}/step": step})

    def close(self, summary: Mapping[str, Any], failed: bool = False) -> None:
        self._run.summary.update(numeric_values(summary))
        self._run.finish(exit_code=1 if failed else 0)


def config_params(config: BaseModel) -> dict[str, str]:
    """The run config as MLflow params: one per setting, keyed by its dotted path
    (`trainer.loss.clip_low`); a value that is not a string as JSON, cut to MLflow's limit.
    A setting that is a mapping (`tasks.sources.repositories`) stays one param."""

    def walk(model: BaseModel, document: dict[str, Any], prefix: str) -> Iterator[tuple[str, str]]:
        for name, value in document.items():
            if isinstance(getattr(model, name), BaseModel):
                yield from walk(getattr(model, name), value, f"{prefix}{name}.")
                continue
            text = value if isinstance(value, str) else json.dumps(value)
            if len(text) > MLFLOW_PARAM_LENGTH:
                text = text[: MLFLOW_PARAM_LENGTH - 1] + "…"
            yield f"{prefix}{name}", text

    return dict(walk(config, config.model_dump(mode="json"), ""))


def numeric_values(document: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The numbers of a nested document (a run's summary), keyed by their path
    (`eval_after/by_tier/0/pass_at_1`); strings, lists and flags are left out."""
    numbers: dict[str, float] = {}
    for key, value in document.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            numbers.update(numeric_values(value, f"{path}/"))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            numbers[path] = float(value)
    return numbers


def _batches(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
