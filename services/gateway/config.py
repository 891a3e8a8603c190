"""Settings of the gateway (`ETUDE_GATEWAY__*`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from etude.common.settings import MIB, EtudeSettings, Section


class GatewayConfig(Section):
    http_port: int = Field(default=0, ge=0, le=65535)
    """Port of the HTTP API (`/runs`, `/tasksets`, `/docs`); 0 picks a free one."""
    launcher: Literal["local", "none"] = "local"
    """How `POST /runs` starts a run. `local`: spawn `etude train` on this machine;
    `none`: only record it as queued, for a controller (a RayJob) that picks queued runs up."""
    run_dir: Path | None = None
    """Where the local launcher writes each run's config and log (`<run_dir>/gateway/`);
    unset: the stack's run directory."""
    redis_timeout_seconds: float = Field(default=2.0, gt=0)
    """How long a Redis call may take before the request fails with 503."""
    reap_interval_seconds: float = Field(default=5.0, gt=0, le=3600)
    """How often the gateway ends runs whose driver is gone (`ETUDE_RUNS__*` says when a
    driver counts as gone)."""
    max_run_body_bytes: int = Field(default=256 * MIB, ge=1024)
    """Largest body of `POST /runs`: a run config with, from `etude runs start`, its task
    set's records (the 240 tasks of etude-mini take 6 MB). A larger `Content-Length` gets
    413 before any of the body is read; a chunked body gets it as soon as it passes the cap."""
    max_body_bytes: int = Field(default=64 * 1024, ge=1024)
    """Largest request body of every other route (none of them takes one)."""


class GatewaySettings(EtudeSettings):
    gateway: GatewayConfig = GatewayConfig()
