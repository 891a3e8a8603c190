"""Parsing, building, normalising and resolving URLs."""

from __future__ import annotations

import string
from dataclasses import dataclass, replace

from .encoding import URLError, normalize_escapes, parse_query

DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}
_SCHEME_CHARS = frozenset(string.ascii_letters + string.digits + "+-.")
_HOST_CHARS = frozenset(string.ascii_letters + string.digits + "-._~%!$&'()*+,;=")


@dataclass(frozen=True)
class URL:
    """A URL split into its RFC 3986 components.

    Components keep their percent-encoded form. ``None`` means "absent", which differs from
    empty: ``http://h/?`` has an empty query, ``http://h/`` has none.
    """

    scheme: str = ""
    userinfo: str | None = None
    host: str | None = None
    port: int | None = None
    path: str = ""
    query: str | None = None
    fragment: str | None = None

    @classmethod
    def parse(cls, text: str) -> URL:
        rest, hash_sign, fragment = text.partition("#")
        rest, question_mark, query = rest.partition("?")
        scheme = ""
        colon, slash = rest.find(":"), rest.find("/")
        if colon > 0 and (slash == -1 or colon < slash):
            scheme = rest[:colon]
            if not scheme[0].isalpha() or not set(scheme) <= _SCHEME_CHARS:
                raise URLError(f"invalid scheme {scheme!r}")
            rest = rest[colon + 1 :]
        userinfo = host = port = None
        if rest.startswith("//"):
            end = rest.find("/", 2)
            end = len(rest) if end == -1 else end
            userinfo, host, port = _parse_authority(rest[2:end])
            rest = rest[end:]
        query_part = query if question_mark else None
        return cls(scheme, userinfo, host, port, rest, query_part, fragment if hash_sign else None)

    def __str__(self) -> str:
        out = f"{self.scheme}:" if self.scheme else ""
        path = self.path
        if self.host is not None:
            host = f"[{self.host}]" if ":" in self.host else self.host
            userinfo = "" if self.userinfo is None else f"{self.userinfo}@"
            port = "" if self.port is None else f":{self.port}"
            out += f"//{userinfo}{host}{port}"
            # With an authority present the path must be empty or start with "/".
            if path and not path.startswith("/"):
                path = "/" + path
        out += path
        if self.query is not None:
            out += f"?{self.query}"
        if self.fragment is not None:
            out += f"#{self.fragment}"
        return out

    @property
    def effective_port(self) -> int | None:
        """The explicit port, or the scheme's well-known one."""
        return self.port if self.port is not None else DEFAULT_PORTS.get(self.scheme.lower())

    def query_dict(self) -> dict[str, list[str]]:
        """Query values grouped by key, in order of first appearance."""
        grouped: dict[str, list[str]] = {}
        for key, value in parse_query(self.query or ""):
            grouped.setdefault(key, []).append(value)
        return grouped

    def normalized(self) -> URL:
        """Syntax-based normalisation (RFC 3986 section 6.2.2) plus dropping default ports."""
        scheme = self.scheme.lower()
        port = None if self.port == DEFAULT_PORTS.get(scheme) else self.port
        path = remove_dot_segments(normalize_escapes(self.path))
        if self.host is not None and not path:
            path = "/"
        host = None if self.host is None else normalize_escapes(self.host).lower()
        query, fragment = (
            None if part is None else normalize_escapes(part)
            for part in (self.query, self.fragment)
        )
        return URL(scheme, self.userinfo, host, port, path, query, fragment)

    def resolve(self, reference: str | URL) -> URL:
        """Resolve a reference against this base URL (RFC 3986 section 5.2.2)."""
        ref = URL.parse(reference) if isinstance(reference, str) else reference
        if ref.scheme:
            return replace(ref, path=remove_dot_segments(ref.path))
        if ref.host is not None:
            return replace(ref, scheme=self.scheme, path=remove_dot_segments(ref.path))
        if not ref.path:
            path = self.path
            query = self.query if ref.query is None else ref.query
        elif ref.path.startswith("/"):
            path, query = remove_dot_segments(ref.path), ref.query
        else:
            path, query = remove_dot_segments(self._merge(ref.path)), ref.query
        return replace(self, path=path, query=query, fragment=ref.fragment)

    def _merge(self, relative: str) -> str:
        if self.host is not None and not self.path:
            return "/" + relative
        return self.path[: self.path.rfind("/") + 1] + relative


def _parse_authority(authority: str) -> tuple[str | None, str, int | None]:
    userinfo, at_sign, hostport = authority.rpartition("@")
    if hostport.startswith("["):
        close = hostport.find("]")
        if close == -1:
            raise URLError(f"unterminated IPv6 address in {authority!r}")
        host, after = hostport[1:close], hostport[close + 1 :]
        if after and not after.startswith(":"):
            raise URLError(f"unexpected {after!r} after IPv6 address")
        port_text = after[1:]
    else:
        host, _, port_text = hostport.partition(":")
        bad = set(host) - _HOST_CHARS
        if bad:
            raise URLError(f"invalid character {min(bad)!r} in host {host!r}")
    port = None
    if port_text:
        if not (port_text.isascii() and port_text.isdigit()):
            raise URLError(f"invalid port {port_text!r}")
        port = int(port_text)
        if port > 65535:
            raise URLError(f"port {port} is out of range")
    return (userinfo if at_sign else None), host, port


def remove_dot_segments(path: str) -> str:
    """Resolve ``.`` and ``..`` segments; ``..`` never climbs above the root."""
    absolute = path.startswith("/")
    segments = path.split("/")[1:] if absolute else path.split("/")
    output: list[str] = []
    for index, segment in enumerate(segments):
        is_last = index == len(segments) - 1
        if segment in (".", ".."):
            if segment == ".." and output:
                output.pop()
            # A trailing dot segment still names a directory, so keep the trailing slash.
            if is_last:
                output.append("")
        else:
            output.append(segment)
    joined = "/".join(output)
    return "/" + joined if absolute else joined
