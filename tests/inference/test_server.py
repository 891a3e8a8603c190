"""The inference service over real gRPC and HTTP on loopback: the contract, chunked weight
updates, its error codes, the OpenAI-compatible API and the metrics."""

from __future__ import annotations

import asyncio
import json
import re

import grpc
import pytest
import torch
from prometheus_client import REGISTRY

from etude.api.v1 import inference_pb2, inference_pb2_grpc
from etude.common.grpc_client import open_channel
from etude.common.grpc_server import ServiceRuntime
from etude.common.settings import ClientSettings, GrpcSettings
from etude.inference.client import GrpcInference
from etude.inference.metrics import watch_backend
from etude.inference.server import SERVICE_NAME, InferenceServicer, add_to_server, registration
from etude.inference.serving import Serving
from etude.inference.types import GenerationRequest, InferenceError, SamplingParams
from etude.model.checkpoint import build_model
from etude.model.state_dict_adapter import StateDictAdapter
from tests.inference.completions import run_request


@pytest.fixture
async def service(backend):
    watch_backend(backend)
    serving = Serving(backend)
    runtime = ServiceRuntime(
        "inference",
        GrpcSettings(port=0, drain_seconds=0),
        [registration(InferenceServicer(serving, max_update_bytes=1 << 30))],
    )
    await runtime.start()
    client = GrpcInference(runtime.address)
    try:
        yield runtime, client, serving
    finally:
        await client.close()
        await runtime.shutdown()


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def greedy(prompt, max_tokens=8, **changes) -> GenerationRequest:
    sampling = SamplingParams(temperature=0.0, max_tokens=max_tokens, **changes)
    return GenerationRequest(request_id="g", prompt_token_ids=tuple(prompt), sampling=sampling)


async def collect(client, request) -> dict:
    return (await run_request(client, request))[0]


async def test_generate_streams_tokens_logprobs_and_versions(service, tokenizer):
    runtime, client, _ = service
    tokens_before = sample("etude_inference_generated_tokens_total")
    async with open_channel(runtime.address, ClientSettings()) as channel:
        stub = inference_pb2_grpc.InferenceServiceStub(channel)
        request = inference_pb2.GenerateRequest(
            request_id="text",
            prompt_text="def main():\n",
            sampling=inference_pb2.SamplingParams(max_tokens=6, n=2, seed=1, temperature=1.0),
        )
        chunks = [chunk async for chunk in stub.Generate(request)]
    by_index = {0: [], 1: []}
    for chunk in chunks:
        by_index[chunk.index].append(chunk)
        assert len(chunk.logprobs) == len(chunk.token_ids) == len(chunk.policy_versions)
    for completion in by_index.values():
        assert sum(len(c.token_ids) for c in completion) == 6
        assert completion[-1].finish_reason == inference_pb2.FINISH_REASON_LENGTH
        assert all(lp <= 0 for c in completion for lp in c.logprobs)
    assert sample("etude_inference_generated_tokens_total") - tokens_before == 12
    assert sample("etude_inference_time_to_first_token_seconds_count") >= 1
    policy = await client.get_policy()
    assert (policy.version, policy.backend) == (0, "torch") and policy.num_parameters > 0


async def test_chunked_weight_update_is_served_under_the_new_version(service, tokenizer, backend):
    _, client, _ = service
    replacement = build_model(backend.engine.model.config, seed=5).eval()
    # Checkpoint names, one tensor per expert, as a trainer publishes them.
    tensors = list(StateDictAdapter(replacement.config).to_hf(replacement.state_dict()).items())
    # 64 KiB chunks: the embedding (8192 × 64 fp32 = 2 MiB) arrives in 32 pieces.
    update = await client.update_weights(7, tensors, chunk_bytes=64 << 10)
    assert (update.version, update.tensors_updated) == (7, len(tensors))
    assert (await client.get_policy()).version == 7
    prompt = tokenizer.encode("for i in range(")
    result = await collect(client, greedy(prompt))
    assert set(result["versions"]) == {7}
    with torch.no_grad():
        expected = []
        seq = list(prompt)
        for _ in range(8):
            seq.append(int(replacement(torch.tensor([seq])).logits[0, -1].argmax()))
        expected = seq[len(prompt) :]
    eos = tokenizer.eos_token_id
    assert result["tokens"] == expected[: expected.index(eos) + 1 if eos in expected else 8]
    assert sample("etude_inference_weight_update_seconds_count") >= 1
    assert sample("etude_inference_policy_version") == 7


