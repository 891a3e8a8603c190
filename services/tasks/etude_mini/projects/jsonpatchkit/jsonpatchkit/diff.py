"""Compute a JSON Patch that turns one document into another."""

import copy
from typing import Any

from .patch import json_equal
from .pointer import JsonPointer


def make_patch(source: Any, target: Any) -> list[dict[str, Any]]:
    """Return operations such that ``apply_patch(source, patch)`` equals ``target``.

    Objects are compared member by member and arrays element by element after trimming their
    common prefix and suffix, so an insertion or deletion in a list yields one operation
    instead of rewriting every later element. The patch never aliases ``target``.
    """
    operations: list[dict[str, Any]] = []
    _diff(source, target, JsonPointer(), operations)
    return operations


def _diff(a: Any, b: Any, path: JsonPointer, out: list[dict[str, Any]]) -> None:
    if json_equal(a, b):
        return
    if isinstance(a, dict) and isinstance(b, dict):
        for key in a:
            if key not in b:
                out.append({"op": "remove", "path": str(path.child(key))})
        for key in a:
            if key in b:
                _diff(a[key], b[key], path.child(key), out)
        for key in b:
            if key not in a:
                out.append(
                    {"op": "add", "path": str(path.child(key)), "value": copy.deepcopy(b[key])}
                )
    elif isinstance(a, list) and isinstance(b, list):
        _diff_lists(a, b, path, out)
    else:
        out.append({"op": "replace", "path": str(path), "value": copy.deepcopy(b)})


def _diff_lists(a: list[Any], b: list[Any], path: JsonPointer, out: list[dict[str, Any]]) -> None:
    prefix = 0
    while prefix < min(len(a), len(b)) and json_equal(a[prefix], b[prefix]):
        prefix += 1
    suffix = 0
    while suffix < min(len(a), len(b)) - prefix and json_equal(a[-1 - suffix], b[-1 - suffix]):
        suffix += 1
    old, new = a[prefix : len(a) - suffix], b[prefix : len(b) - suffix]
    common = min(len(old), len(new))
    # Overlapping elements change in place (recursively, so nested edits stay small).
    for offset in range(common):
        _diff(old[offset], new[offset], path.child(prefix + offset), out)
    # Surplus old elements are removed at one index, each removal shifting the rest down.
    for _ in range(len(old) - common):
        out.append({"op": "remove", "path": str(path.child(prefix + common))})
    for offset in range(common, len(new)):
        value = copy.deepcopy(new[offset])
        out.append({"op": "add", "path": str(path.child(prefix + offset)), "value": value})
