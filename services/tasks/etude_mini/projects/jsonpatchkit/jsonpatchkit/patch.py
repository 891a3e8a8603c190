"""JSON Patch (RFC 6902): validate and apply patches without mutating the input.

A patch is applied atomically: it is validated in full first, then applied to a deep copy,
so on any error the caller's document is untouched and no half-applied result escapes.
"""

import copy
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from .errors import InvalidPatch, InvalidPointer, JsonPatchError, PatchConflict, PatchTestFailed
from .pointer import JsonPointer, array_index, json_type

_REQUIRED: dict[str, tuple[str, ...]] = {
    "add": ("path", "value"),
    "remove": ("path",),
    "replace": ("path", "value"),
    "move": ("from", "path"),
    "copy": ("from", "path"),
    "test": ("path", "value"),
}


class Operation(NamedTuple):
    op: str
    path: JsonPointer
    value: Any = None
    from_: JsonPointer | None = None


def json_equal(a: Any, b: Any) -> bool:
    """Equality with JSON semantics: ``true`` is not ``1``, ``1`` equals ``1.0``, and object
    member order does not matter while array order does."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(json_equal(a[key], b[key]) for key in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def parse_operation(raw: Any, index: int | None = None) -> Operation:
    """Validate one operation object and convert its pointers."""
    if not isinstance(raw, Mapping):
        raise InvalidPatch(f"an operation must be an object, not {json_type(raw)}", index)
    op = raw.get("op")
    if not isinstance(op, str):
        raise InvalidPatch("missing or non-string 'op' member", index)
    if op not in _REQUIRED:
        raise InvalidPatch(f"unknown op {op!r}", index)
    pointers: dict[str, JsonPointer] = {}
    for member in _REQUIRED[op]:
        if member not in raw:  # Presence matters: "value": null is a valid value.
            raise InvalidPatch(f"{op!r} operation is missing the {member!r} member", index)
        if member == "value":
            continue
        try:
            pointers[member] = JsonPointer(raw[member])
        except InvalidPointer as exc:
            raise InvalidPatch(f"invalid {member!r}: {exc.message}", index) from None
    source, path = pointers.get("from"), pointers["path"]
    if op == "move" and source is not None and source != path and source.is_prefix_of(path):
        raise InvalidPatch(f"cannot move {str(source)!r} into its own child {str(path)!r}", index)
    return Operation(op, path, raw.get("value"), source)


def _add(document: Any, path: JsonPointer, value: Any) -> Any:
    if path.is_root:
        return value
    parent = path.parent.resolve(document)
    if isinstance(parent, dict):
        parent[path.last] = value
    elif isinstance(parent, list):
        index = array_index(path.last, len(parent), allow_end=True, where=str(path.parent))
        parent.insert(index, value)
    else:
        raise PatchConflict(f"cannot add a member to {json_type(parent)} at {str(path.parent)!r}")
    return document


def _remove(document: Any, path: JsonPointer) -> Any:
    """Remove the value at ``path`` and return it."""
    if path.is_root:
        raise PatchConflict("cannot remove the document root")
    path.resolve(document)  # Raises a precise PointerNotFound if the target is missing.
    parent = path.parent.resolve(document)
    if isinstance(parent, dict):
        return parent.pop(path.last)
    return parent.pop(array_index(path.last, len(parent), allow_end=False))


def _replace(document: Any, path: JsonPointer, value: Any) -> Any:
    path.resolve(document)  # Unlike "add", "replace" requires the target to exist.
    if path.is_root:
        return value
    parent = path.parent.resolve(document)
    if isinstance(parent, dict):
        parent[path.last] = value  # Assign in place so the member keeps its position.
    else:
        parent[array_index(path.last, len(parent), allow_end=False)] = value
    return document


def _apply(document: Any, operation: Operation) -> Any:
    op, path, value, source = operation
    if op == "add":
        return _add(document, path, copy.deepcopy(value))
    if op == "remove":
        _remove(document, path)
        return document
    if op == "replace":
        return _replace(document, path, copy.deepcopy(value))
    if op in ("move", "copy"):
        assert source is not None  # parse_operation guarantees "from" for these ops.
        if op == "copy":
            return _add(document, path, copy.deepcopy(source.resolve(document)))
        if source == path:
            source.resolve(document)  # Moving onto itself is a no-op, but "from" must exist.
            return document
        return _add(document, path, _remove(document, source))
    actual = path.resolve(document)
    if not json_equal(actual, value):
        raise PatchTestFailed(f"value at {str(path)!r} is {actual!r}, expected {value!r}")
    return document


def apply_patch(document: Any, patch: Sequence[Mapping[str, Any]]) -> Any:
    """Return the result of applying ``patch`` to ``document``; ``document`` is not modified.

    Raises :class:`InvalidPatch` for a malformed patch, :class:`PatchTestFailed` when a
    ``test`` fails, and :class:`PatchConflict` when an operation does not fit the document.
    Errors carry the index of the failing operation.
    """
    if isinstance(patch, str | bytes | Mapping) or not isinstance(patch, Sequence):
        raise InvalidPatch(f"a patch must be an array of operations, not {json_type(patch)}")
    operations = [parse_operation(raw, index) for index, raw in enumerate(patch)]
    result = copy.deepcopy(document)
    for index, operation in enumerate(operations):
        try:
            result = _apply(result, operation)
        except JsonPatchError as exc:
            error = type(exc) if isinstance(exc, PatchConflict) else PatchConflict
            raise error(exc.message, index, operation.op) from None
    return result
