"""Exception hierarchy. Every error is a :class:`JsonPatchError`, so callers can catch one type."""


class JsonPatchError(Exception):
    """Base class. ``index`` and ``op`` identify the failing operation, when there is one."""

    def __init__(self, message: str, index: int | None = None, op: str | None = None) -> None:
        self.message = message
        self.index = index
        self.op = op
        where = "" if index is None else f"operation {index}" + (f" ({op})" if op else "")
        super().__init__(f"{where}: {message}" if where else message)


class InvalidPointer(JsonPatchError, ValueError):
    """The text is not a syntactically valid JSON Pointer."""


class PointerNotFound(JsonPatchError, LookupError):
    """A pointer is well formed but does not resolve within the document."""


class InvalidPatch(JsonPatchError, ValueError):
    """The patch document itself is malformed (missing members, unknown op, bad types)."""


class PatchConflict(JsonPatchError):
    """An operation is well formed but cannot be applied to the document."""


class PatchTestFailed(PatchConflict):
    """A ``test`` operation found a different value than expected."""
