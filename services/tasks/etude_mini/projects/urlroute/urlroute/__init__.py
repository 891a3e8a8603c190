"""URL parsing, percent-encoding and a small router with typed path parameters."""

from .encoding import URLError, build_query, parse_query, quote, unquote
from .router import Match, MethodNotAllowed, NotFound, Route, RouteError, Router
from .url import URL, remove_dot_segments

__all__ = [
    "URL",
    "Match",
    "MethodNotAllowed",
    "NotFound",
    "Route",
    "RouteError",
    "Router",
    "URLError",
    "build_query",
    "parse_query",
    "quote",
    "remove_dot_segments",
    "unquote",
]
