"""What `etude status` reports: each component of the local stack and its health, and which
credentials are set (role, file, fingerprint — never a token or the Redis password)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from etude.cli.stack import AUTH_DIR, STATE_FILE, StackState
from etude.common.auth import ROLES, fingerprint, read_tokens
from etude.common.grpc_client import health_status
from etude.common.processes import pid_alive
from etude.common.redis_server import redacted, redis_health


@dataclass(frozen=True, slots=True)
class CredentialStatus:
    role: str
    path: str
    fingerprint: str | None
    """`sha256:<12 hex>` of the token; None when the file is missing."""

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


def credentials(tokens_dir: Path) -> list[CredentialStatus]:
    tokens = read_tokens(tokens_dir)
    return [
        CredentialStatus(
            role, str(tokens_dir / role), fingerprint(tokens[role]) if role in tokens else None
        )
        for role in ROLES
    ]


@dataclass(frozen=True, slots=True)
class ComponentStatus:
    name: str
    address: str
    metrics_url: str | None
    health: str  # SERVING, NOT_SERVING, UNREACHABLE, ...
    pid: int
    alive: bool
    http_url: str | None = None

    def as_dict(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class StackStatus:
    run_dir: str
    supervisor_pid: int
    supervisor_alive: bool
    redis_url: str
    components: list[ComponentStatus]
    credentials: list[CredentialStatus] = field(default_factory=list)
    starting: bool = False
    """The supervisor is still starting services: not ready, however healthy the first."""

    @property
    def healthy(self) -> bool:
        serving = all(c.health == "SERVING" for c in self.components)
        return self.supervisor_alive and not self.starting and serving

    def as_dict(self) -> dict[str, object]:
        return {
            "run_dir": self.run_dir,
            "supervisor_pid": self.supervisor_pid,
            "supervisor_alive": self.supervisor_alive,
            "redis_url": redacted(self.redis_url),
            "redis_password_set": "@" in self.redis_url,
            "healthy": self.healthy,
            "starting": self.starting,
            "services": [c.as_dict() for c in self.components],
            "credentials": [c.as_dict() for c in self.credentials],
        }


def read_status(run_dir: Path, tokens_dir: Path | None = None) -> StackStatus | None:
    """The stack recorded in `run_dir`, probed now; None when no stack was started there.
    `tokens_dir` unset: the stack's own, `<run_dir>/auth`."""
    path = run_dir / STATE_FILE
    if not path.is_file():
        return None
    state = StackState.read(path)
    components = []
    for c in state.components:
        health = redis_health(state.redis_url) if c.kind == "redis" else health_status(c.address)
        components.append(
            ComponentStatus(
                c.name, c.address, c.metrics_url, health, c.pid, pid_alive(c.pid), c.http_url
            )
        )
    return StackStatus(
        state.run_dir,
        state.supervisor_pid,
        pid_alive(state.supervisor_pid),
        state.redis_url,
        components,
        credentials(tokens_dir or run_dir / AUTH_DIR),
        state.starting,
    )
