"""Bad input through every public API: non-finite and out-of-range numbers, NUL bytes,
oversized strings, bytes that are not the method's message. Each attack must get its
precise status code, and the service must still answer a valid call after it, with a
truthful health check.

Services run for real on loopback: the torch inference engine, the environment on bwrap
sandboxes, the search service on MiniLM, the reward service, and the gateway over Redis.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
from collections.abc import AsyncIterator

import grpc
import httpx
import pytest
import torch
from fastapi.testclient import TestClient
from grpc_health.v1 import health_pb2, health_pb2_grpc

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
from etude.common.auth import bearer_header
from etude.common.grpc_client import open_channel
from etude.common.grpc_server import ServiceRuntime
from etude.common.settings import ClientSettings, GrpcSettings, get_settings
from etude.environment.server import registration as environment_registration
from etude.gateway.app import create_app
from etude.gateway.launcher import RecordOnlyLauncher
from etude.inference.openai_api import create_app as create_openai_app
from etude.inference.server import InferenceServicer
from etude.inference.server import registration as inference_registration
from etude.inference.serving import Serving
from etude.inference.weight_stream import chunks as weight_chunks
from etude.model.state_dict_adapter import StateDictAdapter
from etude.reward.config import RewardConfig
from etude.reward.grader import Grader
from etude.reward.server import MAX_PATCH_BYTES, RewardServicer
from etude.reward.server import registration as reward_registration
from etude.search.server import SearchServicer
from etude.search.server import registration as search_registration
from etude.tasks.store import TaskStore
from tests.environment.conftest import make_manager
from tests.inference.conftest import backend, model, tokenizer  # noqa: F401
from tests.search.conftest import engine, minilm, project, shared_cache  # noqa: F401

INVALID = grpc.StatusCode.INVALID_ARGUMENT
NUL = "a\0b"
HUGE = "x" * 10_000
# Bytes that are not a message: a string field holding invalid UTF-8, a length-delimited
# field cut short, random bytes.
UNDECODABLE = {
    "bad-utf8": b"\x0a\x02\xff\xfe",
    "truncated": b"\x0a\x05ab",
    "random": bytes.fromhex("ffffffffffffffff07") + os.urandom(32),
}
NON_FINITE = [math.nan, math.inf, -math.inf, 1e999, -1e999]


async def start(registration) -> ServiceRuntime:
    runtime = ServiceRuntime("svc", GrpcSettings(port=0, drain_seconds=0), [registration])
    await runtime.start()
    return runtime


async def health(channel: grpc.aio.Channel) -> str:
    reply = await health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


async def code_of(call) -> grpc.StatusCode:
    try:
        result = call()
        if hasattr(result, "__aiter__"):
            [_ async for _ in result]
        else:
            await result
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


# -- inference ---------------------------------------------------------------------------


@pytest.fixture
async def inference(backend):  # noqa: F811
    runtime = await start(
        inference_registration(InferenceServicer(Serving(backend), max_update_bytes=1 << 30))
    )
    channel = open_channel(runtime.address, ClientSettings())
    try:
        yield inference_pb2_grpc.InferenceServiceStub(channel), channel, backend
    finally:
        await channel.close()
        await runtime.shutdown()


def generate(request_id="r", prompt=(1, 2, 3), **sampling) -> inference_pb2.GenerateRequest:
    sampling = {"temperature": 1.0, "max_tokens": 4, **sampling}
    return inference_pb2.GenerateRequest(
        request_id=request_id, prompt_token_ids=prompt,
        sampling=inference_pb2.SamplingParams(**sampling),
    )  # fmt: skip


async def generates(stub) -> None:
    """A valid request still streams its 4 tokens, and the engine is not dead."""
    chunks = [c async for c in stub.Generate(generate("after", seed=3))]
    assert sum(len(c.token_ids) for c in chunks) == 4
    assert chunks[-1].finish_reason == inference_pb2.FINISH_REASON_LENGTH


BAD_SAMPLING = [
    *({"temperature": v} for v in (*NON_FINITE, -1.0)),
    *({"top_p": v} for v in (*NON_FINITE, -0.5, 1.5)),
    {"top_k": -2},
    {"top_k": -(1 << 31)},
    {"max_tokens": -1},
    {"n": -1},
    {"n": 1 << 30},
    {"stop": ["x"] * 100},
    {"stop": [HUGE]},
    {"stop": [""]},
    {"stop_token_ids": [-1]},
    {"stop_token_ids": [(1 << 31) - 1]},
    {"stop_token_ids": [1] * 5000},
]


@pytest.mark.parametrize("sampling", BAD_SAMPLING, ids=repr)
async def test_sampling_parameters_out_of_range_are_invalid_argument(inference, sampling):
    stub, channel, _ = inference
    field = next(iter(sampling))
    try:
        [_ async for _ in stub.Generate(generate(**sampling))]
    except grpc.aio.AioRpcError as error:
        assert error.code() == INVALID
        assert field in error.details()
    else:
        raise AssertionError(f"{sampling} was accepted")
    await generates(stub)
    assert await health(channel) == "SERVING"


@pytest.mark.parametrize(
    "request_id, prompt",
    [("", (1,)), (NUL, (1,)), (HUGE, (1,)), ("r", (-1,)), ("r", ((1 << 31) - 1,)), ("r", ())],
    ids=["empty-id", "nul-id", "10kb-id", "negative-token", "huge-token", "no-prompt"],
)
async def test_bad_ids_and_prompt_tokens_are_invalid_argument(inference, request_id, prompt):
    stub, _, _ = inference
    assert await code_of(lambda: stub.Generate(generate(request_id, prompt))) == INVALID
    await generates(stub)


async def test_a_tiny_temperature_samples_greedily_instead_of_dividing_by_zero(inference):
    stub, _, _ = inference
    chunks = [c async for c in stub.Generate(generate(temperature=1e-30, max_tokens=4))]
    greedy = [c async for c in stub.Generate(generate("g", temperature=0.0, max_tokens=4))]
    assert [t for c in chunks for t in c.token_ids] == [t for c in greedy for t in c.token_ids]
    await generates(stub)


async def test_a_request_id_already_in_flight_is_refused_and_leaks_no_slot(inference):
    stub, _, backend = inference  # noqa: F811
    first = stub.Generate(generate("same", max_tokens=40))
    await first.read()  # the first request is running
    assert await code_of(lambda: stub.Generate(generate("same"))) == INVALID
    rest = [c async for c in first]
    assert rest[-1].finish_reason == inference_pb2.FINISH_REASON_LENGTH
    await generates(stub)
    await asyncio.sleep(0.1)
    assert backend.stats().kv_cache_usage == 0


def _poison(tensor: torch.Tensor, how: str) -> torch.Tensor:
    if how == "all nan":
        return torch.full_like(tensor, math.nan)
    poisoned = tensor.clone().flatten()
    if how == "one inf":
        poisoned[poisoned.numel() // 2] = math.inf
    else:  # "inf and -inf": their sum is NaN, not an infinity
        poisoned[0], poisoned[-1] = math.inf, -math.inf
    return poisoned.view_as(tensor)


@pytest.mark.parametrize("how", ["all nan", "one inf", "inf and -inf"])
async def test_weights_with_nan_are_refused_and_change_nothing(inference, how):
    stub, _, backend = inference  # noqa: F811
    model_ = backend.engine.model
    name, tensor = next(iter(StateDictAdapter(model_.config).to_hf(model_.state_dict()).items()))
    poisoned = _poison(tensor, how)

    async def stream():
        for message in weight_chunks(1, [(name, poisoned)]):
            yield message

    assert await code_of(lambda: stub.UpdateWeights(stream())) == INVALID
    assert backend.policy_version == 0
    await generates(stub)


@pytest.mark.parametrize("kind", sorted(UNDECODABLE))
@pytest.mark.parametrize("method", ["GetPolicy", "Generate", "UpdateWeights"])
async def test_undecodable_inference_requests_are_invalid_argument(inference, method, kind):
    stub, channel, _ = inference
    path, data = f"/etude.api.v1.InferenceService/{method}", UNDECODABLE[kind]
    if method == "Generate":
        call = channel.unary_stream(path)
        assert await code_of(lambda: call(data)) == INVALID
    elif method == "UpdateWeights":

        async def raw():
            yield data

        call = channel.stream_unary(path)
        assert await code_of(lambda: call(raw())) == INVALID
    else:
        call = channel.unary_unary(path)
        if kind != "bad-utf8":  # GetPolicyRequest has no field 1: those bytes are unknown
            assert await code_of(lambda: call(data)) == INVALID
    await generates(stub)
    assert await health(channel) == "SERVING"


async def test_an_engine_fault_fails_the_request_and_the_engine_keeps_serving(inference):
    """A mock of a fault no request can cause any more (validation refuses what used to
    raise inside the sampler): the model's forward raises once, mid-batch."""
    stub, channel, backend = inference  # noqa: F811
    model_, real_forward = backend.engine.model, backend.engine.model.forward
    calls = {"n": 0}

    def failing_forward(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("simulated device fault")
        return real_forward(*args, **kwargs)

    model_.forward = failing_forward
    try:
        assert await code_of(lambda: stub.Generate(generate("doomed"))) == (
            grpc.StatusCode.INTERNAL
        )
    finally:
        model_.forward = real_forward
    await generates(stub)
    assert await health(channel) == "SERVING"
    assert backend.stats().kv_cache_usage == 0


async def test_an_engine_that_died_is_reported_not_serving(inference):
    """A mock of a fault no request can cause: the engine's thread itself ends (as it would
    on an interpreter-level error). Calls then fail UNAVAILABLE, and health must say so
    instead of SERVING, so a probe restarts the process."""
    stub, channel, backend = inference  # noqa: F811

    def dying_step():
        raise SystemExit("simulated death of the engine thread")

    backend.engine.step = dying_step
    assert await code_of(lambda: stub.Generate(generate("doomed"))) in (
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.INTERNAL,
    )
    for _ in range(40):
        if await health(channel) == "NOT_SERVING":
            break
        await asyncio.sleep(0.1)
    assert await health(channel) == "NOT_SERVING"
    assert await code_of(lambda: stub.Generate(generate("after"))) == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize(
    "body",
    ['{"prompt": [1, 2], "temperature": NaN}', '{"prompt": [1, 2], "top_p": Infinity}',
     '{"prompt": [1, 2], "temperature": 1e999}', '{"prompt": [1, 2], "seed": 1e400}',
     '{"prompt": [1, 2], "max_tokens": 100000000000000000000000}',
     '{"prompt": [1, 2], "n": 1000000}'],
)  # fmt: skip
async def test_openai_api_refuses_non_finite_and_huge_numbers(backend, body):  # noqa: F811
    async with _openai_client(backend) as client:
        bad = await _post_raw(client, "/v1/completions", body)
        assert bad.status_code == 400, bad.text
        good = await client.post("/v1/completions", json={"prompt": [1, 2], "max_tokens": 2})
        assert good.status_code == 200 and good.json()["usage"]["completion_tokens"] == 2


@pytest.mark.parametrize(
    ("path", "body"),
    [("/v1/completions", '{"prompt": "\\udfff", "max_tokens": 2}'),
     ("/v1/chat/completions",
      '{"messages": [{"role": "user", "content": "\\ud800 x"}], "max_tokens": 2}'),
     ("/v1/chat/completions",
      '{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "tools": [{"type": '
      '"function", "function": {"name": "f", "description": "\\ud800"}}]}'),
     ("/tokenize", '{"prompt": "a\\ud800"}')],
)  # fmt: skip
async def test_openai_api_refuses_text_utf8_cannot_carry(backend, path, body):  # noqa: F811
    """JSON can spell a lone surrogate (`\\ud800`); the tokenizer cannot read it (a 500
    before). Refused up front; an escaped pair (an emoji) is text like any other."""
    async with _openai_client(backend) as client:
        bad = await _post_raw(client, path, body)
        assert bad.status_code == 400, bad.text
        assert "UTF-8" in bad.json()["error"]["message"]
        emoji = '{"prompt": "\\ud83d\\ude00", "max_tokens": 2}'
        good = await _post_raw(client, "/v1/completions", emoji)
        assert good.status_code == 200 and good.json()["usage"]["completion_tokens"] == 2


@contextlib.asynccontextmanager
async def _openai_client(served) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the HTTP API over the backend `served`, as a rollout worker."""
    transport = httpx.ASGITransport(app=create_openai_app(Serving(served)))
    headers = bearer_header(get_settings().auth, "rollout")
    async with httpx.AsyncClient(
        transport=transport, base_url="http://test", headers=headers
    ) as client:
        yield client


async def _post_raw(client: httpx.AsyncClient, path: str, body: str) -> httpx.Response:
    return await client.post(path, content=body, headers={"content-type": "application/json"})


# -- environment -------------------------------------------------------------------------


@pytest.fixture
async def environment(tmp_path, repo):
    manager = make_manager(tmp_path)
    runtime = await start(environment_registration(manager))
    channel = open_channel(runtime.address, ClientSettings(timeout_seconds=60))
    try:
        yield environment_pb2_grpc.EnvironmentServiceStub(channel), channel, manager
    finally:
        await channel.close()
        await runtime.shutdown()
        await manager.close_all()


async def session_works(stub, repo) -> None:
    created = await stub.CreateSession(
        environment_pb2.CreateSessionRequest(repository_path=str(repo))
    )
    session = created.session_id
    call = common_pb2.ToolCall(id="c", name="read_file", arguments={"path": "notes.txt"})
    reply = await stub.Execute(environment_pb2.ExecuteRequest(session_id=session, calls=[call]))
    assert "two" in reply.results[0].output
    await stub.CloseSession(environment_pb2.CloseSessionRequest(session_id=session))


BAD_CREATE = {
    **{f"ttl-{v}": {"idle_ttl_seconds": v} for v in (*NON_FINITE, -1.0, 1e300)},
    "nul-path": {"repository_path": NUL},
    "10kb-path": {"repository_path": "/" + HUGE},
    "no-path": {"repository_path": ""},
    "nul-task": {"task_id": common_pb2.TaskId(value=NUL)},
    "10kb-task": {"task_id": common_pb2.TaskId(value=HUGE)},
}


@pytest.mark.parametrize("fields", BAD_CREATE.values(), ids=BAD_CREATE.keys())
async def test_bad_create_session_fields_are_invalid_argument(environment, repo, fields):
    stub, channel, manager = environment
    request = environment_pb2.CreateSessionRequest(**{"repository_path": str(repo), **fields})
    assert await code_of(lambda: stub.CreateSession(request)) == INVALID
    assert manager.sessions == {}  # nothing was created
    await session_works(stub, repo)
    assert await health(channel) == "SERVING"


@pytest.mark.parametrize("session_id", [NUL, HUGE, ""], ids=["nul", "10kb", "empty"])
@pytest.mark.parametrize("method", ["Execute", "Fork", "Diff", "CloseSession"])
async def test_bad_session_ids_are_invalid_argument(environment, repo, method, session_id):
    stub, _, _ = environment
    request = getattr(environment_pb2, f"{method}Request")(
        session_id=common_pb2.SessionId(value=session_id)
    )
    assert await code_of(lambda: getattr(stub, method)(request)) == INVALID
    await session_works(stub, repo)


@pytest.mark.parametrize(
    "calls",
    [[common_pb2.ToolCall(id="c", name=HUGE)], [common_pb2.ToolCall(id=NUL, name="list_dir")],
     [common_pb2.ToolCall(id="c", name="read_file", arguments={HUGE: "x"})],
     [common_pb2.ToolCall(id=str(i), name="list_dir") for i in range(300)]],
    ids=["10kb-name", "nul-id", "10kb-argument-name", "300-calls"],
)  # fmt: skip
async def test_oversized_tool_calls_are_invalid_argument(environment, repo, calls):
    stub, _, _ = environment
    created = await stub.CreateSession(
        environment_pb2.CreateSessionRequest(repository_path=str(repo))
    )
    request = environment_pb2.ExecuteRequest(session_id=created.session_id, calls=calls)
    assert await code_of(lambda: stub.Execute(request)) == INVALID
    ok = common_pb2.ToolCall(id="c", name="read_file", arguments={"path": "README.md"})
    reply = await stub.Execute(
        environment_pb2.ExecuteRequest(session_id=created.session_id, calls=[ok])
    )
    assert "# demo" in reply.results[0].output  # the same session still works


@pytest.mark.parametrize("kind", sorted(UNDECODABLE))
@pytest.mark.parametrize("method", ["CreateSession", "Execute", "Diff"])
async def test_undecodable_environment_requests_are_invalid_argument(
    environment, repo, method, kind
):
    stub, channel, manager = environment
    call = channel.unary_unary(f"/etude.api.v1.EnvironmentService/{method}")
    assert await code_of(lambda: call(UNDECODABLE[kind])) == INVALID
    assert manager.sessions == {}
    await session_works(stub, repo)


# -- search ------------------------------------------------------------------------------


@pytest.fixture
async def search(engine):  # noqa: F811
    runtime = await start(search_registration(SearchServicer(engine)))
    channel = open_channel(runtime.address, ClientSettings())
    try:
        yield search_pb2_grpc.SearchServiceStub(channel), channel
    finally:
        await channel.close()
        await runtime.shutdown()


async def searches(stub) -> None:
    reply = await stub.Query(search_pb2.QueryRequest(workspace_id="w", query="evict", k=3))
    assert reply.hits and all(h.path.endswith(".py") for h in reply.hits)


BAD_SEARCH = {
    "index-nul-id": ("IndexWorkspace", search_pb2.IndexWorkspaceRequest(
        workspace_id=NUL, parent_workspace_id="w")),
    "index-10kb-id": ("IndexWorkspace", search_pb2.IndexWorkspaceRequest(
        workspace_id=HUGE, parent_workspace_id="w")),
    "index-nul-root": ("IndexWorkspace", search_pb2.IndexWorkspaceRequest(
        workspace_id="x", root_path="/tmp/" + NUL)),
    "index-10kb-root": ("IndexWorkspace", search_pb2.IndexWorkspaceRequest(
        workspace_id="x", root_path="/" + HUGE)),
    "query-nul-id": ("Query", search_pb2.QueryRequest(workspace_id=NUL, query="q")),
    "query-negative-k": ("Query", search_pb2.QueryRequest(workspace_id="w", query="q", k=-5)),
    "query-huge-k": ("Query", search_pb2.QueryRequest(workspace_id="w", query="q", k=1 << 30)),
    "query-10kb": ("Query", search_pb2.QueryRequest(workspace_id="w", query=HUGE)),
    "query-nul-dir": ("Query", search_pb2.QueryRequest(
        workspace_id="w", query="q", target_directories=[NUL])),
    "query-10kb-dir": ("Query", search_pb2.QueryRequest(
        workspace_id="w", query="q", target_directories=[HUGE])),
    "query-many-dirs": ("Query", search_pb2.QueryRequest(
        workspace_id="w", query="q", target_directories=["a"] * 100)),
    "update-nul-path": ("UpdateFiles", search_pb2.UpdateFilesRequest(
        workspace_id="w", changed=[search_pb2.ChangedFile(path=NUL, content="x")])),
    "update-10kb-path": ("UpdateFiles", search_pb2.UpdateFilesRequest(
        workspace_id="w", deleted_paths=[HUGE])),
    "update-nul-id": ("UpdateFiles", search_pb2.UpdateFilesRequest(workspace_id=NUL)),
    "drop-nul-id": ("DropWorkspace", search_pb2.DropWorkspaceRequest(workspace_id=NUL)),
}  # fmt: skip


@pytest.mark.parametrize("method, request_", BAD_SEARCH.values(), ids=BAD_SEARCH.keys())
async def test_bad_search_requests_are_invalid_argument(search, project, method, request_):  # noqa: F811
    stub, channel = search
    await stub.IndexWorkspace(search_pb2.IndexWorkspaceRequest(
        workspace_id="w", root_path=str(project)))  # fmt: skip
    assert await code_of(lambda: getattr(stub, method)(request_)) == INVALID
    await searches(stub)
    raw = channel.unary_unary(f"/etude.api.v1.SearchService/{method}")
    for kind, data in UNDECODABLE.items():
        assert await code_of(lambda data=data: raw(data)) == INVALID, kind
    await searches(stub)
    assert await health(channel) == "SERVING"


# -- reward ------------------------------------------------------------------------------


@pytest.fixture
async def reward(tmp_path):
    config = RewardConfig(cache_dir=tmp_path / "tasks")
    servicer = RewardServicer(Grader(config, None), TaskStore(config.tasks_files), None)
    runtime = await start(reward_registration(servicer))
    channel = open_channel(runtime.address, ClientSettings())
    try:
        yield reward_pb2_grpc.RewardServiceStub(channel), channel, servicer
    finally:
        await channel.close()
        await runtime.shutdown()


@pytest.mark.parametrize(
    "fields",
    [{"task_id": common_pb2.TaskId(value=NUL)}, {"task_id": common_pb2.TaskId(value=HUGE)},
     {"session_id": common_pb2.SessionId(value=NUL)},
     {"patch": "x" * (MAX_PATCH_BYTES + 1)}],
    ids=["nul-task", "10kb-task", "nul-session", "oversize-patch"],
)  # fmt: skip
async def test_bad_score_requests_are_invalid_argument(reward, fields):
    stub, channel, servicer = reward
    task = next(iter(servicer.tasks.tasks))
    request = reward_pb2.ScoreRequest(**{"task_id": common_pb2.TaskId(value=task), **fields})
    assert await code_of(lambda: stub.Score(request)) == INVALID
    raw = channel.unary_unary("/etude.api.v1.RewardService/Score")
    for data in UNDECODABLE.values():
        assert await code_of(lambda data=data: raw(data)) == INVALID
    # Still answering: an unknown task is NOT_FOUND, not a crash; health is truthful.
    unknown = reward_pb2.ScoreRequest(task_id=common_pb2.TaskId(value="nope"), patch="x")
    assert await code_of(lambda: stub.Score(unknown)) == grpc.StatusCode.NOT_FOUND
    assert await health(channel) == "SERVING"


# -- gateway -----------------------------------------------------------------------------

OPERATOR = bearer_header(get_settings().auth, "operator")


@pytest.fixture
def gateway(redis_url, tmp_path, monkeypatch):
    monkeypatch.setenv("ETUDE_GATEWAY__RUN_DIR", str(tmp_path))
    app = create_app(redis_url, RecordOnlyLauncher())
    with TestClient(app, headers=OPERATOR, raise_server_exceptions=False) as client:
        yield client


def post_raw(client: TestClient, body: str):
    return client.post("/runs", content=body, headers={"content-type": "application/json"})


NON_FINITE_LITERALS = ["NaN", "Infinity", "-Infinity", "1e999", "-1e999", "1E400"]


@pytest.mark.parametrize("literal", NON_FINITE_LITERALS)
@pytest.mark.parametrize(
    "template",
    ['{{"config": {{"trainer": {{"lr": {}}}}}}}',
     '{{"config": {{"trainer": {{"loss": {{"clip_low": {}}}}}}}}}',
     '{{"config": {{"rollout": {{"temperature": {}}}}}}}',
     '{{"config": {{}}, "run_id": {}}}', '[{}]', '{}'],
    ids=["lr", "nested", "temperature", "run-id", "array", "top-level"],
)  # fmt: skip
def test_non_finite_numbers_anywhere_in_a_body_are_422(gateway, template, literal):
    response = post_raw(gateway, template.format(literal))
    assert response.status_code == 422, response.text
    assert gateway.get("/health").status_code == 200
    assert gateway.get("/runs").json() == []  # nothing was recorded


@pytest.mark.parametrize(
    "body",
    ['{"config": {"trainer": {"steps": 100000000000000000000000000000}}}',
     '{"config": {"tasks": {"seed": 1' + "0" * 5000 + '}}}',
     '{"config": {"rollout": {"group_size": -3}}}',
     '{"config": {"name": "\\ud800"}}', '{"config": {"name": "a\\u0000b"}}',
     '{"config": {"output_dir": "/etc"}}', '{"config": {"output_dir": "../../escape"}}',
     '{"config": {"tasks": {"taskset": "/etc/passwd"}}}',
     '{"config": {"policy": {"init": "../../../root"}}}', '{"config": ', b"\xff\xfe"],
    ids=["huge-int", "5000-digits", "negative", "lone-surrogate", "nul", "output-etc",
         "output-escape", "taskset-host-file", "init-escape", "truncated", "not-utf8"],
)  # fmt: skip
def test_bad_run_documents_are_422_and_record_nothing(gateway, body):
    response = post_raw(gateway, body)
    assert response.status_code == 422, response.text
    assert gateway.get("/runs").json() == []


def test_a_valid_run_after_the_attacks_lands_under_the_run_dir(gateway, tmp_path):
    assert post_raw(gateway, '{"config": {"trainer": {"lr": NaN}}}').status_code == 422
    started = gateway.post("/runs", json={"config": {"trainer": {"steps": 1}}})
    assert started.status_code == 201, started.text
    assert started.json()["config"]["output_dir"] == str(tmp_path.resolve() / "runs")
    inside = gateway.post("/runs", json={"config": {"output_dir": "mine"}})
    assert inside.status_code == 201, inside.text
    assert inside.json()["config"]["output_dir"] == str(tmp_path.resolve() / "runs" / "mine")


def test_json_numbers_the_strict_parser_accepts_are_ordinary_ones(gateway):
    body = json.dumps({"config": {"trainer": {"lr": 3e-4}, "tasks": {"seed": 2**62}}})
    started = post_raw(gateway, body)
    assert started.status_code == 201, started.text
    assert started.json()["config"]["trainer"]["lr"] == 3e-4