async def test_malformed_weight_streams_are_refused_and_change_nothing(service, backend):
    runtime, client, _ = service
    weight = backend.engine.model.lm_head.weight.detach().clone()
    with pytest.raises(InferenceError, match="not newer"):
        await client.update_weights(0, [("lm_head.weight", weight)])
    with pytest.raises(InferenceError, match="no tensor"):
        await client.update_weights(2, [("lm_head.weight", weight), ("bogus", weight)])
    async with open_channel(runtime.address, ClientSettings()) as channel:
        stub = inference_pb2_grpc.InferenceServiceStub(channel)
        gap = [
            inference_pb2.WeightChunk(version={"version": 3}),
            inference_pb2.WeightChunk(
                name="lm_head.weight", dtype="float32", shape=[2, 2], offset=8, data=b"\0" * 8
            ),
        ]
        no_version = [inference_pb2.WeightChunk(name="x", dtype="float32", shape=[1], data=b"1234")]
        for stream, message in ((gap, "offset"), (no_version, "first message")):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.UpdateWeights(iter(stream))
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert message in caught.value.details()
    assert backend.policy_version == 0
    assert torch.equal(backend.engine.model.lm_head.weight, weight)


def test_every_method_of_the_service_is_registered(backend):
    """`add_to_server` lists the methods by hand (to decode UpdateWeights its own way): a
    method added to the proto must be added there too."""

    class Recorder:
        def add_generic_rpc_handlers(self, handlers):
            pass

        def add_registered_method_handlers(self, service, handlers):
            self.registered = (service, set(handlers))

    recorder = Recorder()
    add_to_server(InferenceServicer(Serving(backend), max_update_bytes=1), recorder)
    methods = inference_pb2.DESCRIPTOR.services_by_name["InferenceService"].methods_by_name
    assert recorder.registered == (SERVICE_NAME, set(methods))


@pytest.mark.parametrize("fault", ["nan in the last chunk", "inf in a one-chunk tensor", "shape"])
async def test_a_bad_tensor_in_an_encoded_update_is_refused_and_changes_nothing(
    service, backend, fault
):
    """The client's pre-serialised messages and the server's views of the received bytes
    still reach the backend's checks: a bad tensor anywhere refuses the whole update."""
    _, client, _ = service
    model = backend.engine.model
    before = {name: t.detach().clone() for name, t in model.state_dict().items()}
    tensors = [(name, t.clone()) for name, t in before.items()]
    name, tensor = next((n, t) for n, t in tensors if t.numel() * 4 > 64 << 10)
    if fault == "nan in the last chunk":  # 64 KiB chunks: the tensor spans several
        tensor.view(-1)[-1] = float("nan")
    elif fault == "inf in a one-chunk tensor":
        name, tensor = next((n, t) for n, t in tensors if t.numel() * 4 <= 64 << 10)
        tensor.view(-1)[0] = float("inf")
    else:
        tensors = [(n, t[:-1] if n == name else t) for n, t in tensors]
    with pytest.raises(InferenceError, match=re.escape(name)):
        await client.update_weights(1, tensors, chunk_bytes=64 << 10)
    assert backend.policy_version == 0 and (await client.get_policy()).version == 0
    for key, value in model.state_dict().items():
        assert torch.equal(value, before[key]), key
    assert len((await collect(client, greedy([5, 6], 3)))["tokens"]) == 3


@pytest.mark.parametrize(
    ("request_fields", "sampling_fields", "message"),
    [
        ({"prompt_token_ids": []}, {"max_tokens": 4}, "prompt is empty"),
        ({"prompt_token_ids": [5] * 300}, {"max_tokens": 4}, "context holds"),
        ({"prompt_token_ids": [5, 6]}, {"max_tokens": 0}, "max_tokens"),
        ({"prompt_token_ids": [5, 6], "request_id": ""}, {"max_tokens": 4}, "request_id"),
    ],
)
async def test_bad_requests_get_invalid_argument_and_the_server_keeps_serving(
    service, request_fields, sampling_fields, message
):
    runtime, client, _ = service
    async with open_channel(runtime.address, ClientSettings()) as channel:
        stub = inference_pb2_grpc.InferenceServiceStub(channel)
        request = inference_pb2.GenerateRequest(
            **{"request_id": "bad", **request_fields},
            sampling=inference_pb2.SamplingParams(**sampling_fields),
        )
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            _ = [chunk async for chunk in stub.Generate(request)]
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in caught.value.details()
    assert len((await collect(client, greedy([5, 6], 3)))["tokens"]) == 3


async def test_unknown_sampling_fields_are_refused(service):
    """A newer client's field (here number 42) must not be silently ignored."""
    runtime, _, _ = service
    sampling = inference_pb2.SamplingParams(max_tokens=4).SerializeToString()
    unknown_field_42 = bytes([0xD0, 0x02, 0x01])  # tag (42 << 3 | varint), value 1
    request = inference_pb2.GenerateRequest(
        request_id="u",
        prompt_token_ids=[5],
        sampling=inference_pb2.SamplingParams.FromString(sampling + unknown_field_42),
    )
    async with open_channel(runtime.address, ClientSettings()) as channel:
        stub = inference_pb2_grpc.InferenceServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            _ = [chunk async for chunk in stub.Generate(request)]
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "[42]" in caught.value.details()


