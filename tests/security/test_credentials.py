"""A caller on the network without the right credential drives nothing.

Real services on loopback (ServiceRuntime with the real servicers), a real redis-server, the
gateway app in-process. Each service is attacked with no token, a forged token and a valid
token of a role the method does not allow; each attack must be refused with the right code,
change nothing, and leave the service answering the right role. The tokens are the test
session's (the root conftest); a client here presents exactly the ones a test gives it.
"""

from __future__ import annotations

import asyncio
import datetime
import functools
import ipaddress
import json
import secrets
import sys
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import grpc
import pytest
import redis
import torch
from fastapi.testclient import TestClient
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from prometheus_client import REGISTRY

from etude.api.v1 import (
    common_pb2,
    environment_pb2,
    environment_pb2_grpc,
    inference_pb2,
    inference_pb2_grpc,
    reward_pb2,
    reward_pb2_grpc,
    search_pb2,
    search_pb2_grpc,
)
from etude.cli.stack import LocalStack, ServiceSpec
from etude.cli.status import read_status
from etude.common.auth import ROLES, fingerprint, read_tokens
from etude.common.grpc_client import health_status, open_channel
from etude.common.grpc_server import ServiceRuntime
from etude.common.settings import (
    AuthSettings,
    ClientSettings,
    EtudeSettings,
    GrpcSettings,
    StackSettings,
    get_settings,
)
from etude.environment.server import registration as environment_registration
from etude.gateway.app import create_app
from etude.gateway.launcher import LocalLauncher
from etude.inference.client import GrpcInference
from etude.inference.engine import EngineConfig
from etude.inference.server import InferenceServicer
from etude.inference.server import registration as inference_registration
from etude.inference.serving import Serving
from etude.inference.torch_backend import TorchBackend
from etude.model.checkpoint import build_model
from etude.model.tokenizer import load_tokenizer
from etude.reward.grader import Grader
from etude.reward.server import RewardServicer
from etude.reward.server import registration as reward_registration
from etude.tasks.store import TaskStore
from tests.inference.conftest import small_moe_config
from tests.support.probe_service import probe_request
from tests.support.probe_service import registration as probe_registration

UNAUTHENTICATED = grpc.StatusCode.UNAUTHENTICATED
PERMISSION_DENIED = grpc.StatusCode.PERMISSION_DENIED
TOKENS = read_tokens(get_settings().auth.tokens_dir)
FORGED = {"operator": secrets.token_urlsafe(32)}
NO_RETRY = ClientSettings(max_attempts=1, timeout_seconds=30)

Call = Callable[[grpc.aio.Channel], Awaitable[object]]


def as_role(*roles: str) -> dict[str, str]:
    return {role: TOKENS[role] for role in roles}


def refused(code: grpc.StatusCode) -> float:
    return sum(
        sample.value
        for metric in REGISTRY.collect()
        if metric.name == "etude_grpc_server_handled"
        for sample in metric.samples
        if sample.name.endswith("_total") and sample.labels.get("code") == code.name
    )


async def call_as(address: str, tokens: dict[str, str], call: Call) -> object:
    async with open_channel(address, NO_RETRY, tokens=tokens) as channel:
        return await call(channel)


async def assert_refused(address: str, call: Call, wrong_role: str) -> None:
    """No token and a forged one: UNAUTHENTICATED; a real token of `wrong_role`:
    PERMISSION_DENIED; and each refusal counted in the metrics by its code."""
    before = {code: refused(code) for code in (UNAUTHENTICATED, PERMISSION_DENIED)}
    for tokens, code in (
        ({}, UNAUTHENTICATED),
        (FORGED, UNAUTHENTICATED),
        (as_role(wrong_role), PERMISSION_DENIED),
    ):
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await call_as(address, tokens, call)
        assert error.value.code() == code, (tokens.keys(), error.value.details())
    assert refused(UNAUTHENTICATED) - before[UNAUTHENTICATED] == 2
    assert refused(PERMISSION_DENIED) - before[PERMISSION_DENIED] == 1


@pytest.fixture
async def serve() -> AsyncIterator[Callable[..., Awaitable[ServiceRuntime]]]:
    runtimes: list[ServiceRuntime] = []

    async def start(name: str, registrations, auth: AuthSettings | None = None):
        runtime = ServiceRuntime(name, GrpcSettings(drain_seconds=0), registrations, auth)
        await runtime.start()
        runtimes.append(runtime)
        return runtime

    yield start
    for runtime in runtimes:
        await runtime.shutdown()


# -- inference ---------------------------------------------------------------------------


