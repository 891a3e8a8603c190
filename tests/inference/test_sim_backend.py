"""The `sim` backend: continuous batching, a prefix cache and weight loads in simulated
time; and, through the inference service's gRPC API, GetLoad and the two update modes
(in flight: a completion spans two versions; draining: none does)."""

from __future__ import annotations

import asyncio

import pytest

from etude.common.grpc_server import ServiceRuntime
from etude.common.settings import GrpcSettings
from etude.inference.client import GrpcInference
from etude.inference.local import InProcessInference
from etude.inference.server import InferenceServicer, registration
from etude.inference.serving import Serving
from etude.inference.sim_backend import SimBackend, behaviour_logprob
from etude.inference.types import GenerationRequest, InferenceError, SamplingParams
from etude.sim.clock import SimClock
from etude.sim.scenario import EngineModel, EpisodeShapes, Scenario, Spread

STOP = 2


def scenario(**engine) -> Scenario:
    """Every turn exactly 400 tokens; one decode step 10 ms plus 1 ms per running sequence."""
    model = {"max_num_seqs": 4, "decode_step_seconds": 0.01,
             "decode_step_seconds_per_sequence": 0.001, "prefill_seconds_per_token": 0.001,
             "parameter_bytes": 2e9, "weight_load_bytes_per_second": 1e9, **engine}  # fmt: skip
    shapes = EpisodeShapes(generated_tokens=Spread(median=1600), turns=Spread(median=4),
                           turn_jitter=0.0)  # fmt: skip
    return Scenario(time_scale=100, engine=EngineModel(**model), episodes=shapes)


def request(episode: str, turn: int = 1, prompt: int = 100) -> GenerationRequest:
    return GenerationRequest(
        request_id=f"{episode}-t{turn}", prompt_token_ids=(7,) * prompt,
        sampling=SamplingParams(max_tokens=1 << 20, stop_token_ids=(STOP,)),
    )  # fmt: skip


async def completion(engine, req):
    deltas = [d async for d in engine.generate(req)]
    assert len(deltas) == 1
    return deltas[0]


async def test_a_turn_takes_its_decode_steps_and_ends_on_the_stop_token():
    clock = SimClock(100)
    backend = SimBackend(scenario(), clock)
    started = clock.now()
    delta = await completion(backend, request("e1"))
    seconds = clock.now() - started
    assert len(delta.token_ids) == 401 and delta.token_ids[-1] == STOP
    assert delta.finish_reason == "stop" and "<function=" in delta.text
    # prefill 100 × 1 ms, then 401 steps of 11 ms
    assert seconds == pytest.approx(0.1 + 401 * 0.011, rel=0.1)
    await backend.close()


async def test_more_sequences_than_slots_wait_and_a_fuller_batch_steps_slower():
    clock = SimClock(100)
    backend = SimBackend(scenario(), clock)
    started = clock.now()
    await asyncio.gather(*(completion(backend, request(f"e{i}")) for i in range(4)))
    four = clock.now() - started
    started = clock.now()
    await asyncio.gather(*(completion(backend, request(f"f{i}")) for i in range(8)))
    eight = clock.now() - started
    assert four == pytest.approx(0.4 + 401 * 0.014, rel=0.1)  # 4 prefills, steps of 14 ms
    assert eight == pytest.approx(2 * four, rel=0.15)  # four wait for a slot
    await backend.close()


async def test_the_next_turn_on_the_same_engine_prefills_only_what_is_new():
    clock = SimClock(100)
    backend = SimBackend(scenario(), clock)
    first = await completion(backend, request("e1", 1, prompt=100))
    context = 100 + len(first.token_ids)
    await completion(backend, request("e1", 2, prompt=context + 50))
    assert backend.prompt_tokens == 100 + context + 50
    assert backend.cached_prompt_tokens == context
    await completion(backend, request("other", 2, prompt=context + 50))
    assert backend.cached_prompt_tokens == context  # another episode's prompt: no hit
    await backend.close()


async def test_an_update_in_flight_splits_a_completion_between_two_versions():
    clock = SimClock(100)
    backend = SimBackend(scenario(), clock)
    running = asyncio.create_task(completion(backend, request("e1")))
    await clock.sleep(2.0)  # about 180 tokens in
    started = clock.now()
    assert await backend.update_weights(1, []) == 0
    assert clock.now() - started == pytest.approx(2.0, rel=0.1)  # 2 GB at 1 GB/s
    delta = await running
    versions = delta.policy_versions
    boundary = versions.index(1)
    assert (
        100 < boundary < 300 and set(versions[:boundary]) == {0} and set(versions[boundary:]) == {1}
    )
    assert delta.logprobs[0] == behaviour_logprob(0) != delta.logprobs[-1] == behaviour_logprob(1)
    assert backend.policy_version == 1
    await backend.close()


async def test_bad_requests_are_refused_and_a_stopped_engine_says_so():
    backend = SimBackend(scenario(), SimClock(100))
    with pytest.raises(InferenceError, match="one completion"):
        bad = GenerationRequest(request_id="x-t1", prompt_token_ids=(1,),
                                sampling=SamplingParams(n=2))  # fmt: skip
        await completion(backend, bad)
    await backend.close()
    with pytest.raises(RuntimeError, match="stopped"):
        await completion(backend, request("e1"))


@pytest.fixture
async def sim_service():
    backend = SimBackend(scenario(), SimClock(100))
    runtime = ServiceRuntime(
        "inference", GrpcSettings(port=0, drain_seconds=0),
        [registration(InferenceServicer(Serving(backend), max_update_bytes=1 << 20))],
    )  # fmt: skip
    await runtime.start()
    client = GrpcInference(runtime.address)
    try:
        yield client
    finally:
        await client.close()
        await runtime.shutdown()
        await backend.close()


async def test_get_load_reports_running_waiting_capacity_and_version_over_grpc(sim_service):
    client = sim_service
    running = [asyncio.create_task(completion(client, request(f"e{i}"))) for i in range(6)]
    await asyncio.sleep(0.05)
    load = await client.get_load()
    assert (load.running, load.waiting, load.capacity, load.version) == (4, 2, 4, 0)
    assert not load.draining
    await asyncio.gather(*running)
    assert (await client.get_load()).outstanding == 0


async def test_a_draining_update_over_grpc_lets_running_turns_finish_on_the_old_weights(
    sim_service,
):
    client = sim_service
    running = asyncio.create_task(completion(client, request("e1")))
    await asyncio.sleep(0.02)
    update = asyncio.create_task(client.update_weights(1, [], drain=True))
    await asyncio.sleep(0.01)
    assert (await client.get_load()).draining
    late = asyncio.create_task(completion(client, request("e2")))  # held until the load
    first, second = await running, await late
    await update
    assert set(first.policy_versions) == {0}
    assert set(second.policy_versions) == {1}
    load = await client.get_load()
    assert load.version == 1 and not load.draining


async def test_an_in_process_engine_refuses_a_version_that_is_not_newer():
    engine = InProcessInference(SimBackend(scenario(), SimClock(100)))
    await engine.update_weights(2, [])
    with pytest.raises(InferenceError, match="not newer"):
        await engine.update_weights(2, [])
    assert (await engine.get_policy()).version == 2
    await engine.close()