@pytest.mark.parametrize(
    "changes", [{"top_logprobs": 2}, {"frequency_penalty": 1.0}, {"logit_bias": ((5, 1.0),)}]
)
async def test_the_grpc_client_refuses_what_its_wire_cannot_carry(service, changes):
    """Alternatives, penalties and biases are the HTTP API's; sent over gRPC they would be
    dropped without a word, so the client refuses them and the service keeps serving."""
    _, client, _ = service
    with pytest.raises(InferenceError, match=next(iter(changes))):
        await collect(client, greedy([5, 6], 3, **changes))
    assert len((await collect(client, greedy([5, 6], 3)))["tokens"]) == 3


async def test_a_client_that_goes_away_frees_its_cache(service, backend):
    _, client, _ = service
    stream = client.generate(greedy([5, 6, 7], max_tokens=200, n=3))
    await anext(stream)
    assert backend.stats().kv_cache_usage > 0
    await stream.aclose()
    for _ in range(200):
        if backend.stats().kv_cache_usage == 0:
            break
        await asyncio.sleep(0.01)
    assert backend.stats().kv_cache_usage == 0 and backend.stats().running == 0


async def test_openai_completions(http, tokenizer):
    body = {"prompt": "def f(x):\n", "max_tokens": 5, "temperature": 0, "logprobs": 0, "n": 2}
    reply = (await http.post("/v1/completions", json=body)).json()
    assert reply["object"] == "text_completion" and len(reply["choices"]) == 2
    choice = reply["choices"][0]
    assert choice["finish_reason"] in {"length", "stop"}
    assert len(choice["logprobs"]["token_logprobs"]) == reply["usage"]["completion_tokens"] / 2
    assert reply["usage"]["prompt_tokens"] == len(tokenizer.encode("def f(x):\n"))
    # Greedy: both choices and a streamed run agree.
    assert reply["choices"][1]["text"] == choice["text"]
    streamed = ""
    async with http.stream("POST", "/v1/completions", json={**body, "stream": True, "n": 1}) as r:
        lines = [line async for line in r.aiter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    for line in lines[:-1]:
        streamed += json.loads(line.removeprefix("data: "))["choices"][0]["text"]
    assert streamed == choice["text"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"prompt": "x", "suffix": "y"}, "suffix"),
        ({"prompt": "x", "logprobs": 21}, "top_logprobs"),
        ({"prompt": "x", "presence_penalty": 3}, "presence_penalty"),
        ({"prompt": "x", "logit_bias": {"word": 1}}, "logit_bias"),
        ({"prompt": "x", "logit_bias": {"5": 500}}, "logit_bias"),
        ({"prompt": "x", "stream_options": {"include_usage": True}}, "stream"),
        ({"prompt": "", "max_tokens": 3}, "prompt is empty"),
        ({"prompt": "x", "max_tokens": 0}, "max_tokens"),
    ],
)
async def test_openai_bad_requests_get_400(http, body, message):
    reply = await http.post("/v1/completions", json=body)
    assert reply.status_code == 400
    assert message in reply.json()["error"]["message"]
    assert (await http.get("/health")).json()["status"] == "ok"


async def test_openai_errors_name_the_field_and_an_unknown_model_is_404(http, backend):
    """OpenAI's error shape (what the official clients parse), the field named; a model this
    server does not serve is refused, not answered by the policy it does serve."""
    reply = await http.post("/v1/completions", json={"prompt": "x", "best_of": 2})
    error = reply.json()["error"]
    assert reply.status_code == 400 and error["type"] == "invalid_request_error"
    assert error["param"] == "best_of" and "not supported" in error["message"]
    reply = await http.post("/v1/completions", json={"prompt": "x", "guided_json": {}})
    error = reply.json()["error"]
    assert error["param"] == "guided_json" and "Extra inputs" in error["message"]
    reply = await http.post("/v1/completions", json={"prompt": "x", "model": "gpt-4o"})
    assert reply.status_code == 404
    assert reply.json()["error"]["code"] == "model_not_found"
    assert reply.json()["error"]["param"] == "model"
    served = {"prompt": "x", "max_tokens": 1, "model": backend.model_name}
    assert (await http.post("/v1/completions", json=served)).status_code == 200


async def test_tokenize_detokenize_version_and_metrics_on_the_http_port(http, tokenizer, backend):
    text = "def f(x):\n    return x"
    tokens = (await http.post("/tokenize", json={"prompt": text})).json()
    assert tokens["tokens"] == tokenizer.encode(text) and tokens["count"] == len(tokens["tokens"])
    back = await http.post("/detokenize", json={"tokens": tokens["tokens"]})
    assert back.json()["prompt"] == tokenizer.decode(tokens["tokens"])
    bad = await http.post("/detokenize", json={"tokens": [-1]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "tokens"
    unknown = await http.post("/tokenize", json={"prompt": "x", "model": "other"})
    assert unknown.status_code == 404
    version = (await http.get("/version")).json()
    assert version["model"] == backend.model_name and version["version"]
    metrics = await http.get("/metrics")
    assert metrics.status_code == 200 and "etude_inference" in metrics.text
