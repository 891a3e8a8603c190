"""A simulated fleet on the real scheduler: engines, sandboxes, grading and the trainer's
compute take simulated time (the `sim` backends), and everything between them is the real
code — a redis-server's streams, the orchestrator and its GroupCollector, a rollout worker
running the agent loop, the router, Serving's weight updates, the RL loop, weight
publishing and policy versions.

    fleet = SimulatedFleet(scenario, redis_url, FleetPlan(engines=16, schedule="sync"))
    result = await fleet.run()

It assembles the parts as a deployment does, through their public surfaces; nothing imports
it but the benchmark (`loadtests/rollout_sim.py`) and its tests.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import torch

from etude.common.queue import queue_client
from etude.common.run_config import RolloutConfig
from etude.common.settings import QueueSettings
from etude.environment.sim import SimEnvironment
from etude.inference.local import InProcessInference
from etude.inference.sim_backend import SimBackend
from etude.reward.sim import SimScorer
from etude.rollout.client import Orchestrator, TaskCycle, first_prompt
from etude.rollout.router import Router
from etude.rollout.service import WorkerParts, assemble_worker, repositories_only
from etude.sim.clock import SimClock
from etude.sim.scenario import Scenario
from etude.sim.tokenizer import WordTokenizer
from etude.tasks.materialize import BUNDLED_TASK_FILES
from etude.tasks.store import TaskStore
from etude.tasks.task import Task
from etude.trainer.publish import WeightPublisher
from etude.trainer.rl_loop import RLLoop, StepDone
from etude.trainer.simulated import SimulatedTrainer

Schedule = Literal["sync", "async", "async_partial"]


@dataclass(frozen=True, slots=True)
class FleetPlan:
    engines: int = 16
    schedule: Schedule = "async_partial"
    routing: Literal["load_aware", "round_robin"] = "load_aware"
    group_size: int = 8
    groups_per_step: int = 64
    over_provision: int = 64
    """Extra groups in flight: with the defaults, 1,024 rollouts for 16 × 64 sequences."""
    max_staleness: int = 2
    simulated_seconds: float = 3600.0
    """Steps start until this much simulated time has passed."""
    max_steps: int = 1000


@dataclass(slots=True)
class FleetResult:
    plan: FleetPlan
    staleness: list[int] = field(default_factory=list)
    in_flight: list[int] = field(default_factory=list)
    in_queue: list[int] = field(default_factory=list)
    episode_seconds: list[float] = field(default_factory=list)
    """Simulated duration of every finished episode (trained or not)."""
    decisions: dict[str, int] = field(default_factory=dict)
    admissions: int = 0
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    real_seconds: float = 0.0
    cpu_seconds: float = 0.0
    """CPU time of this process (orchestrator, worker, router, trainer loop, engines)."""
    stale_groups: int = 0
    """Complete groups dropped untrained: not one token within `max_staleness`."""
    stale_tokens: int = 0
    """Sampled tokens of trained trajectories left out of the loss as too old."""
    sampled_tokens: int = 0
    """Tokens the policy sampled in the trained trajectories."""
    failed_rollouts: int = 0
    """Rollouts a worker gave back: a simulation with any has measured an error path."""
    loop_lag_p99: float = 0.0
    """Real seconds the event loop was late waking a timer (p99): simulated time is real
    time scaled, so a busy loop would stretch every modelled latency."""
    queue_entries: int = 0
    """Rollout and trajectory entries written to Redis."""
    occupancy: float = 0.0
    """Mean share of the engines' sequence slots decoding or prefilling, sampled."""
    step_ends: list[float] = field(default_factory=list)
    """Simulated time at the end of each step, from the first schedule."""
    step_trained: list[int] = field(default_factory=list)
    step_waited: list[float] = field(default_factory=list)
    """Simulated seconds the trainer waited in each step (for its groups, for its update)."""

    @property
    def steps(self) -> int:
        return len(self.step_ends)

    @property
    def trained(self) -> int:
        """Trajectories trained on."""
        return sum(self.step_trained)

    @property
    def simulated_seconds(self) -> float:
        """From the first schedule to the end of the last step."""
        return self.step_ends[-1] if self.step_ends else 0.0

    @property
    def sync_never_stale(self) -> bool:
        """With `sync`: every trained token was sampled by the step's own version."""
        return self.plan.schedule != "sync" or not any(self.staleness)

    @property
    def warmup_steps(self) -> int:
        """Steps of the warm-up. Every sequence slot starts an episode at once, so for a
        while the episodes running are all of one age and finish together; the steady state
        begins once that first cohort has ended: at the end of the first step that ends after
        the run's p99 episode duration (the first step at least)."""
        if not self.step_ends:
            return 0
        episodes = sorted(self.episode_seconds) or [0.0]
        p99 = episodes[min(len(episodes) - 1, int(0.99 * len(episodes)))]
        after = next((i for i, end in enumerate(self.step_ends) if end >= p99), None)
        return len(self.step_ends) if after is None else after + 1

    @property
    def steady_steps(self) -> int:
        return len(self.step_ends) - self.warmup_steps

    def _window(self, first_step: int) -> float:
        """Simulated seconds from the end of step `first_step` (1-based) to the last's end."""
        if first_step < 1 or first_step >= len(self.step_ends):
            return 0.0
        return self.step_ends[-1] - self.step_ends[first_step - 1]

    @property
    def steady_seconds(self) -> float:
        return self._window(self.warmup_steps)

    @property
    def throughput_per_hour(self) -> float:
        """Trajectories trained per simulated hour, in the steady state."""
        trained = sum(self.step_trained[self.warmup_steps :])
        return trained / max(self.steady_seconds, 1e-9) * 3600

    @property
    def trainer_idle(self) -> float:
        """Share of the steady state the trainer waited for rollouts or weights."""
        return sum(self.step_waited[self.warmup_steps :]) / max(self.steady_seconds, 1e-9)

    @property
    def trainer_idle_with_warmup(self) -> float:
        """The same from the end of the first step: the warm-up's waits included."""
        return sum(self.step_waited[1:]) / max(self._window(1), 1e-9)

    @property
    def prefix_hit_rate(self) -> float:
        return self.cached_prompt_tokens / max(1, self.prompt_tokens)


