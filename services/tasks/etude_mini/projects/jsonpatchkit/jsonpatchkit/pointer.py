"""JSON Pointer (RFC 6901): parsing, formatting and resolution against JSON documents."""

import re
from collections.abc import Iterable
from typing import Any

from .errors import InvalidPointer, PointerNotFound

_BAD_ESCAPE = re.compile(r"~(?![01])")
_ARRAY_INDEX = re.compile(r"0|[1-9][0-9]*")


def escape(token: str) -> str:
    """Escape one reference token; "~" must be handled first or "/" -> "~1" would be mangled."""
    return token.replace("~", "~0").replace("/", "~1")


def unescape(token: str) -> str:
    """Undo :func:`escape`. "~1" is decoded before "~0" so that "~01" means "~1", not "/"."""
    if _BAD_ESCAPE.search(token):
        raise InvalidPointer(f"invalid escape sequence in token {token!r}; use ~0 or ~1")
    return token.replace("~1", "/").replace("~0", "~")


def json_type(value: Any) -> str:
    """The JSON name of a Python value's type, for error messages."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    names = {dict: "object", list: "array", str: "string", type(None): "null"}
    return names.get(type(value), type(value).__name__)


def array_index(token: str, length: int, *, allow_end: bool, where: str = "") -> int:
    """Interpret ``token`` as an index into an array of ``length`` elements.

    RFC 6901 forbids leading zeros and signs. "-" names the slot after the last element,
    which only makes sense when adding (``allow_end``); so does an index equal to ``length``.
    """
    if token == "-":
        if allow_end:
            return length
        raise PointerNotFound(f"'-' refers past the end of the array at {where!r}")
    if _ARRAY_INDEX.fullmatch(token) is None:
        raise PointerNotFound(f"invalid array index {token!r} at {where!r}")
    index = int(token)
    if index > length or (index == length and not allow_end):
        raise PointerNotFound(
            f"index {index} is out of range for array of length {length} at {where!r}"
        )
    return index


class JsonPointer:
    """An immutable JSON Pointer such as ``/users/0/name``; ``""`` is the whole document."""

    __slots__ = ("tokens",)

    def __init__(self, text: str = "") -> None:
        if not isinstance(text, str):
            raise InvalidPointer(f"a pointer must be a string, not {type(text).__name__}")
        if text and not text.startswith("/"):
            raise InvalidPointer(f"pointer {text!r} must be empty or start with '/'")
        self.tokens: tuple[str, ...] = tuple(unescape(t) for t in text.split("/")[1:])

    @classmethod
    def from_tokens(cls, tokens: Iterable[str | int]) -> "JsonPointer":
        """Build a pointer from unescaped tokens; ints are accepted as array indices."""
        pointer = cls()
        pointer.tokens = tuple(str(token) for token in tokens)
        return pointer

    def __str__(self) -> str:
        return "".join("/" + escape(token) for token in self.tokens)

    def __repr__(self) -> str:
        return f"JsonPointer({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JsonPointer) and self.tokens == other.tokens

    def __hash__(self) -> int:
        return hash(self.tokens)

    @property
    def is_root(self) -> bool:
        return not self.tokens

    @property
    def parent(self) -> "JsonPointer":
        if not self.tokens:
            raise PointerNotFound("the document root has no parent")
        return JsonPointer.from_tokens(self.tokens[:-1])

    @property
    def last(self) -> str:
        if not self.tokens:
            raise PointerNotFound("the document root has no last token")
        return self.tokens[-1]

    def child(self, token: str | int) -> "JsonPointer":
        return JsonPointer.from_tokens((*self.tokens, token))

    def is_prefix_of(self, other: "JsonPointer") -> bool:
        """True if ``other`` is this location or lies beneath it."""
        return other.tokens[: len(self.tokens)] == self.tokens

    def resolve(self, document: Any) -> Any:
        """Return the value this pointer refers to, or raise :class:`PointerNotFound`."""
        current = document
        for depth, token in enumerate(self.tokens):
            where = str(JsonPointer.from_tokens(self.tokens[:depth]))
            if isinstance(current, dict):
                if token not in current:
                    raise PointerNotFound(f"member {token!r} not found in object at {where!r}")
                current = current[token]
            elif isinstance(current, list):
                current = current[array_index(token, len(current), allow_end=False, where=where)]
            else:
                raise PointerNotFound(f"cannot descend into {json_type(current)} at {where!r}")
        return current

    def exists(self, document: Any) -> bool:
        try:
            self.resolve(document)
        except PointerNotFound:
            return False
        return True


def resolve(document: Any, pointer: str | JsonPointer) -> Any:
    """Resolve ``pointer`` (text or :class:`JsonPointer`) against ``document``."""
    return (pointer if isinstance(pointer, JsonPointer) else JsonPointer(pointer)).resolve(document)
