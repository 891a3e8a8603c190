"""`python -m etude.environment`: the environment service on its own — real sessions, or the
`sim` environment (`ETUDE_ENVIRONMENT__BACKEND=sim`, `ETUDE_SIM__*`)."""

from __future__ import annotations

import contextlib

from etude.common.grpc_server import Registration, run_service
from etude.environment.config import EnvironmentSettings
from etude.environment.metrics import PrometheusObserver
from etude.environment.search_client import GrpcSearchBackend
from etude.environment.server import registration, registration_of, start_expiry
from etude.environment.sessions import SessionManager
from etude.environment.sim import SimEnvironment


async def build(
    settings: EnvironmentSettings, resources: contextlib.AsyncExitStack
) -> list[Registration]:
    config = settings.resolved()
    if config.backend == "sim":
        scenario, clock = settings.sim.load()
        return [registration_of(SimEnvironment(scenario, clock), config)]
    search = None
    if config.search_address:
        search = GrpcSearchBackend(config.search_address, settings.client)
        resources.push_async_callback(search.close)
    manager = SessionManager(config, settings.sandbox, search=search, observer=PrometheusObserver())
    resources.push_async_callback(manager.close_all)
    expiry = start_expiry(manager)
    resources.callback(expiry.cancel)
    return [registration(manager)]


if __name__ == "__main__":
    run_service("environment", build, EnvironmentSettings())