@pytest.fixture
async def inference(serve):
    tokenizer = load_tokenizer()
    model = build_model(small_moe_config(len(tokenizer)), seed=0).eval()
    backend = TorchBackend(model, tokenizer, EngineConfig(max_num_seqs=4, max_model_len=256))
    servicer = InferenceServicer(Serving(backend), max_update_bytes=1 << 30)
    runtime = await serve("inference", [inference_registration(servicer)])
    yield runtime, backend
    await backend.close()


def greedy_request() -> inference_pb2.GenerateRequest:
    sampling = inference_pb2.SamplingParams(temperature=0, max_tokens=6)
    return inference_pb2.GenerateRequest(
        request_id="g", prompt_token_ids=[5, 6, 7], sampling=sampling
    )


async def generate(channel) -> list[int]:
    stub = inference_pb2_grpc.InferenceServiceStub(channel)
    return [t async for chunk in stub.Generate(greedy_request()) for t in chunk.token_ids]


async def policy_version(channel) -> int:
    stub = inference_pb2_grpc.InferenceServiceStub(channel)
    return (await stub.GetPolicy(inference_pb2.GetPolicyRequest())).version.version


def hostile_updates(backend) -> list[list[inference_pb2.WeightChunk]]:
    """The attacks seen on main: an empty update (moved the version), a huge version (the
    trainer's next update refused), zeros over the embedding matrix."""
    name = "model.embed_tokens.weight"
    embedding = dict(backend.engine.model.named_parameters())[name]
    zeros = torch.zeros_like(embedding, dtype=torch.float32)
    return [
        [inference_pb2.WeightChunk(version={"version": 1})],
        [inference_pb2.WeightChunk(version={"version": 1 << 62})],
        [
            inference_pb2.WeightChunk(version={"version": 2}),
            inference_pb2.WeightChunk(
                name=name, dtype="float32", shape=list(zeros.shape), data=zeros.numpy().tobytes()
            ),
        ],
    ]


async def test_update_weights_is_for_the_trainer_alone(inference):
    runtime, backend = inference
    embedding = backend.engine.model.model.embed_tokens.weight.detach().clone()
    before = await call_as(runtime.address, as_role("rollout"), generate)
    for stream in hostile_updates(backend):

        async def update(channel, stream=stream):
            stub = inference_pb2_grpc.InferenceServiceStub(channel)
            return await stub.UpdateWeights(iter(stream))

        # Every role but the trainer's is refused, the operator's included.
        for role in ("rollout", "gateway", "operator"):
            with pytest.raises(grpc.aio.AioRpcError) as error:
                await call_as(runtime.address, as_role(role), update)
            assert error.value.code() == PERMISSION_DENIED
        await assert_refused(runtime.address, update, wrong_role="rollout")
    # Nothing moved: version, weights, and what the policy generates.
    assert await call_as(runtime.address, as_role("rollout"), policy_version) == 0
    assert torch.equal(backend.engine.model.model.embed_tokens.weight, embedding)
    assert await call_as(runtime.address, as_role("rollout"), generate) == before
    # The trainer's credential still publishes (GrpcInference presents it by itself).
    trainer = GrpcInference(runtime.address)
    try:
        lm_head = backend.engine.model.lm_head.weight.detach().clone()
        await trainer.update_weights(1, [("lm_head.weight", lm_head)])
    finally:
        await trainer.close()
    assert await call_as(runtime.address, as_role("gateway"), policy_version) == 1


async def test_generate_needs_a_role_that_generates(inference):
    runtime, _ = inference
    await assert_refused(runtime.address, generate, wrong_role="environment")
    for role in ("rollout", "trainer", "gateway", "operator"):
        assert await call_as(runtime.address, as_role(role), generate)


async def test_health_and_reflection_answer_without_a_token(inference):
    runtime, _ = inference
    # The synchronous probe `etude up` uses, off the loop that serves.
    assert await asyncio.to_thread(health_status, runtime.address) == "SERVING"
    async with open_channel(runtime.address, NO_RETRY, tokens={}) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        reply = await health.Check(health_pb2.HealthCheckRequest(service=""), timeout=5)
        assert reply.status == health_pb2.HealthCheckResponse.SERVING
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        request = reflection_pb2.ServerReflectionRequest(list_services="")
        async for answer in stub.ServerReflectionInfo(iter([request])):
            names = {s.name for s in answer.list_services_response.service}
            break
    assert "etude.api.v1.InferenceService" in names


# -- environment -------------------------------------------------------------------------