def rollout_config(plan: FleetPlan) -> RolloutConfig:
    """Episodes as long as the scenario makes them: the shapes, not the limits, end them."""
    return RolloutConfig(
        group_size=plan.group_size, groups_per_step=plan.groups_per_step,
        over_provision=plan.over_provision, max_staleness=plan.max_staleness,
        schedule=plan.schedule, max_turns=10_000, max_new_tokens=1 << 20,
        max_episode_tokens=1 << 22, max_tool_output_chars=1 << 20, wall_clock_seconds=86_400,
        concurrency=4096,
    )  # fmt: skip


class SimulatedFleet:
    def __init__(self, scenario: Scenario, redis_url: str, plan: FleetPlan, run_id: str) -> None:
        self.scenario = scenario
        self.redis_url = redis_url
        self.plan = plan
        self.run_id = run_id

    async def run(self, on_trained: Callable[..., None] | None = None) -> FleetResult:
        """Steps until the plan's simulated time is up; `on_trained` sees each step's
        groups, as the RL loop passes them to the trainer."""
        plan, scenario = self.plan, self.scenario
        clock = SimClock(scenario.time_scale)
        engines = [InProcessInference(SimBackend(scenario, clock)) for _ in range(plan.engines)]
        router = Router(engines, strategy=plan.routing, refresh_seconds=0.02)
        config = rollout_config(plan)
        environment = SimEnvironment(scenario, clock)
        tasks = TaskStore(BUNDLED_TASK_FILES)
        queue = QueueSettings(claim_idle_seconds=3600)
        client = queue_client(self.redis_url, socket_timeout=60)
        cycle = TaskCycle(list(tasks.tasks.values()), seed=scenario.seed)
        orchestrator = Orchestrator.for_run(client, self.run_id, cycle, config, queue)
        orchestrator.poll_ms = 50
        await orchestrator.start()

        async def task_of(run_id: str, task_id: str) -> Task:  # the bundled sets, in memory
            return tasks.get(task_id)

        parts = WorkerParts(
            router, environment, SimScorer(scenario, clock), WordTokenizer(),
            repositories_only(lambda task: Path("/simulated")), task_of,
        )  # fmt: skip
        worker = assemble_worker(
            parts, client, self.run_id, "worker", config, queue,
            concurrency=(plan.groups_per_step + plan.over_provision) * plan.group_size,
            heartbeat_seconds=600, poll_ms=20, policy_poll_seconds=0.01,
        )  # fmt: skip
        trainer = SimulatedTrainer(scenario, clock)
        publisher = WeightPublisher(engines)
        weights = torch.nn.Module()  # nothing to send: a sim engine's load time is modelled
        version = 0

        async def publish() -> tuple[int, float]:
            nonlocal version
            version += 1
            drain = orchestrator.drains_updates
            seconds = await publisher.publish(version, weights, drain=drain)
            return version, seconds

        result = FleetResult(plan)
        started_sim = clock.now()

        async def record(done: StepDone) -> None:
            batch = done.waited.batch
            # Idle: waiting for complete groups, and for the weights to reach every engine
            # (a draining update waits for each engine's longest running turn).
            waited = (done.waited.waited_seconds + done.sync_seconds) * scenario.time_scale
            result.step_waited.append(waited)
            result.step_trained.append(sum(len(g.trajectories) for g in batch.groups))
            result.stale_tokens += batch.stale_tokens
            result.sampled_tokens += done.stats.tokens
            result.staleness += batch.staleness
            result.in_flight += batch.in_flight
            result.in_queue += batch.in_queue
            result.step_ends.append(clock.now() - started_sim)
            await orchestrator.acknowledge(done.waited)

        async def out_of_time() -> bool:
            return clock.now() - started_sim >= plan.simulated_seconds

        await publish()  # every engine on version 1 before the first rollout
        working = asyncio.create_task(worker.run(asyncio.Event()))
        samples: list[float] = []

        async def sample_occupancy() -> None:
            slots = plan.engines * scenario.engine.max_num_seqs
            while True:
                await clock.sleep(10.0)
                samples.append(sum(e.backend.stats().running for e in engines) / slots)

        sampling = asyncio.create_task(sample_occupancy())
        lags: list[float] = []

        async def measure_lag() -> None:
            while True:
                before = time.perf_counter()
                await asyncio.sleep(0.01)
                lags.append(time.perf_counter() - before - 0.01)

        lagging = asyncio.create_task(measure_lag())
        cpu, real = time.process_time(), time.perf_counter()
        try:
            await RLLoop(orchestrator, trainer.step, publish).run(
                step=0, version=version, steps=plan.max_steps, stop_requested=out_of_time,
                on_step=record, on_trained=on_trained or (lambda *_: None),
            )  # fmt: skip
        finally:
            result.real_seconds = time.perf_counter() - real
            result.cpu_seconds = time.process_time() - cpu
            sampling.cancel()
            result.occupancy = sum(samples) / max(1, len(samples))
            working.cancel()  # and its episodes, before their engines stop
            with contextlib.suppress(asyncio.CancelledError):
                await working
            await router.close()
            for engine in engines:
                await engine.close()
            result.failed_rollouts = worker.failed
            result.stale_groups = orchestrator.collector.stale
            lagging.cancel()
            result.loop_lag_p99 = sorted(lags)[int(0.99 * (len(lags) - 1))] if lags else 0.0
            scheduled = orchestrator.next_group * plan.group_size
            result.queue_entries = scheduled + worker.completed
            await client.delete(orchestrator.rollouts.stream, orchestrator.trajectories.stream)
            await client.aclose()
        result.episode_seconds = environment.episode_seconds
        result.decisions, result.admissions = router.decisions, router.admissions
        result.prompt_tokens = sum(e.backend.prompt_tokens for e in engines)
        result.cached_prompt_tokens = sum(e.backend.cached_prompt_tokens for e in engines)
        return result


