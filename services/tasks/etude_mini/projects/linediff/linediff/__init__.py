"""Line diffs: Myers edit scripts, unified diff output and patch application."""

from .myers import Opcode, diff_opcodes, lcs, ratio
from .patch import PatchConflictError, PatchError, PatchParseError, apply_patch, parse_patch
from .unified import (
    Hunk,
    Patch,
    format_patch,
    group_opcodes,
    make_hunks,
    make_patch,
    split_lines,
    unified_diff,
)

__all__ = [
    "Hunk",
    "Opcode",
    "Patch",
    "PatchConflictError",
    "PatchError",
    "PatchParseError",
    "apply_patch",
    "diff_opcodes",
    "format_patch",
    "group_opcodes",
    "lcs",
    "make_hunks",
    "make_patch",
    "parse_patch",
    "ratio",
    "split_lines",
    "unified_diff",
]
