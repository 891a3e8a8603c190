"""Which directories a session may be opened on, and which Python environment it may run with.

CreateSession copies the repository it names into the session's base, and the policy then
reads every file of it: a caller free to name any directory would read the host's `/etc`,
or another session's layer under the environment's own root. A repository must resolve to
a directory strictly inside one of `repository_roots` (the task store where rollout
workers materialize task repositories) and outside the environment's `root_dir`.

A session's Python environment is bound into its sandbox (read-only, every file of it
readable by the policy), so it is held to the same roots, and must be one etude built
(etude.tasks.pyenv: complete, with its marker), not any directory of the task store.
"""

from __future__ import annotations

from pathlib import Path

from etude.common.confinement import PathNotAllowedError, confined_directory
from etude.environment.config import EnvironmentConfig
from etude.environment.types import RepositoryError
from etude.tasks.pyenv_marker import NotAnEnvironmentError, read_environment

RepositoryNotAllowedError = PathNotAllowedError


def allowed_repository(path: str, config: EnvironmentConfig) -> Path:
    """The repository's real path, to open instead of `path`; RepositoryNotAllowedError
    when a session may not be opened on it (ETUDE_ENVIRONMENT__REPOSITORY_ROOTS)."""
    return _confined(path, config, "repository_path")


def allowed_python_environment(path: str, config: EnvironmentConfig) -> Path:
    """The environment's real path, to bind instead of `path`; RepositoryNotAllowedError
    outside the repository roots, RepositoryError when it is not a complete environment."""
    real = _confined(path, config, "python_environment")
    try:
        read_environment(real)
    except NotAnEnvironmentError:
        raise RepositoryError(
            f"python_environment {path!r} is not a complete Python environment built for "
            "tasks (etude.tasks.pyenv)"
        ) from None
    return real


def _confined(path: str, config: EnvironmentConfig, field: str) -> Path:
    forbidden = [config.root_dir] if config.root_dir is not None else []
    return confined_directory(path, config.repository_roots, forbidden, field=field)
