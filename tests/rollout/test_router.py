"""The router over real engines (the `sim` backend behind Serving, in process): an episode's
turns stay on the engine holding its prefix, load spreads when that engine is overloaded,
and no request reaches an engine that has not loaded the current policy version."""

from __future__ import annotations

import asyncio

import pytest

from etude.inference.local import InProcessInference
from etude.inference.sim_backend import SimBackend
from etude.inference.types import GenerationRequest, SamplingParams
from etude.rollout.router import NoEngineError, Router
from etude.sim.clock import SimClock
from etude.sim.scenario import EngineModel, EpisodeShapes, Scenario, Spread


def fleet(engines: int = 3, slots: int = 4, tokens: int = 400):
    shapes = EpisodeShapes(generated_tokens=Spread(median=tokens * 4), turns=Spread(median=4),
                           turn_jitter=0.0)  # fmt: skip
    model = EngineModel(max_num_seqs=slots, decode_step_seconds=0.01,
                        decode_step_seconds_per_sequence=0.0, parameter_bytes=0)  # fmt: skip
    clock = SimClock(200)
    scenario = Scenario(time_scale=200, engine=model, episodes=shapes)
    return [InProcessInference(SimBackend(scenario, clock)) for _ in range(engines)]


def request(episode: str, turn: int, turn_tokens: int = 401) -> GenerationRequest:
    """Turn `turn`'s prompt: a 100-token start, then per earlier turn its tokens and a
    50-token tool result (the context an agent sends)."""
    prompt = 100 + (turn - 1) * (turn_tokens + 50)
    return GenerationRequest(
        request_id=f"{episode}-t{turn}", prompt_token_ids=(7,) * prompt,
        sampling=SamplingParams(max_tokens=1 << 20, stop_token_ids=(2,)),
    )  # fmt: skip


async def generate(router: Router, req: GenerationRequest) -> str:
    async for _ in router.generate(req):
        pass
    return router._affinity[req.request_id.rsplit("-t", 1)[0]].name


@pytest.fixture
async def engines():
    engines = fleet()
    for engine in engines:
        await engine.update_weights(1, [])
    yield engines
    for engine in engines:
        await engine.close()


async def test_an_episodes_turns_stay_on_the_engine_that_holds_its_prefix(engines):
    router = Router(engines, refresh_seconds=0.01)
    try:
        for episode in ("a", "b", "c"):
            served = {await generate(router, request(episode, t)) for t in (1, 2, 3)}
            assert len(served) == 1
        assert router.decisions == {"least_loaded": 3, "affinity": 6}
        hits = sum(e.backend.cached_prompt_tokens for e in engines)
        assert hits == 3 * ((100 + 401) + (551 + 401))  # each later turn reuses the one before
    finally:
        await router.close()


async def test_round_robin_moves_turns_between_engines_and_loses_the_prefix(engines):
    router = Router(engines, strategy="round_robin", refresh_seconds=0.01)
    try:
        served = [await generate(router, request("a", t)) for t in (1, 2, 3)]
        assert len(set(served)) == 3
        assert sum(e.backend.cached_prompt_tokens for e in engines) == 0
    finally:
        await router.close()


async def test_first_turns_go_to_the_least_loaded_engine():
    engines = fleet(tokens=4000)  # turns long enough to be running when looked at
    for engine in engines:
        await engine.update_weights(1, [])
    router = Router(engines, refresh_seconds=0.01)
    try:
        await router.refresh()
        busy = [asyncio.create_task(generate(router, request(f"e{i}", 1))) for i in range(6)]
        await asyncio.sleep(0.01)
        await router.refresh()
        assert sorted(e.report.running for e in router.engines) == [2, 2, 2]
        await asyncio.gather(*busy)
    finally:
        await router.close()
        for engine in engines:
            await engine.close()


async def test_a_turn_spills_to_another_engine_when_its_prefix_engine_is_overloaded():
    engines = fleet(tokens=4000)  # long turns: the flood below is still running when checked
    for engine in engines:
        await engine.update_weights(1, [])
    router = Router(engines, refresh_seconds=0.01)
    try:
        home = await generate(router, request("a", 1, 4001))
        home_engine = next(e for e in router.engines if e.name == home)
        await router.refresh()  # reports taken while turn 1 ran would still count it
        # Six episodes whose earlier turns the same engine served: four fill its slots (the
        # other two spill already).
        for i in range(6):
            router._remember(f"x{i}", home_engine)
        flood = [asyncio.create_task(generate(router, request(f"x{i}", 2, 4001)))
                 for i in range(6)]  # fmt: skip
        await asyncio.sleep(0.01)
        await router.refresh()
        assert home_engine.report.running == 4 and home_engine.pressure >= 1.0
        spilled = router.decisions.get("spilled", 0)
        assert await generate(router, request("a", 2, 4001)) != home
        assert router.decisions["spilled"] == spilled + 1
        await asyncio.gather(*flood)
        await router.refresh()
        # No longer overloaded anywhere: the episode's turns stay where its prefix now is.
        moved = router._affinity["a"].name
        assert await generate(router, request("a", 3, 4001)) == moved
    finally:
        await router.close()
        for engine in engines:
            await engine.close()


async def test_no_request_reaches_an_engine_before_it_loads_the_current_version():
    engines = fleet(engines=2)
    current, behind = engines
    await current.update_weights(3, [])
    router = Router(engines, names=["current", "behind"], refresh_seconds=0.01)
    try:
        served = [await generate(router, request(f"e{i}", 1)) for i in range(8)]
        assert set(served) == {"current"}
        assert behind.backend.prompt_tokens == 0
        assert await router.policy_version() == 3
        admitted_before = router.admissions
        await behind.update_weights(3, [])  # a restarted engine, brought up to date
        await router.refresh()
        served = [await generate(router, request(f"f{i}", 1)) for i in range(8)]
        assert "behind" in served
        assert router.admissions == admitted_before + 1
    finally:
        await router.close()
        for engine in engines:
            await engine.close()


class _Down:
    """An engine whose service is gone: every call fails (a fault a test cannot cause on a
    live sim engine otherwise)."""

    def generate(self, request):
        raise ConnectionError("down")

    async def get_load(self):
        raise ConnectionError("down")


async def test_with_no_engine_on_the_current_version_the_router_says_so():
    router = Router([_Down()], refresh_seconds=0.01, admission_timeout=0.2)
    try:
        with pytest.raises(NoEngineError, match="no engine"):
            await generate(router, request("a", 1))
    finally:
        await router.close()
