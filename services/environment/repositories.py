"""Which directories a session may be opened on.

CreateSession copies the repository it names into the session's base, and the policy then
reads every file of it: a caller free to name any directory would read the host's `/etc`,
or another session's layer under the environment's own root. A repository must resolve to
a directory strictly inside one of `repository_roots` (the task store where rollout
workers materialize task repositories) and outside the environment's `root_dir`.
"""

from __future__ import annotations

from pathlib import Path

from etude.common.confinement import PathNotAllowedError, confined_directory
from etude.environment.config import EnvironmentConfig

RepositoryNotAllowedError = PathNotAllowedError


def allowed_repository(path: str, config: EnvironmentConfig) -> Path:
    """The repository's real path, to open instead of `path`; RepositoryNotAllowedError
    when a session may not be opened on it (ETUDE_ENVIRONMENT__REPOSITORY_ROOTS)."""
    forbidden = [config.root_dir] if config.root_dir is not None else []
    return confined_directory(path, config.repository_roots, forbidden, field="repository_path")
