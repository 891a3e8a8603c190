"""Shortest edit scripts between two sequences (Myers' O(ND) algorithm)."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Literal

Tag = Literal["equal", "delete", "insert", "replace"]


@dataclass(frozen=True)
class Opcode:
    """``a[a_start:a_end]`` turns into ``b[b_start:b_end]``, as in :mod:`difflib`."""

    tag: Tag
    a_start: int
    a_end: int
    b_start: int
    b_end: int


def diff_opcodes(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[Opcode]:
    """Opcodes that turn ``a`` into ``b`` with the fewest deletions and insertions.

    Adjacent deletions and insertions are merged into one ``replace`` opcode, so tags
    alternate between ``equal`` and a change.
    """
    # A common prefix and suffix never take part in an edit; trimming them keeps D small.
    prefix = 0
    while prefix < len(a) and prefix < len(b) and a[prefix] == b[prefix]:
        prefix += 1
    suffix = 0
    while (
        suffix < len(a) - prefix
        and suffix < len(b) - prefix
        and a[len(a) - 1 - suffix] == b[len(b) - 1 - suffix]
    ):
        suffix += 1
    middle = _edit_script(a[prefix : len(a) - suffix], b[prefix : len(b) - suffix])
    script = "=" * prefix + middle + "=" * suffix
    return _compress(script)


def _edit_script(a: Sequence[Hashable], b: Sequence[Hashable]) -> str:
    """The edit script as a string of ``=`` (keep), ``-`` (delete) and ``+`` (insert)."""
    n, m = len(a), len(b)
    if n == 0 or m == 0:
        return "-" * n + "+" * m
    frontier: dict[int, int] = {1: 0}  # diagonal k -> furthest x reached on it
    trace: list[dict[int, int]] = []
    for d in range(n + m + 1):
        trace.append(dict(frontier))
        for k in range(-d, d + 1, 2):
            # Stepping down inserts b[y - 1]; stepping right deletes a[x - 1].
            x = frontier[k + 1] if _steps_down(frontier, k, d) else frontier[k - 1] + 1
            y = x - k
            while x < n and y < m and a[x] == b[y]:
                x, y = x + 1, y + 1
            frontier[k] = x
            if x >= n and y >= m:
                return _backtrack(trace, n, m)
    raise AssertionError("the edit graph always has a path")  # pragma: no cover


def _steps_down(frontier: dict[int, int], k: int, d: int) -> bool:
    """Whether diagonal ``k`` is best reached from ``k + 1`` (an insertion) at depth ``d``.

    The edges of the band can only be reached one way; inside it, extend whichever
    neighbouring diagonal got further.
    """
    return k == -d or (k != d and frontier[k - 1] < frontier[k + 1])


def _backtrack(trace: list[dict[int, int]], n: int, m: int) -> str:
    """Walk the recorded frontiers backwards from the end to recover the path taken."""
    moves: list[str] = []
    x, y = n, m
    for d in range(len(trace) - 1, -1, -1):
        frontier = trace[d]
        k = x - y
        previous_k = k + 1 if _steps_down(frontier, k, d) else k - 1
        previous_x = frontier[previous_k]
        previous_y = previous_x - previous_k
        while x > previous_x and y > previous_y:
            moves.append("=")
            x, y = x - 1, y - 1
        if d > 0:
            moves.append("+" if x == previous_x else "-")
        x, y = previous_x, previous_y
    return "".join(reversed(moves))


def _compress(script: str) -> list[Opcode]:
    opcodes: list[Opcode] = []
    i = j = position = 0
    while position < len(script):
        end = position
        if script[position] == "=":
            while end < len(script) and script[end] == "=":
                end += 1
            count = end - position
            opcodes.append(Opcode("equal", i, i + count, j, j + count))
            i, j = i + count, j + count
        else:
            while end < len(script) and script[end] != "=":
                end += 1
            deleted = script.count("-", position, end)
            inserted = (end - position) - deleted
            tag: Tag = "replace" if deleted and inserted else "delete" if deleted else "insert"
            opcodes.append(Opcode(tag, i, i + deleted, j, j + inserted))
            i, j = i + deleted, j + inserted
        position = end
    return opcodes


def lcs(a: Sequence[Hashable], b: Sequence[Hashable]) -> list[Hashable]:
    """A longest common subsequence of ``a`` and ``b``."""
    return [
        a[k] for op in diff_opcodes(a, b) if op.tag == "equal" for k in range(op.a_start, op.a_end)
    ]


def ratio(a: Sequence[Hashable], b: Sequence[Hashable]) -> float:
    """Similarity in [0, 1]: twice the common elements over the total length."""
    total = len(a) + len(b)
    if total == 0:
        return 1.0
    return 2 * len(lcs(a, b)) / total