async def test_sessions_open_only_for_the_rollout_role(serve, manager, repo):
    runtime = await serve("environment", [environment_registration(manager)])

    def create(path: str) -> Call:
        async def call(channel):
            stub = environment_pb2_grpc.EnvironmentServiceStub(channel)
            request = environment_pb2.CreateSessionRequest(
                task_id=common_pb2.TaskId(value="t"), repository_path=path
            )
            return await stub.CreateSession(request, timeout=60)

        return call

    # The attack seen on main: a caller opening the host's /etc as a repository.
    await assert_refused(runtime.address, create("/etc"), wrong_role="trainer")
    await assert_refused(runtime.address, create(str(repo)), wrong_role="gateway")
    assert manager.sessions == {}  # no refused call opened one
    opened = await call_as(runtime.address, as_role("rollout"), create(str(repo)))
    session = opened.session_id

    async def diff(channel):
        stub = environment_pb2_grpc.EnvironmentServiceStub(channel)
        return await stub.Diff(environment_pb2.DiffRequest(session_id=session), timeout=60)

    # The reward service reads the diff; the search role may not.
    await assert_refused(runtime.address, diff, wrong_role="environment")
    assert (await call_as(runtime.address, as_role("reward"), diff)).changed_paths == []

    async def close(channel):
        stub = environment_pb2_grpc.EnvironmentServiceStub(channel)
        return await stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=session))

    await assert_refused(runtime.address, close, wrong_role="reward")
    await call_as(runtime.address, as_role("rollout"), close)

    async def list_tools(channel):
        stub = environment_pb2_grpc.EnvironmentServiceStub(channel)
        return await stub.ListTools(environment_pb2.ListToolsRequest(), timeout=10)

    # The rollout renders its prompt from the tools the environment reports.
    await assert_refused(runtime.address, list_tools, wrong_role="trainer")
    assert (await call_as(runtime.address, as_role("rollout"), list_tools)).tools


# -- reward and search -------------------------------------------------------------------


async def test_score_needs_a_scoring_role(serve, tmp_path):
    servicer = RewardServicer(Grader(_reward_config(tmp_path), None), TaskStore(()), None)
    runtime = await serve("reward", [reward_registration(servicer)])

    async def score(channel):
        stub = reward_pb2_grpc.RewardServiceStub(channel)
        request = reward_pb2.ScoreRequest(task_id=common_pb2.TaskId(value="no-such-task"))
        return await stub.Score(request, timeout=10)

    await assert_refused(runtime.address, score, wrong_role="gateway")
    for role in ("rollout", "trainer", "operator"):
        # Past the credential check: the servicer itself answers.
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await call_as(runtime.address, as_role(role), score)
        assert error.value.code() == grpc.StatusCode.NOT_FOUND


def _reward_config(tmp_path: Path):
    from etude.reward.config import RewardConfig

    return RewardConfig(tasks_files=(), cache_dir=tmp_path / "cache")


async def test_search_answers_only_the_environment(serve, tmp_path):
    from etude.search.config import SearchConfig
    from etude.search.embedders import load_embedder
    from etude.search.embedding_cache import CachedEmbedder, EmbeddingCache
    from etude.search.engine import SearchEngine
    from etude.search.server import SearchServicer
    from etude.search.server import registration as search_registration

    embedder = CachedEmbedder(load_embedder("minilm"), EmbeddingCache(tmp_path / "e.sqlite3"))
    engine = SearchEngine(SearchConfig(index_roots=(tmp_path,)), embedder)
    runtime = await serve("search", [search_registration(SearchServicer(engine))])

    def index(root: str) -> Call:
        async def call(channel):
            stub = search_pb2_grpc.SearchServiceStub(channel)
            request = search_pb2.IndexWorkspaceRequest(workspace_id="w", root_path=root)
            return await stub.IndexWorkspace(request, timeout=60)

        return call

    # The attack seen on main: indexing a host directory and reading its snippets.
    await assert_refused(runtime.address, index("/etc"), wrong_role="rollout")

    async def query(channel):
        stub = search_pb2_grpc.SearchServiceStub(channel)
        request = search_pb2.QueryRequest(workspace_id="w", query="password")
        return await stub.Query(request, timeout=10)

    await assert_refused(runtime.address, query, wrong_role="trainer")
    with pytest.raises(grpc.aio.AioRpcError) as error:
        await call_as(runtime.address, as_role("environment"), query)
    assert error.value.code() == grpc.StatusCode.NOT_FOUND  # nothing was indexed


# -- metrics endpoint --------------------------------------------------------------------


def http_status(url: str, token: str | None) -> int:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as error:
        return error.code


