"""How the policy works, not only whether it succeeds: per episode, what the agent loop saw
(`EpisodeBehaviour`, fed one turn at a time). The trajectory records it; over a batch of
trajectories, the shares and means a dashboard follows are etude.rollout.types.behaviour_summary.

An episode's behaviour, beside what the trajectory already holds (turns, calls per turn,
the loss mask, the finish reason):

* **Reads before the first edit** — read/search calls (`READ_TOOLS`) issued before the
  first `edit_file`, in call order (earlier calls of the same batch count).
* **Blind edits** — an `edit_file` to a file not read with `read_file` in an *earlier* turn.
  A read in the same batch does not count: the policy wrote the edit before it saw the
  read's result. A read that failed (a missing file, a directory) showed nothing, so it
  does not count either. Paths are compared as the workspace sees them (`workspace_path`).
* **Malformed calls** — blocks the parser rejected (one per block however many problems it
  has, plus each stray tag outside a block) and calls the environment refused as bad
  arguments (`error_reason == "bad_argument"`). Every other parsed call is valid, whatever
  its outcome: a missing file is the agent's mistake about the repository, not the format.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence
from dataclasses import dataclass, field

from etude.common.toolcalls import ParseError, ToolCall
from etude.environment.types import ExecutedCall

READ_TOOLS = frozenset({"read_file", "grep", "codebase_search", "file_search", "list_dir"})
"""Calls that look at the repository without changing it."""
READ_TOOL = "read_file"
EDIT_TOOL = "edit_file"
REJECTED_ARGUMENTS = "bad_argument"
"""The environment's `error_reason` for arguments it refused (etude.environment.tools.base)."""
WORKSPACE = "/workspace"
"""The workspace's path inside the sandbox, as the system prompt shows it."""


def workspace_path(path: str) -> str:
    """The workspace-relative form of a path the agent wrote: `./a.py`, `/workspace/a.py`
    and `a.py` are all `a.py` (the root itself is `.`)."""
    normal = posixpath.normpath(path.strip() or ".")
    if normal == WORKSPACE:
        return "."
    if normal.startswith(WORKSPACE + "/"):
        return normal[len(WORKSPACE) + 1 :]
    return normal


def malformed_blocks(errors: Sequence[ParseError]) -> int:
    """Malformed calls among a turn's parse errors: each failed block once, however many
    problems it has, and each problem outside any block (a stray tag)."""
    blocks = {e.call_id for e in errors if e.call_id is not None}
    return len(blocks) + sum(e.call_id is None for e in errors)


@dataclass(slots=True)
class EpisodeBehaviour:
    """What one episode's turns did; `observe` each turn's calls, parse errors and results."""

    valid_calls: int = 0
    malformed_calls: int = 0
    edits: int = 0
    blind_edits: int = 0
    reads_before_first_edit: int | None = None
    """None while the episode has made no edit."""
    _reads: int = field(default=0, init=False, repr=False)
    _read_paths: set[str] = field(default_factory=set, init=False, repr=False)

    def observe(
        self,
        calls: Sequence[ToolCall],
        errors: Sequence[ParseError],
        results: Sequence[ExecutedCall],
    ) -> None:
        self.malformed_calls += malformed_blocks(errors)
        by_id = {r.call_id: r for r in results}
        read_now: set[str] = set()
        for call in calls:
            executed = by_id.get(call.id)
            if executed is not None and executed.result.error_reason == REJECTED_ARGUMENTS:
                self.malformed_calls += 1
                continue
            self.valid_calls += 1
            if call.name in READ_TOOLS and self.reads_before_first_edit is None:
                self._reads += 1
            if call.name == EDIT_TOOL:
                self.edits += 1
                if self.reads_before_first_edit is None:
                    self.reads_before_first_edit = self._reads
                self.blind_edits += _path(call) not in self._read_paths
            if call.name == READ_TOOL and _succeeded(executed):
                read_now.add(_path(call))
        # Only later turns have seen this turn's results.
        self._read_paths |= read_now


def _path(call: ToolCall) -> str:
    return workspace_path(call.arguments.get("path", ""))


def _succeeded(executed: ExecutedCall | None) -> bool:
    if executed is None:
        return False
    return executed.result.exit_code == 0 and executed.result.error_reason is None
