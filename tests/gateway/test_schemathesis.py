"""Property-based checks of the gateway's published OpenAPI schema (schemathesis): requests
generated from the schema, valid and invalid, to every operation, against the app
in-process over a real Redis. Nothing a client sends may make the gateway answer 5xx.

Hypothesis drives each operation's strategy directly: schemathesis' lazy pytest loader
(`schemathesis.pytest.from_fixture`), which would let the schema come from a fixture, does
not run under pytest 9, and the app needs the `redis_url` fixture.
"""

from __future__ import annotations

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.python.asgi import shutdown_lifespans

from etude.common.auth import bearer_header
from etude.common.settings import get_settings
from etude.gateway.app import create_app
from etude.gateway.launcher import RecordOnlyLauncher

# Requests carry the operator's token, so they reach the validation under test (the
# credential check itself is tests/security/test_credentials.py's).
OPERATOR = bearer_header(get_settings().auth, "operator")

# The operations, from the schema of an app that is never started (building the schema
# needs no Redis).
PATHS = create_app("redis://unused", RecordOnlyLauncher()).openapi()["paths"]
OPERATIONS = [(method.upper(), path) for path, methods in PATHS.items() for method in methods]

# Invalid requests exist only where the schema constrains something (a body, a bounded
# query); a path parameter that takes any string has no invalid value to generate.
CONSTRAINED = {("POST", "/runs"), ("GET", "/runs")}
CASES = [(*operation, GenerationMode.POSITIVE) for operation in OPERATIONS] + [
    (*operation, GenerationMode.NEGATIVE) for operation in OPERATIONS if operation in CONSTRAINED
]


@pytest.fixture
def gateway_schema(redis_url):
    app = create_app(redis_url, RecordOnlyLauncher())
    yield schemathesis.openapi.from_asgi("/openapi.json", app)
    # schemathesis keeps an app's lifespan (here: its Redis client) open until exit.
    shutdown_lifespans()


def test_every_operation_is_covered():
    assert {path for _method, path in OPERATIONS} == {
        "/health", "/runs", "/runs/{run_id}", "/runs/{run_id}/stop", "/tasksets",
        "/runs/{run_id}/metrics", "/runs/{run_id}/trajectories",
    }  # fmt: skip


@pytest.mark.parametrize(("method", "path", "mode"), CASES, ids=str)
def test_no_request_makes_the_gateway_fail(gateway_schema, method, path, mode):
    operation = gateway_schema[path][method]

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(max_examples=40, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))  # fmt: skip
    def check(case):
        case.call_and_validate(checks=[not_a_server_error], headers=OPERATOR)

    check()
