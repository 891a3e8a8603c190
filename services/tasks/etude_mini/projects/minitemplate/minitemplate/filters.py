"""Built-in filters and the ``Markup`` type used for auto-escaping.

Missing variables evaluate to ``None``, so every filter accepts ``None`` and treats it as empty.
"""

import html
from collections.abc import Callable, Iterable, Sized
from typing import Any

from .errors import TemplateRuntimeError


class Markup(str):
    """A string that already is safe HTML and must not be escaped again."""

    __slots__ = ()

    def __html__(self) -> str:
        return str(self)


def escape(value: Any) -> str:
    """HTML-escape ``value`` unless it declares itself safe via ``__html__``."""
    if hasattr(value, "__html__"):
        return str(value.__html__())
    return html.escape(str(value), quote=True)


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _default(value: Any, fallback: Any) -> Any:
    return fallback if value is None or value == "" else value


def _join(value: Any, separator: Any = ", ") -> str:
    if value is None:
        return ""
    # A string is iterable, but joining its characters is never what the author meant.
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise TemplateRuntimeError(f"join expects a list, got {type(value).__name__}")
    return _text(separator).join(_text(item) for item in value)


def _length(value: Any) -> int:
    if value is None:
        return 0
    if not isinstance(value, Sized):
        raise TemplateRuntimeError(f"length expects a sized value, got {type(value).__name__}")
    return len(value)


def _truncate(value: Any, length: Any) -> str:
    if not isinstance(length, int) or isinstance(length, bool) or length < 0:
        raise TemplateRuntimeError("truncate length must be a non-negative integer")
    text = _text(value)
    if len(text) <= length:
        return text
    if length <= 3:
        return text[:length]
    # The ellipsis counts toward the limit so the result never exceeds ``length``.
    return text[: length - 3] + "..."


BUILTIN_FILTERS: dict[str, Callable[..., Any]] = {
    "upper": lambda value: _text(value).upper(),
    "lower": lambda value: _text(value).lower(),
    "default": _default,
    "join": _join,
    "length": _length,
    "truncate": _truncate,
    "safe": lambda value: Markup(_text(value)),
}
