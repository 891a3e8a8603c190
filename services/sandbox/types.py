"""Plain types the sandbox shares with its users: where a workspace's layers lie, and
what a command produced."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

Mode = Literal["overlay", "copy"]


@dataclass(frozen=True, slots=True)
class Layout:
    """The directories of one sandbox's workspace (the environment's `WorkspaceStore`
    makes them)."""

    mode: Mode
    session_dir: Path
    base: Path
    lowers: list[Path] = field(default_factory=list)
    """Overlay: read-only layers, bottom first (the base, then fork snapshots)."""

    @property
    def upper(self) -> Path:
        return self.session_dir / "upper"

    @property
    def work(self) -> Path:
        return self.session_dir / "work"

    @property
    def tree(self) -> Path:
        return self.session_dir / "tree"


@dataclass(frozen=True, slots=True)
class CommandOutcome:
    output: str
    """Combined stdout and stderr, already capped (head + tail)."""
    exit_code: int
    timed_out: bool
    truncated_chars: int
