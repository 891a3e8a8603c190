"""The service runtime on real gRPC servers over loopback."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from prometheus_client.parser import text_string_to_metric_families

from etude.api.v1 import reward_pb2_grpc
from etude.common.auth import read_tokens
from etude.common.grpc_client import health_status, open_channel
from etude.common.grpc_server import ServiceRuntime
from etude.common.net import free_port
from etude.common.processes import spawn
from etude.common.settings import ClientSettings, GrpcSettings, get_settings
from tests.support.probe_service import SERVICE_NAME, ProbeServicer, probe_request, registration

REPO_ROOT = Path(__file__).resolve().parents[2]


@contextlib.asynccontextmanager
async def serving(**grpc_settings) -> AsyncIterator[tuple[ServiceRuntime, ProbeServicer]]:
    servicer = ProbeServicer()
    settings = GrpcSettings(**{"drain_seconds": 0.0, "grace_seconds": 1.0, **grpc_settings})
    runtime = ServiceRuntime("probe", settings, [registration(servicer)])
    await runtime.start()
    try:
        yield runtime, servicer
    finally:
        await runtime.shutdown()  # idempotent: a test may have shut it down already


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    """Samples of the /metrics page keyed by (name, labels)."""
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def scrape_when(url: str, settled, attempts: int = 50):
    """Scrape until `settled(samples)`: the server records a call just after the client has
    its answer (an aborted call's status goes out before the handler unwinds)."""
    for _ in range(attempts):
        samples = scrape(url)
        if settled(samples):
            break
        await asyncio.sleep(0.05)
    return samples


def grew(before, method: str, code: str):
    return lambda now: handled(now, method, code) > handled(before, method, code)


def handled(samples, method: str, code: str) -> float:
    labels = frozenset({"service": SERVICE_NAME, "method": method, "code": code}.items())
    return samples.get(("etude_grpc_server_handled_total", labels), 0.0)


async def check(channel: grpc.aio.Channel, service: str = "") -> str:
    stub = health_pb2_grpc.HealthStub(channel)
    reply = await stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=2)
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


async def test_health_is_serving_then_not_serving_while_draining():
    async with (
        serving(drain_seconds=1.5) as (runtime, _),
        grpc.aio.insecure_channel(runtime.address) as channel,
    ):
        assert await check(channel) == "SERVING"
        assert await check(channel, SERVICE_NAME) == "SERVING"
        shutdown = runtime.request_shutdown()
        await asyncio.sleep(0.2)
        # Still answering, but telling probes to go away.
        assert await check(channel) == "NOT_SERVING"
        assert await check(channel, SERVICE_NAME) == "NOT_SERVING"
        await shutdown
    assert health_status(runtime.address, timeout=0.5) == "UNREACHABLE"


async def test_reflection_lists_every_service():
    async with serving() as (runtime, _):
        async with grpc.aio.insecure_channel(runtime.address) as channel:
            stub = reflection_pb2_grpc.ServerReflectionStub(channel)
            request = reflection_pb2.ServerReflectionRequest(list_services="")
            async for reply in stub.ServerReflectionInfo(iter([request])):
                names = {s.name for s in reply.list_services_response.service}
                break
        assert names == {
            SERVICE_NAME,
            "grpc.health.v1.Health",
            "grpc.reflection.v1alpha.ServerReflection",
        }


async def test_metrics_endpoint_counts_calls_by_code():
    async with serving() as (runtime, _):
        before = scrape(runtime.metrics_url)
        async with open_channel(runtime.address, ClientSettings()) as channel:
            stub = reward_pb2_grpc.RewardServiceStub(channel)
            for _ in range(3):
                await stub.Score(probe_request("ok"), timeout=5)
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await stub.Score(probe_request("not-found"), timeout=5)
            assert error.value.code() == grpc.StatusCode.NOT_FOUND
        after = await scrape_when(runtime.metrics_url, grew(before, "Score", "NOT_FOUND"))
        assert handled(after, "Score", "OK") - handled(before, "Score", "OK") == 3
        assert handled(after, "Score", "NOT_FOUND") - handled(before, "Score", "NOT_FOUND") == 1
        count_key = (
            "etude_grpc_server_handling_seconds_count",
            frozenset({"service": SERVICE_NAME, "method": "Score"}.items()),
        )
        assert after[count_key] - before.get(count_key, 0.0) == 4


async def test_a_passed_deadline_is_deadline_exceeded_on_both_sides():
    async with serving() as (runtime, _):
        before = scrape(runtime.metrics_url)
        async with open_channel(runtime.address, ClientSettings()) as channel:
            stub = reward_pb2_grpc.RewardServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await stub.Score(probe_request("sleep=5"), timeout=0.3)
        assert error.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        # The server cancels the handler at the deadline and records why.
        after = await scrape_when(runtime.metrics_url, grew(before, "Score", "DEADLINE_EXCEEDED"))
        assert (
            handled(after, "Score", "DEADLINE_EXCEEDED")
            - handled(before, "Score", "DEADLINE_EXCEEDED")
            == 1
        )


