"""The index proxy environment builds reach the network through: which hosts an index
allows, and a real proxy on a unix socket that connects to those and refuses the rest."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from etude.tasks.index_proxy import PYPI_HOSTS, IndexHostError, IndexProxy, index_hosts


def test_an_index_allows_its_own_host_and_port_and_the_extra_hosts():
    assert index_hosts(None) == PYPI_HOSTS
    assert index_hosts("https://Pypi.Example/simple") == {("pypi.example", 443)}
    assert index_hosts("http://127.0.0.1:3141/root/pypi/+simple/") == {("127.0.0.1", 3141)}
    extra = ["files.example", "cdn.example:8443", "[::1]:9000"]
    expected = {("idx.example", 443), ("files.example", 443), ("cdn.example", 8443), ("::1", 9000)}
    assert index_hosts("https://idx.example/simple", extra) == expected
    for bad in ("file:///srv/wheels", "ftp://x.example/", "https:///simple", "https://x:99999/"):
        with pytest.raises(IndexHostError):
            index_hosts(bad)
    for bad in ("user@evil.example", "evil.example:0", "a b", ""):
        with pytest.raises(IndexHostError):
            index_hosts(None, [bad])


@contextlib.contextmanager
def origin() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP server on loopback that records what each connection sends and answers `ok`."""
    received: list[bytes] = []
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                connection, _ = server.accept()
                with connection:
                    data = connection.recv(65536)
                    received.append(data)
                    connection.sendall(b"ok:" + data[:20])

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield server.getsockname()[1], received
    finally:
        server.close()


def ask(path: Path, request: bytes) -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.settimeout(10)
        client.connect(str(path))
        client.sendall(request)
        answer = b""
        with contextlib.suppress(TimeoutError):
            while chunk := client.recv(65536):
                answer += chunk
                if request.startswith(b"CONNECT") and answer.endswith(b"\r\n\r\n"):
                    client.sendall(b"through the tunnel")
                    request = b""
        return answer


def test_the_proxy_connects_to_the_index_and_refuses_everything_else(tmp_path):
    sock = tmp_path / "proxy.sock"
    with origin() as (index, received), origin() as (other, other_received):
        with IndexProxy(sock, frozenset({("127.0.0.1", index)})) as proxy:
            tunnel = ask(sock, f"CONNECT 127.0.0.1:{index} HTTP/1.1\r\n\r\n".encode())
            assert tunnel.startswith(b"HTTP/1.1 200")
            assert tunnel.endswith(b"ok:through the tunnel")
            get = (
                f"GET http://127.0.0.1:{index}/simple/x/?a=1 HTTP/1.1\r\n"
                f"Host: 127.0.0.1:{index}\r\nProxy-Connection: keep-alive\r\n\r\n"
            )
            assert ask(sock, get.encode()) == b"ok:GET /simple/x/?a=1 H"
            forwarded = received[-1].decode()
            assert "Connection: close\r\n" in forwarded and "Proxy-Connection" not in forwarded
            refused = [
                f"CONNECT 127.0.0.1:{other} HTTP/1.1\r\n\r\n",
                f"GET http://127.0.0.1:{other}/ HTTP/1.1\r\n\r\n",
                f"CONNECT localhost:{index} HTTP/1.1\r\n\r\n",  # the name, not the address
            ]
            for request in refused:
                assert ask(sock, request.encode()).startswith(b"HTTP/1.1 403"), request
            for bad in (f"GET https://127.0.0.1:{index}/ HTTP/1.1\r\n\r\n", "nonsense\r\n\r\n"):
                assert ask(sock, bad.encode()).startswith(b"HTTP/1.1 400"), bad
            assert other_received == [] and len(received) == 2
            assert set(proxy.refused) == {f"127.0.0.1:{other}", f"localhost:{index}"}
        assert not sock.exists()