async def test_metrics_can_require_the_operator(serve):
    auth = get_settings().auth.model_copy(update={"metrics_require_token": True})
    guarded = await serve("probe", [probe_registration()], auth)
    assert http_status(guarded.metrics_url, None) == 401
    assert http_status(guarded.metrics_url, FORGED["operator"]) == 401
    assert http_status(guarded.metrics_url, TOKENS["rollout"]) == 401
    assert http_status(guarded.metrics_url, TOKENS["operator"]) == 200
    open_by_default = await serve("probe", [probe_registration()])
    assert http_status(open_by_default.metrics_url, None) == 200


# -- gateway -----------------------------------------------------------------------------


def test_the_gateway_starts_lists_and_stops_runs_only_for_the_operator(redis_url, tmp_path):
    launcher = LocalLauncher(tmp_path, argv_prefix=(sys.executable, "-c", "pass"))
    body = {"config": {"name": "attack", "output_dir": "/tmp/chosen-by-caller"}, "run_id": "r1"}
    with TestClient(create_app(redis_url, launcher)) as client:
        assert client.get("/health").status_code == 200
        for headers, code in (
            ({}, 401),
            ({"Authorization": f"Bearer {FORGED['operator']}"}, 401),
            ({"Authorization": "Basic b3BlcmF0b3I6eA=="}, 401),
            ({"Authorization": f"Bearer {TOKENS['rollout']}"}, 403),
            ({"Authorization": f"Bearer {TOKENS['gateway']}"}, 403),
        ):
            assert client.post("/runs", json=body, headers=headers).status_code == code
            assert client.get("/runs", headers=headers).status_code == code
            assert client.get("/runs/r1", headers=headers).status_code == code
            assert client.post("/runs/r1/stop", headers=headers).status_code == code
            assert client.get("/tasksets", headers=headers).status_code == code
        assert launcher.processes == {}  # no refused call spawned anything
        operator = {"Authorization": f"Bearer {TOKENS['operator']}"}
        assert client.get("/runs", headers=operator).json() == []  # nor recorded a run
        run = {"config": {"name": "attack"}, "run_id": "r1"}
        assert client.post("/runs", json=run, headers=operator).status_code == 201
        assert set(launcher.processes) == {"r1"}
        assert [r["run_id"] for r in client.get("/runs", headers=operator).json()] == ["r1"]
        stopped = client.post("/runs/r1/stop", headers=operator)
        assert stopped.status_code == 202 and stopped.json()["stop_requested"]
    for process in launcher.processes.values():
        process.wait(timeout=30)


# -- Redis -------------------------------------------------------------------------------


def test_redis_refuses_callers_without_the_password(redis_server):
    anonymous = redis.Redis(host=redis_server.host, port=redis_server.port, socket_timeout=2)
    try:
        with pytest.raises(redis.exceptions.AuthenticationError):
            anonymous.execute_command("CONFIG", "SET", "dir", "/tmp")
        with pytest.raises(redis.exceptions.AuthenticationError):
            anonymous.xadd("etude:attack:rollouts", {"k": "v"})
    finally:
        anonymous.close()
    client = redis.Redis.from_url(redis_server.url)
    try:
        with pytest.raises(redis.exceptions.ResponseError, match="unknown command"):
            client.execute_command("CONFIG", "SET", "dbfilename", "authorized_keys")
        assert client.xadd("etude:check:stream", {"k": "v"})
        client.delete("etude:check:stream")
    finally:
        client.close()


# -- mTLS --------------------------------------------------------------------------------


