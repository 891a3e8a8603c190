"""What the gateway accepts beyond its models' types (and strict JSON,
etude.common.strict_json): run configs whose paths stay inside the gateway's run directory.

A run started through the gateway writes to its output directory and reads its task set
and initial checkpoint from the paths its config names: a caller must not choose a
directory elsewhere on the host, so those paths must lie under the gateway's run directory.
The run's task sources and wheelhouse (`tasks.sources`, `tasks.packages.wheelhouse`) are
read by its workers and the reward service, which may run elsewhere: they must lie under
the run directory too, or on the shared task volume (`/shared/tasks`) on a cluster, and
never in or around what the stack keeps there besides (its credentials, the environment's
sessions, Redis's data, the logs: etude.common.run_config.protected_dirs): builds of the
tasks run their repositories' code, and sessions open them.
"""

from __future__ import annotations

import os
from pathlib import Path

from etude.common.run_config import (
    RunConfig,
    TasksConfig,
    check_task_paths,
    protected_dirs,
    stack_protected_dirs,
)
from etude.gateway.config import GatewaySettings
from etude.tasks.provisioning import SHARED_TASKS_DIR


def gateway_run_dir() -> Path:
    """The directory runs started through the gateway live under (ETUDE_GATEWAY__RUN_DIR,
    else the stack's run directory), resolved."""
    settings = GatewaySettings()
    return Path(os.path.realpath(settings.gateway.run_dir or settings.stack.run_dir))


def _inside(path: Path, directory: Path) -> bool:
    return path == directory or path.is_relative_to(directory)


def confine_run_paths(config: RunConfig, run_dir: Path, *, taskset: bool = True) -> RunConfig:
    """`config` with its output directory under `<run_dir>/runs` (the default, or a
    relative one, placed there); ValueError naming the field of a path outside `run_dir`.
    `taskset` False: the task set's records came with the request, so `tasks.taskset` is
    only their label and is left as it is."""
    runs = run_dir / "runs"
    default = RunConfig.model_fields["output_dir"].default
    output = config.output_dir
    output = runs if output == default else Path(os.path.realpath(runs / output))
    if not _inside(output, runs):
        raise ValueError(f"output_dir must lie under {runs} (the gateway's runs directory)")
    return config.model_copy(
        update={
            "output_dir": output,
            "tasks": _confined_sources(
                config.tasks.model_copy(
                    update={"taskset": _stack_file(config.tasks.taskset, "tasks.taskset", run_dir)}
                )
                if taskset
                else config.tasks,
                run_dir,
            ),
            "policy": config.policy.model_copy(
                update={"init": _stack_file(config.policy.init, "policy.init", run_dir)}
            ),
        }
    )


def _stack_file(value: str, field: str, run_dir: Path) -> str:
    """A bundled name or preset as is; a path (it has a `/`), which the run will read,
    resolved and under `run_dir` — the run resolves it from another working directory."""
    if "/" not in value:
        return value
    real = Path(os.path.realpath(run_dir / value))
    if not _inside(real, run_dir):
        raise ValueError(f"{field} must be a bundled name or a path under {run_dir}")
    return str(real)


def _confined_sources(tasks: TasksConfig, run_dir: Path) -> TasksConfig:
    """`tasks` with its sources' and wheelhouse's real paths (a relative one under
    `run_dir`); ValueError naming a path that lies outside `run_dir` and the shared task
    volume."""

    def confined(path: Path) -> Path:
        real = Path(os.path.realpath(run_dir / path.expanduser()))
        if not (_inside(real, run_dir) or _inside(real, SHARED_TASKS_DIR)):
            raise ValueError(
                f"tasks.sources and tasks.packages.wheelhouse must lie under {run_dir} or "
                f"{SHARED_TASKS_DIR} (the shared task volume), not {path}"
            )
        return real

    confined_tasks = tasks.with_paths(confined)
    # The stack's own directories, and the same names under the gateway's run directory
    # where that is another one.
    check_task_paths(
        confined_tasks.sources, confined_tasks.packages.wheelhouse,
        (*stack_protected_dirs(), *protected_dirs(run_dir)),
    )  # fmt: skip
    return confined_tasks
