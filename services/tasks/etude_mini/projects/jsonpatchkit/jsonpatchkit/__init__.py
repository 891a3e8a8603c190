"""jsonpatchkit: JSON Pointer (RFC 6901) and JSON Patch (RFC 6902)."""

from .diff import make_patch
from .errors import (
    InvalidPatch,
    InvalidPointer,
    JsonPatchError,
    PatchConflict,
    PatchTestFailed,
    PointerNotFound,
)
from .patch import Operation, apply_patch, json_equal, parse_operation
from .pointer import JsonPointer, escape, resolve, unescape

__all__ = [
    "InvalidPatch",
    "InvalidPointer",
    "JsonPatchError",
    "JsonPointer",
    "Operation",
    "PatchConflict",
    "PatchTestFailed",
    "PointerNotFound",
    "apply_patch",
    "escape",
    "json_equal",
    "make_patch",
    "parse_operation",
    "resolve",
    "unescape",
]