def _certificates(directory: Path) -> dict[str, Path]:
    """A CA and a certificate it signs for 127.0.0.1 (server and client alike), and a
    second, unrelated CA's certificate (a stranger's), as PEM files."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = datetime.datetime.now(datetime.UTC)

    def name(common: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])

    def issue(subject: str, key, issuer_name, issuer_key, ca: bool) -> x509.Certificate:
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(subject))
            .issuer_name(issuer_name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if not ca:
            san = x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))])
            usage = x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            )
            builder = builder.add_extension(san, critical=False).add_extension(usage, False)
        return builder.sign(issuer_key, hashes.SHA256())

    def write(path: Path, data: bytes) -> Path:
        path.write_bytes(data)
        return path

    def key_pem(key) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    pem = serialization.Encoding.PEM
    files = {}
    for prefix in ("", "stranger_"):
        ca_key, leaf_key = (
            ec.generate_private_key(ec.SECP256R1()),
            ec.generate_private_key(ec.SECP256R1()),
        )
        ca = issue(f"{prefix}ca", ca_key, name(f"{prefix}ca"), ca_key, ca=True)
        leaf = issue(f"{prefix}leaf", leaf_key, ca.subject, ca_key, ca=False)
        files[f"{prefix}ca"] = write(directory / f"{prefix}ca.pem", ca.public_bytes(pem))
        files[f"{prefix}cert"] = write(directory / f"{prefix}cert.pem", leaf.public_bytes(pem))
        files[f"{prefix}key"] = write(directory / f"{prefix}key.pem", key_pem(leaf_key))
    return files


async def test_with_mtls_a_client_without_a_certificate_cannot_connect(serve, tmp_path):
    files = _certificates(tmp_path)
    tls = get_settings().auth.model_copy(
        update={
            "tls_cert_file": files["cert"],
            "tls_key_file": files["key"],
            "tls_ca_file": files["ca"],
        }
    )
    runtime = await serve("probe", [probe_registration()], tls)

    async def status(channel):
        stub = reward_pb2_grpc.RewardServiceStub(channel)
        return await stub.Score(probe_request("ok"), timeout=5)

    # Plain text, TLS without a client certificate, and a certificate of another CA.
    stranger = tls.model_copy(
        update={"tls_cert_file": files["stranger_cert"], "tls_key_file": files["stranger_key"]}
    )
    async with grpc.aio.secure_channel(
        runtime.address, grpc.ssl_channel_credentials(files["ca"].read_bytes())
    ) as no_certificate:
        attempts = [no_certificate]
        async with (
            grpc.aio.insecure_channel(runtime.address) as plain,
            open_channel(runtime.address, NO_RETRY, auth=stranger, tokens=TOKENS) as foreign,
        ):
            attempts += [plain, foreign]
            for channel in attempts:
                with pytest.raises(grpc.aio.AioRpcError) as error:
                    await status(channel)
                assert error.value.code() == grpc.StatusCode.UNAVAILABLE
    # A certificate of the CA and a token: answered; a certificate alone is not enough.
    async with open_channel(runtime.address, NO_RETRY, auth=tls, tokens=as_role("operator")) as ok:
        assert (await status(ok)).reward == 1
    async with open_channel(runtime.address, NO_RETRY, auth=tls, tokens={}) as no_token:
        with pytest.raises(grpc.aio.AioRpcError) as error:
            await status(no_token)
        assert error.value.code() == UNAUTHENTICATED
    probe = functools.partial(health_status, runtime.address)
    assert await asyncio.to_thread(probe, auth=tls) == "SERVING"
    assert await asyncio.to_thread(probe, auth=get_settings().auth) == "UNREACHABLE"


# -- the local stack ---------------------------------------------------------------------


@pytest.mark.integration
def test_the_local_stack_makes_private_tokens_reuses_them_and_status_hides_them(
    tmp_path, monkeypatch
):
    monkeypatch.setenv("ETUDE_GATEWAY__LAUNCHER", "none")
    # No ETUDE_AUTH__TOKENS_DIR: the stack makes its own set in <run_dir>/auth.
    settings = EtudeSettings(
        stack=StackSettings(run_dir=tmp_path, ready_timeout_seconds=60),
        auth=AuthSettings(tokens_dir=None),
    )
    gateway = ServiceSpec("gateway", (sys.executable, "-m", "etude.gateway"), http=True)
    made = None
    for _start in range(2):
        stack = LocalStack(settings, (gateway,))
        stack.start()
        try:
            tokens_dir = tmp_path / "auth"
            tokens = read_tokens(tokens_dir)
            assert set(tokens) == set(ROLES)
            assert all((tokens_dir / r).stat().st_mode & 0o077 == 0 for r in ROLES)
            assert made is None or tokens == made  # a restart keeps them
            made = tokens
            url = next(c.http_url for c in stack.state.components if c.name == "gateway")
            assert http_status(f"{url}/runs", None) == 401
            assert http_status(f"{url}/runs", TOKENS["operator"]) == 401  # another stack's
            assert http_status(f"{url}/runs", tokens["rollout"]) == 403
            assert http_status(f"{url}/runs", tokens["operator"]) == 200
            status = read_status(tmp_path, tokens_dir)
            shown = json.dumps(status.as_dict())
            password = redis.Redis.from_url(status.redis_url).connection_pool.connection_kwargs
            assert password["password"] and password["password"] not in shown
            assert not any(token in shown for token in tokens.values())
            assert {c["role"]: c["fingerprint"] for c in status.as_dict()["credentials"]} == {
                role: fingerprint(token) for role, token in tokens.items()
            }
        finally:
            stack.stop()