async def test_an_oversize_message_is_refused_and_the_server_lives_on():
    async with serving(max_message_bytes=4096) as (runtime, _):
        async with open_channel(runtime.address, ClientSettings()) as channel:
            stub = reward_pb2_grpc.RewardServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await stub.Score(probe_request("x" * 10_000), timeout=5)
            assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            reply = await stub.Score(probe_request("ok"), timeout=5)
            assert reply.reward == 1


async def test_client_retries_unavailable_with_backoff():
    settings = ClientSettings(max_attempts=4, initial_backoff_seconds=0.01)
    async with serving() as (runtime, servicer):
        async with open_channel(runtime.address, settings) as channel:
            stub = reward_pb2_grpc.RewardServiceStub(channel)
            reply = await stub.Score(probe_request("fail=UNAVAILABLEx2"))
            assert reply.reward == 3  # two refused attempts, then the answer (the third call)
            # Codes that are not transient are not retried.
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await stub.Score(probe_request("fail=INTERNALx2"))
            assert error.value.code() == grpc.StatusCode.INTERNAL
            assert servicer.calls["fail=INTERNALx2"] == 1


async def test_client_default_deadline_applies_without_a_timeout():
    settings = ClientSettings(timeout_seconds=0.3)
    async with serving() as (runtime, _):
        async with open_channel(runtime.address, settings) as channel:
            stub = reward_pb2_grpc.RewardServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await stub.Score(probe_request("sleep=3"))
            assert error.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


async def test_a_long_method_gets_the_long_deadline_and_the_others_keep_theirs():
    """A generation or a grading lasts as long as its work: the ordinary deadline must not
    cut it (a per-call timeout cannot lengthen what the service config sets)."""
    # gRPC may start a service config's deadline up to about a second before the call, so
    # the margins are wide.
    settings = ClientSettings(timeout_seconds=0.3, long_call_timeout_seconds=4.0)
    async with serving() as (runtime, _):
        long_methods = (f"{SERVICE_NAME}/Score",)
        async with open_channel(runtime.address, settings, long_methods=long_methods) as channel:
            stub = reward_pb2_grpc.RewardServiceStub(channel)
            reply = await stub.Score(probe_request("sleep=1.5"), timeout=10)
            assert reply.reward == 1
            with pytest.raises(grpc.aio.AioRpcError) as error:  # bounded all the same
                await stub.Score(probe_request("sleep=8"), timeout=10)
            assert error.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        async with open_channel(runtime.address, settings) as channel:  # not named: 0.3 s
            stub = reward_pb2_grpc.RewardServiceStub(channel)
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await stub.Score(probe_request("sleep=1.5"), timeout=10)
            assert error.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


@pytest.mark.integration
def test_sigterm_drains_finishes_calls_in_flight_and_exits_cleanly(tmp_path):
    port, metrics_port = free_port(), free_port()
    env = {
        **os.environ,
        "ETUDE_GRPC__PORT": str(port),
        "ETUDE_GRPC__METRICS_PORT": str(metrics_port),
        "ETUDE_GRPC__DRAIN_SECONDS": "3",
        "ETUDE_GRPC__GRACE_SECONDS": "5",
    }
    argv = [sys.executable, "-m", "tests.support.probe_service"]
    proc = spawn(argv, log_path=tmp_path / "probe.log", env=env, cwd=REPO_ROOT)
    address = f"127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while health_status(address, timeout=0.5) != "SERVING":
            assert proc.poll() is None, (tmp_path / "probe.log").read_text()
            assert time.monotonic() < deadline, "service never became healthy"
            time.sleep(0.1)
        with grpc.insecure_channel(address) as channel:
            stub = reward_pb2_grpc.RewardServiceStub(channel)
            operator = read_tokens(get_settings().auth.tokens_dir)["operator"]
            in_flight = stub.Score.future(
                probe_request("sleep=2.0"),
                timeout=20,
                metadata=(("authorization", f"Bearer {operator}"),),
            )
            time.sleep(0.3)
            proc.send_signal(signal.SIGTERM)
            # Within the drain window the server still answers, saying it is going away.
            statuses = []
            while len(statuses) < 50 and "NOT_SERVING" not in statuses:
                statuses.append(health_status(address))
                time.sleep(0.05)
            assert "NOT_SERVING" in statuses, statuses
            assert in_flight.result().reward == 1
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
