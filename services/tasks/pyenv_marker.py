"""What a built Python environment says of itself (etude.tasks.pyenv writes it last into a
complete one): read by the sandbox's users — grading adds the environment's site-packages to
its runner, the environment service checks that a session's environment is one — without
the machinery that builds environments."""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

MARKER = "etude-environment.json"
"""Written last into a complete environment: what it was built from, what it holds."""
RUNNING_PYTHON = f"{sys.version_info.major}.{sys.version_info.minor}"
"""The version of the Python running etude (`3.11`)."""


class NotAnEnvironmentError(ValueError):
    """A directory that is not a complete environment built by etude.tasks.pyenv."""


@dataclass(frozen=True, slots=True)
class PythonEnvironment:
    root: Path
    built: bool
    """Whether this call built it (else an earlier one had)."""
    purelib: Path
    """Its site-packages: the project's dependencies."""
    python_version: str
    """`3.11`: the version of its interpreter."""

    @property
    def python(self) -> Path:
        return self.root / "bin" / "python"

    @property
    def bin_dir(self) -> Path:
        return self.root / "bin"


def read_environment(root: Path) -> PythonEnvironment:
    """The complete environment at `root`, as its marker describes it; NotAnEnvironmentError
    when there is none (never built here, or a build that did not finish)."""
    try:
        marker = json.loads((root / MARKER).read_text())
        return PythonEnvironment(
            root, built=False, purelib=Path(marker["purelib"]),
            python_version=str(marker["python_version"]),
        )  # fmt: skip
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise NotAnEnvironmentError(
            f"{root} is not a complete Python environment: {error}"
        ) from None
