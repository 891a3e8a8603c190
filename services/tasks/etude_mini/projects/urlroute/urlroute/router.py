"""Matching request paths to routes with typed parameters, and building URLs back."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from .encoding import build_query, quote, unquote
from .url import remove_dot_segments

_PARAMETER = re.compile(r"<(?:(?P<converter>[a-z]+):)?(?P<name>[A-Za-z_]\w*)>")


class RouteError(Exception):
    """A route definition is invalid, or a URL cannot be built from the given parameters."""


class NotFound(LookupError):
    """No route matches the path (HTTP 404)."""

    def __init__(self, path: str) -> None:
        super().__init__(f"no route matches {path!r}")
        self.path = path


class MethodNotAllowed(LookupError):
    """Some route matches the path, but none accepts the method (HTTP 405)."""

    def __init__(self, method: str, path: str, allowed: tuple[str, ...]) -> None:
        super().__init__(f"{method} is not allowed for {path!r}; allowed: {', '.join(allowed)}")
        self.allowed = allowed


class Converter:
    """Turns one path segment (for ``path``, the rest of the path) into a value and back.

    At the first segment where two routes differ, the lower ``weight`` (static text: 0) wins.
    """

    name = "str"
    weight = 3

    def to_python(self, text: str) -> object:
        if not text:
            raise ValueError("empty segment")
        return text

    def to_url(self, value: object) -> str:
        text = str(value)
        if not text:
            raise ValueError("must not be empty")
        return quote(text, safe="")


class IntConverter(Converter):
    name = "int"
    weight = 1

    def to_python(self, text: str) -> object:
        # Rejecting leading zeros keeps one canonical URL per value.
        if not (text.isascii() and text.isdigit()) or (len(text) > 1 and text[0] == "0"):
            raise ValueError(f"not a canonical non-negative integer: {text!r}")
        return int(text)

    def to_url(self, value: object) -> str:
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError("expects a non-negative int")
        return str(value)


class PathConverter(Converter):
    name = "path"
    weight = 4

    def to_url(self, value: object) -> str:
        return super().to_url(value).replace("%2F", "/")


CONVERTERS: dict[str, Converter] = {
    c.name: c for c in (Converter(), IntConverter(), PathConverter())
}


@dataclass(frozen=True)
class Parameter:
    name: str
    converter: Converter


Segment = str | Parameter


@dataclass(frozen=True)
class Route:
    pattern: str
    name: str
    methods: frozenset[str]
    handler: Any
    segments: tuple[Segment, ...]
    order: int = field(compare=False)

    @property
    def sort_key(self) -> tuple[tuple[int, ...], int]:
        weights = tuple(0 if isinstance(s, str) else s.converter.weight for s in self.segments)
        return weights, self.order

    def match(self, parts: list[str]) -> dict[str, object] | None:
        """Parameters if the decoded path ``parts`` fit this route, else ``None``."""
        last = self.segments[-1]
        tail = isinstance(last, Parameter) and last.converter.name == "path"
        if len(parts) < len(self.segments) or (not tail and len(parts) > len(self.segments)):
            return None
        params: dict[str, object] = {}
        for index, segment in enumerate(self.segments):
            if isinstance(segment, str):
                if parts[index] != segment:
                    return None
                continue
            # A "path" parameter is always last and takes all remaining parts.
            text = "/".join(parts[index:]) if segment.converter.name == "path" else parts[index]
            try:
                params[segment.name] = segment.converter.to_python(text)
            except ValueError:
                return None
        return params


@dataclass(frozen=True)
class Match:
    route: Route
    params: dict[str, object]


class Router:
    """Routes tried most specific first: static text, then ``int``, ``str`` and ``path``."""

    def __init__(self) -> None:
        self._routes: list[Route] = []
        self._by_name: dict[str, Route] = {}

    def add(
        self,
        pattern: str,
        handler: Any = None,
        *,
        methods: Iterable[str] = ("GET",),
        name: str | None = None,
    ) -> Route:
        """Register ``pattern`` such as ``/users/<int:id>``; ``name`` defaults to the handler's."""
        method_set = frozenset(m.upper() for m in methods)
        if not method_set:
            raise RouteError(f"route {pattern!r} has no methods")
        name = name or getattr(handler, "__name__", None) or pattern
        if name in self._by_name:
            raise RouteError(f"route name {name!r} is already used")
        segments = _parse_pattern(pattern)
        shape = _shape(segments)
        for other in self._routes:
            if _shape(other.segments) == shape and other.methods & method_set:
                clash = ", ".join(sorted(other.methods & method_set))
                raise RouteError(f"{pattern!r} clashes with {other.pattern!r} for {clash}")
        route = Route(pattern, name, method_set, handler, segments, order=len(self._routes))
        self._routes.append(route)
        self._routes.sort(key=lambda r: r.sort_key)
        self._by_name[name] = route
        return route

    def match(self, method: str, path: str) -> Match:
        """Find the route for a request; raises :class:`NotFound` or :class:`MethodNotAllowed`."""
        method = method.upper()
        path = path.partition("?")[0]
        if not path.startswith("/"):
            raise NotFound(path)
        parts = [unquote(part) for part in remove_dot_segments(path)[1:].split("/")]
        allowed: set[str] = set()
        for route in self._routes:
            params = route.match(parts)
            if params is None:
                continue
            # HEAD is answered by GET handlers, as HTTP servers conventionally do.
            if method in route.methods or (method == "HEAD" and "GET" in route.methods):
                return Match(route, params)
            allowed |= route.methods
        if not allowed:
            raise NotFound(path)
        if "GET" in allowed:
            allowed.add("HEAD")
        raise MethodNotAllowed(method, path, tuple(sorted(allowed)))

    def url_for(self, name: str, /, **params: object) -> str:
        """Build the path for route ``name``; unknown parameters go into the query string."""
        route = self._by_name.get(name)
        if route is None:
            raise RouteError(f"no route named {name!r}")
        parts = []
        used = set()
        for segment in route.segments:
            if isinstance(segment, str):
                parts.append(quote(segment, safe=":@"))
                continue
            if segment.name not in params:
                raise RouteError(f"missing parameter {segment.name!r} for route {name!r}")
            try:
                parts.append(segment.converter.to_url(params[segment.name]))
            except ValueError as error:
                raise RouteError(f"parameter {segment.name!r}: {error}") from None
            used.add(segment.name)
        query = build_query((k, v) for k, v in params.items() if k not in used)
        return "/" + "/".join(parts) + (f"?{query}" if query else "")


