"""What a run's tasks need beyond their records, and preparing a task with it.

A SWE-bench-style task names its repository (`owner/name`), not where it lies; a task
synthesized from a project path names the project. Where they are on disk, where packages
come from, and whether tasks get a Python environment of their project's dependencies are
the run's: `tasks.sources`, `tasks.packages` and `tasks.environments` of its config,
registered with its task set (etude.tasks.taskset.RunTasks) so that rollout workers, the
trainer's own episodes and the reward service prepare a task alike, wherever they run.

Preparing a task builds its repository (etude.tasks.materialize) and, where the run wants
one, its environment (`python_environment`, etude.tasks.pyenv, in a sandbox) under the same
cache directory (`<cache>/envs`); both are built once and found again by later calls, from
any process.

A run's sources and wheelhouse never reach the stack's credentials or its services' data
(etude.common.run_config.protected_dirs): checked when the run's config is read and again
wherever a process reads what the run registered, with that process's own stack.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

from etude.common.run_config import TasksConfig, check_task_paths
from etude.tasks.materialize import BUNDLED_PREFIX, PROJECTS_DIR
from etude.tasks.pyenv import PackageSource, environment_for
from etude.tasks.sources import RepositorySources
from etude.tasks.task import Task

Environments = Literal["auto", "off"]
ENVIRONMENTS_DIR = "envs"
"""Under a task cache directory: the Python environments built there."""
SHARED_TASKS_DIR = Path("/shared/tasks")
"""Where the Helm chart mounts the shared task volume: rollout workers build repositories and
environments there, and a run's sources lie there."""


@dataclass(frozen=True, slots=True)
class TaskProvisioning:
    sources: RepositorySources
    """Where repositories and projects of tasks that are not bundled are found."""
    packages: PackageSource
    """Where the packages of Python environments come from."""
    environments: Environments
    """`auto`: every task that is not bundled gets a Python environment; `off`: none."""

    @classmethod
    def from_config(cls, config: TasksConfig) -> TaskProvisioning:
        """What a run config says (its relative paths read as they stand: a config loaded by
        etude.common.run_config.load_run_config holds absolute ones); ValueError naming a
        path that reaches the stack's own directories."""
        sources, packages = config.sources, config.packages
        check_task_paths(sources, packages.wheelhouse)
        return cls(
            RepositorySources(dict(sources.repositories), sources.checkouts, sources.projects),
            PackageSource(packages.wheelhouse, packages.index_url, packages.index_hosts),
            config.environments,
        )

    def to_json(self) -> dict[str, Any]:
        sources, wheelhouse = self.sources, self.packages.wheelhouse
        return {
            "repositories": {name: str(path) for name, path in sources.repositories.items()},
            "checkouts": [str(p) for p in sources.checkouts],
            "projects": [str(p) for p in sources.projects],
            "wheelhouse": None if wheelhouse is None else str(wheelhouse),
            "index_url": self.packages.index_url,
            "index_hosts": list(self.packages.index_hosts),
            "environments": self.environments,
        }

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> TaskProvisioning:
        """The inverse of `to_json`; ValueError names what is malformed, or a path that
        reaches this process's stack's own directories."""
        try:
            environments = document["environments"]
            if environments not in get_args(Environments):
                raise ValueError(f"environments {environments!r} is not one of auto, off")
            wheelhouse = document["wheelhouse"]
            packages = PackageSource(
                None if wheelhouse is None else Path(wheelhouse), document["index_url"],
                tuple(str(h) for h in document.get("index_hosts", ())),
            )  # fmt: skip
            provisioning = cls(
                RepositorySources(
                    {str(n): Path(p) for n, p in document["repositories"].items()},
                    tuple(Path(p) for p in document["checkouts"]),
                    tuple(Path(p) for p in document["projects"]),
                ),
                packages,
                environments,
            )
        except (KeyError, TypeError, AttributeError) as error:
            problem = f"{type(error).__name__}: {error}"
            raise ValueError(f"malformed task provisioning: {problem}") from None
        check_task_paths(provisioning.sources, provisioning.packages.wheelhouse)
        return provisioning

    def wants_environment(self, task: Task) -> bool:
        """Bundled tasks run on the interpreter etude runs on: their projects need nothing
        else, and their suites were made there."""
        return self.environments == "auto" and not task.repo.startswith(BUNDLED_PREFIX)


DEFAULT_PROVISIONING = TaskProvisioning.from_config(TasksConfig())
"""What a run config that says nothing gives: no sources, PyPI, `auto`."""


@dataclass(frozen=True, slots=True)
class PreparedTask:
    """What a session of the task opens, and what grading runs the tests with."""

    repository: Path
    python_environment: Path | None = None
    """The root of its Python environment; None: the interpreter etude runs on."""


def python_environment(
    task: Task,
    provisioning: TaskProvisioning,
    cache_dir: Path,
    projects_dir: Path = PROJECTS_DIR,
) -> Path | None:
    """The root of the task's Python environment under `cache_dir/envs` (built there unless
    already), or None when the run wants none for it. EnvironmentBuildError says why one
    cannot be built; MaterializeError, why the repository it is built from cannot."""
    if not provisioning.wants_environment(task):
        return None
    built = environment_for(
        task, cache_dir, cache_dir / ENVIRONMENTS_DIR, provisioning.packages,
        sources=provisioning.sources, projects_dir=projects_dir,
    )  # fmt: skip
    return built.root
