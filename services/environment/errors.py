"""The environment's errors; server.py maps each to a gRPC status code."""

from __future__ import annotations


class SessionNotFoundError(LookupError):
    """No live session has that id (never created, closed, or expired)."""


class SessionLimitError(RuntimeError):
    """The bound on live sessions is reached."""


class RepositoryError(ValueError):
    """The repository to prepare does not exist or is not a directory."""


class WalkLimitError(RuntimeError):
    """A host-side walk of a workspace (Diff) ran past its deadline or its caps on entries or
    bytes: the tree is too big, or something in it keeps the walk busy."""
