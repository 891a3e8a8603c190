"""The only way out of an environment build's sandbox: an HTTP proxy on the host that opens
connections to the package index and to nothing else.

A build runs the repository's code (`setup.py`, a build backend) in a sandbox whose network
namespace holds only its own loopback (etude.tasks.pyenv_build). When packages come from an
index, a relay inside it (etude.tasks.index_relay) listens on that loopback and carries each
connection over a unix socket bound in from the host to this proxy, which reads the first
request — `CONNECT host:port` (https) or `GET http://host:port/…` (http) — and connects only
when `host:port` is one of the index's. Everything after that is bytes between the sandbox
and the index: the host's loopback services (Redis, the gRPC ports), its network and any
other address stay out of reach, whatever the code in the sandbox sends.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterable
from pathlib import Path
from urllib.parse import urlsplit

from etude.tasks.index_relay import splice

PYPI_HOSTS = frozenset({("pypi.org", 443), ("files.pythonhosted.org", 443)})
"""PyPI's pages and the host its files are served from."""
MAX_HEAD_BYTES = 16 * 1024
MAX_CONNECTIONS = 64
"""Connections open at once; more are closed at once (pip opens a handful)."""
IDLE_TIMEOUT_S = 300.0
CONNECT_TIMEOUT_S = 30.0


class IndexHostError(ValueError):
    """An index address or host that names no `host[:port]` the proxy could allow."""


def index_hosts(index_url: str | None, extra: Iterable[str] = ()) -> frozenset[tuple[str, int]]:
    """The `(host, port)` pairs a build may reach: the index's (PyPI's when `index_url` is
    None), and `extra` (`host` or `host:port`, port 443 unless given) for an index that
    serves its files from another host."""
    if index_url is None:
        allowed = set(PYPI_HOSTS)
    else:
        parts = urlsplit(index_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise IndexHostError(f"index URL {index_url!r} is not an http(s) address of a host")
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError as error:
            raise IndexHostError(f"index URL {index_url!r}: {error}") from None
        allowed = {(parts.hostname.lower(), port)}
    for entry in extra:
        allowed.add(_host_port(entry, 443))
    return frozenset(allowed)


def _host_port(text: str, default_port: int) -> tuple[str, int]:
    """`host`, `host:port`, `[v6]` or `[v6]:port` → (lowercase host, port)."""
    host, port = text.strip(), default_port
    if host.startswith("["):
        inside, _, rest = host[1:].partition("]")
        host = inside
        if rest.startswith(":"):
            port = _port(rest[1:], text)
        elif rest:
            raise IndexHostError(f"{text!r} is not host[:port]")
    elif host.count(":") == 1:
        host, _, number = host.partition(":")
        port = _port(number, text)
    if not host or any(c in host for c in "/@ \t\r\n"):
        raise IndexHostError(f"{text!r} is not host[:port]")
    return host.lower().rstrip("."), port


def _port(number: str, text: str) -> int:
    if not number.isdigit() or not 0 < int(number) < 65536:
        raise IndexHostError(f"{text!r}: no port {number!r}")
    return int(number)


class IndexProxy:
    """The proxy, listening on the unix socket `path` while the context lasts."""

    def __init__(self, path: Path, allowed: frozenset[tuple[str, int]]) -> None:
        self.path = path
        self.allowed = allowed
        self.refused: list[str] = []
        """`host:port` asked for and refused, for the build's error message."""
        self._slots = threading.BoundedSemaphore(MAX_CONNECTIONS)
        self._stop = threading.Event()
        self._listener: socket.socket | None = None
        self._thread: threading.Thread | None = None

    def __enter__(self) -> IndexProxy:
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(str(self.path))
        listener.listen(16)
        listener.settimeout(0.2)  # so the accept loop sees the stop flag
        self._listener = listener
        self._thread = threading.Thread(target=self._serve, name="index-proxy", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._listener is not None:
            self._listener.close()
        with contextlib.suppress(OSError):
            self.path.unlink()

    def _serve(self) -> None:
        assert self._listener is not None
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._slots.acquire(blocking=False):
                client.close()
                continue
            threading.Thread(target=self._handle, args=(client,), daemon=True).start()

    def _handle(self, client: socket.socket) -> None:
        try:
            client.settimeout(IDLE_TIMEOUT_S)
            upstream = self._open(client)
            if upstream is not None:
                with upstream:
                    splice(client, upstream)
        except OSError:
            pass
        finally:
            client.close()
            self._slots.release()

    def _open(self, client: socket.socket) -> socket.socket | None:
        """Read the request's head and connect where it asks, if allowed; None after
        answering it with an error."""
        head, rest = _read_head(client)
        if head is None:
            return None
        request_line, *headers = head.split(b"\r\n")
        words = request_line.split(b" ")
        if len(words) != 3:
            return _answer(client, 400, "Bad Request")
        method, target, version = (w.decode("latin-1") for w in words)
        try:
            if method == "CONNECT":
                host, port = _host_port(target, 443)
                forward = None
            else:
                parts = urlsplit(target)
                if parts.scheme != "http" or not parts.hostname:
                    return _answer(client, 400, "Bad Request")
                host, port = parts.hostname.lower().rstrip("."), parts.port or 80
                path = parts.path or "/"
                forward = _origin_request(method, path, parts.query, version, headers) + rest
        except (IndexHostError, ValueError):
            return _answer(client, 400, "Bad Request")
        if (host, port) not in self.allowed:
            self.refused.append(f"{host}:{port}")
            return _answer(client, 403, "Forbidden (not the package index)")
        try:
            upstream = socket.create_connection((host, port), timeout=CONNECT_TIMEOUT_S)
        except OSError:
            return _answer(client, 502, "Bad Gateway")
        upstream.settimeout(IDLE_TIMEOUT_S)
        if forward is None:
            client.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")
            if rest:
                upstream.sendall(rest)
        else:
            upstream.sendall(forward)
        return upstream


def _read_head(client: socket.socket) -> tuple[bytes | None, bytes]:
    """(the request's head without its blank line, the bytes read after it)."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD_BYTES:
            return None, b""
        chunk = client.recv(4096)
        if not chunk:
            return None, b""
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    return head, rest


def _origin_request(
    method: str, path: str, query: str, version: str, headers: list[bytes]
) -> bytes:
    """A proxied http request as the origin expects it: its path alone, no proxy headers,
    and `Connection: close`, so a later request on the connection cannot go on to another
    host over this one."""
    target = f"{path}?{query}" if query else path
    dropped = (b"proxy-connection:", b"proxy-authorization:", b"connection:", b"keep-alive:")
    kept = [h for h in headers if not h.lower().startswith(dropped)]
    lines = [f"{method} {target} {version}".encode("latin-1"), *kept, b"Connection: close"]
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _answer(client: socket.socket, code: int, reason: str) -> None:
    body = f"{code} {reason}\n".encode()
    head = f"HTTP/1.1 {code} {reason}\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    with contextlib.suppress(OSError):
        client.sendall(head.encode() + body)
