"""A Python environment for a project synthesized from a path, when its tests import
packages the interpreter etude runs on lacks (`etude tasks synth --environment`).

The environment is the one grading builds for the project's tasks (etude.tasks.pyenv: the
project's dependencies, plus the requirements files and packages its tests need, which
its metadata seldom declares), built once from the project as given and shared by the
baseline and every mutant. The tasks record the same install specification
(`Task.setup`), so a run that gives its tasks environments builds them alike.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from etude.tasks.pyenv import EnvironmentBuildError, PackageSource, build_environment
from etude.tasks.synth.synthesize import Project
from etude.tasks.task import Setup, Task

__all__ = ["EnvironmentBuildError", "ProjectEnvironment", "project_environment"]


@dataclass(frozen=True, slots=True)
class ProjectEnvironment:
    """What the user asked the environment to hold, and where packages come from."""

    packages: PackageSource = field(default_factory=PackageSource)
    requirements: tuple[str, ...] = ()
    """Requirements files of the project (relative to its root): its test dependencies."""
    pip_packages: tuple[str, ...] = ()
    """Requirement specifiers installed besides (`freezegun`, `six>=1.5`)."""

    @property
    def setup(self) -> Setup:
        """The install specification the project's tasks carry."""
        return Setup(reqs_path=self.requirements, pip_packages=self.pip_packages)


def project_environment(
    project: Project, wanted: ProjectEnvironment, envs_dir: Path, timeout_s: float = 1800.0
) -> Path:
    """The root of `project`'s environment under `envs_dir` (built unless already there).
    EnvironmentBuildError says why it cannot be built (a requirements file the project
    lacks, a package the index does not have)."""
    missing = [r for r in wanted.requirements if not (project.root / r).is_file()]
    if missing:
        raise EnvironmentBuildError(
            f"{project.name}: no requirements file {', '.join(missing)} in the project"
        )
    # pyenv names and keys an environment by its task's repository and commit: the
    # project's name and content hash here, the same for every mutant of it.
    stand_in = Task(
        id=project.name, repo=project.name, base_commit=project.hash, instruction="",
        test_patch="", fail_to_pass=(), pass_to_pass=(), setup=wanted.setup,
    )  # fmt: skip
    # Absolute: pip is pointed at the environment's python from another directory.
    return build_environment(stand_in, project.root, envs_dir.resolve(), wanted.packages,
                             timeout_s=timeout_s).root  # fmt: skip