def balanced_trainer(scenario: Scenario, plan: FleetPlan, samples: int = 4000) -> Scenario:
    """The scenario with the trainer's per-token time set so that one step's training takes
    as long as the engines take to generate one step's rollouts when every sequence slot is
    busy — what over-provisioning is for: decoding at a full batch, prefilling the episode's
    first prompt and every tool output, and loading the step's weights.
    Generation and training balanced, as a serious deployment sizes them; a trainer left
    idle then measures what the schedule loses of the engines' capacity."""
    from etude.sim.episodes import ShapeSource

    shapes = ShapeSource(scenario.episodes, scenario.seed)
    engine = scenario.engine
    prompt_tokens = first_prompt_tokens(TaskStore(BUNDLED_TASK_FILES), scenario)
    generated = prefilled = 0
    for i in range(samples):
        shape = shapes.shape(f"balance-{i}")
        generated += shape.tokens
        calls = sum(turn.tool_calls for turn in shape.turns)
        outputs = sum(shapes.tool_output_tokens(f"balance-{i}/{c}") for c in range(calls))
        prefilled += prompt_tokens + outputs
    rollouts = plan.groups_per_step * plan.group_size
    tokens_per_step = rollouts * generated / samples
    decode = tokens_per_step * engine.step_seconds(engine.max_num_seqs) / engine.max_num_seqs
    prefill = rollouts * prefilled / samples * engine.prefill_seconds_per_token
    generate_step = (decode + prefill) / plan.engines + engine.weight_load_seconds
    per_token = max(0.0, generate_step - scenario.trainer_step_seconds) / tokens_per_step
    return scenario.model_copy(update={"trainer_seconds_per_token": per_token})


def first_prompt_tokens(tasks: TaskStore, scenario: Scenario) -> int:
    """Mean length, in the sim's word tokens, of an episode's first prompt over `tasks`:
    the system prompt with the real tool catalog and the task's instruction."""
    catalog = SimEnvironment(scenario, SimClock(scenario.time_scale)).catalog
    tokenizer = WordTokenizer()
    lengths = [
        len(tokenizer.encode(first_prompt(task.instruction, catalog)))
        for task in tasks.tasks.values()
    ]
    return round(sum(lengths) / max(1, len(lengths)))
