"""The reward tests use the tasks tests' fixtures."""

from tests.tasks.conftest import bwrap  # noqa: F401