def _parse_pattern(pattern: str) -> tuple[Segment, ...]:
    if not pattern.startswith("/"):
        raise RouteError(f"route pattern {pattern!r} must start with '/'")
    segments: list[Segment] = []
    names: set[str] = set()
    texts = pattern[1:].split("/")
    for index, text in enumerate(texts):
        found = _PARAMETER.fullmatch(text)
        if found is None:
            if "<" in text or ">" in text:
                raise RouteError(f"parameter must span a whole segment: {text!r}")
            segments.append(text)
            continue
        converter_name, name = found["converter"] or "str", found["name"]
        converter = CONVERTERS.get(converter_name)
        if converter is None:
            raise RouteError(f"unknown converter {converter_name!r} in {pattern!r}")
        if name in names:
            raise RouteError(f"parameter {name!r} appears twice in {pattern!r}")
        if converter.name == "path" and index != len(texts) - 1:
            raise RouteError(f"'path' parameter {name!r} must be the last segment")
        names.add(name)
        segments.append(Parameter(name, converter))
    return tuple(segments)


def _shape(segments: tuple[Segment, ...]) -> tuple[str, ...]:
    """What a route matches, ignoring parameter names: equal shapes match the same paths."""
    return tuple(s if isinstance(s, str) else f"<{s.converter.name}>" for s in segments)
