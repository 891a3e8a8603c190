"""The orchestrator and Redis at cluster scale: the trainer's side of the rollout queue fed
by 1,024 simulated inference engines, whose rollout workers are replaced by a load generator.

At that size the agent loops of `loadtests/rollout_sim.py` would need dozens of cores, so
only what is under test stays real:

* real — a redis-server (AOF on, as the local stack runs it) with the run's rollout and
  trajectory streams; the `Orchestrator` and its GroupCollector (etude.rollout.client) with
  the `async_partial` schedule; the RL loop (etude.trainer.rl_loop) with the simulated
  trainer (etude.trainer.simulated: a step takes the simulated time a real one would, the
  scenario's per-token time set by `balanced_trainer`); `Trajectory` payloads with token
  arrays as long as the episodes they stand for;
* generated — the rollout workers and the engines. A load-generator process takes rollout
  entries from the rollout stream as a worker does (a consumer of the worker's group, a
  heartbeat per held entry every `--heartbeat-seconds` of simulated time, the trajectory
  written with the rollout's key, then the entry acknowledged), and writes each trajectory
  when its episode would end. The episode is drawn from the scenario and the rollout's key
  (`EpisodeModel`): its shape (turns, tokens, tool calls) as the sim engine draws it, each
  turn prefilled and decoded at a full batch, each batch of tool calls as long as its
  slowest, then the score. Token ids come from a 151,936-token vocabulary, behaviour
  logprobs are drawn, and each sampled token carries the policy version that was current
  when the episode decoded it (versions change mid-episode, as partial rollouts see them);
* not modelled — weight updates: `publish` only bumps the version (there are no engines to
  load weights into, so no decoding pauses and no sync time), and writes it where the
  generator's engines read it; routing and prefix caching; failures.

The generator holds as many rollouts at once as keep every engine's `max_num_seqs`
sequences busy on average (an episode in a tool call or being scored holds no sequence).

`--payload-fraction` cuts every token array to that share of the episode's length (the
timing stays the episode's): the orchestrator holds every trajectory of every open group
decoded, about 1 MB per real-size episode, and at 1,024 engines that is over 100,000 of
them. The run fails rather than exceed `--memory-gb` (orchestrator + Redis), and fails if
a rollout failed, if fewer than three steps ran, or if the generator wrote trajectories
later than 2.5 % of a median episode after they were due (p99): a benchmark must not
report figures from a broken run.

    python loadtests/orchestrator_scale.py --json out.json     # 1,024 engines, ~9 min
    python loadtests/orchestrator_scale.py --quick             # 64 engines, under a minute
    python loadtests/orchestrator_scale.py --engines 256 --time-scale 8 --payload-fraction 0.25
"""

from __future__ import annotations

import asyncio
import contextlib
import faulthandler
import heapq
import itertools
import logging
import multiprocessing
import random
import resource
import statistics
import sys
import tempfile
import time
from bisect import bisect_right
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import NamedTuple

from benchlib import argument_parser, metric, percentile, print_metrics, write_json

from etude.common.payloads import RolloutRequest, Trajectory, encode
from etude.common.queue import Delivery, QueueUnavailableError, queue_client, raise_if_cancelled
from etude.common.redis_server import RedisServer
from etude.common.settings import QueueSettings
from etude.rollout.client import Orchestrator, TaskCycle
from etude.rollout.streams import rollout_key, rollout_queue, trajectory_queue
from etude.sim.clock import SimClock
from etude.sim.episodes import ShapeSource
from etude.sim.scenario import Scenario, load_scenario, seeded
from etude.tasks.materialize import BUNDLED_TASK_FILES
from etude.tasks.store import TaskStore
from etude.trainer.fleet import FleetPlan, balanced_trainer, first_prompt_tokens, rollout_config
from etude.trainer.rl_loop import RLLoop, StepDone
from etude.trainer.simulated import SimulatedTrainer

log = logging.getLogger("orchestrator_scale")
LOG_FORMAT = "%(asctime)s %(processName)s %(message)s"

MAX_STALENESS = 8
RUN_ID = "scale"
VOCABULARY = 151_936
TOOLS = ("read_file", "grep", "run_terminal_command", "list_dir")
"""The tools the sim engine's turns call, in its rotation (etude.inference.sim_backend)."""
BIN_SECONDS = 0.1  # the generator's counts, per this much real time
WRITERS = 32  # a generator's concurrent writes: fewer than its client's 64 connections


@dataclass(frozen=True, slots=True)
class Size:
    engines: int
    time_scale: float
    steps: int
    payload_fraction: float
    generators: int = 1
    heartbeat_seconds: float = 5.0
    """Simulated seconds between heartbeats of a held rollout (the worker's default)."""
    memory_gb: float = 8.0

    def plan(self) -> FleetPlan:
        """The proportions of `rollout_sim` (16 engines: 64 groups a step, 128 over)."""
        return FleetPlan(
            engines=self.engines, schedule="async_partial", groups_per_step=4 * self.engines,
            over_provision=8 * self.engines, max_staleness=MAX_STALENESS,
        )  # fmt: skip


FULL = Size(engines=1024, time_scale=3.0, steps=4, payload_fraction=1 / 32)
QUICK = Size(engines=64, time_scale=36.0, steps=4, payload_fraction=1 / 8)


class FailedRun(RuntimeError):
    pass


# -- the episodes -------------------------------------------------------------------------------


class Turn(NamedTuple):
    start: float
    """Simulated seconds into the episode at which decoding starts (after its prefill)."""
    end: float
    tokens: int
    calls: int
    observed: int
    """Tool-output tokens shown to the policy after the turn."""


@dataclass(frozen=True, slots=True)
class Episode:
    seconds: float
    turns: tuple[Turn, ...]
    engine_seconds: float
    """Time holding an engine's sequence slot: prefilling and decoding."""
    solved: bool


class EpisodeModel:
    """An episode's timeline, drawn from the scenario and the rollout's key: its shape as the
    sim engine draws it (etude.sim.episodes); a session opened; each turn prefilled (the
    first prompt, then the tool outputs it reads) and decoded at a full batch; each batch of
    tool calls as long as its slowest; then the score."""

    def __init__(self, scenario: Scenario, prompt_tokens: int) -> None:
        self.scenario = scenario
        self.prompt_tokens = prompt_tokens
        self.shapes = ShapeSource(scenario.episodes, scenario.seed)
        engine = scenario.engine
        self.token_seconds = engine.step_seconds(engine.max_num_seqs)
        # On a full engine every sequence's prefill holds the others: on average an episode
        # waits max_num_seqs times as long as its own prefill takes.
        self.prefill_seconds = engine.prefill_seconds_per_token * engine.max_num_seqs

    def episode(self, key: str) -> Episode:
        s = self.scenario
        shape = self.shapes.shape(key)
        rng = seeded(s.seed, key, "load")
        now = s.session_seconds.draw(rng)
        prefill, engine_seconds, turns = self.prompt_tokens, 0.0, []
        for index, turn in enumerate(shape.turns, 1):
            start = now + prefill * self.prefill_seconds
            end = start + turn.tokens * self.token_seconds
            engine_seconds += end - now
            outputs = [s.episodes.tool_output_tokens.draw(rng) for _ in range(turn.tool_calls)]
            observed = sum(max(1, round(o)) for o in outputs)
            tools = [TOOLS[(index + i) % len(TOOLS)] for i in range(turn.tool_calls)]
            now = end + max((s.tools.draw(tool, rng) for tool in tools), default=0.0)
            turns.append(Turn(start, end, turn.tokens, turn.tool_calls, observed))
            prefill = observed
        seconds = now + s.score_seconds.draw(rng)
        return Episode(seconds, tuple(turns), engine_seconds, shape.solved)


def generator_slots(model: EpisodeModel, engines: int, samples: int = 2000) -> int:
    """Rollouts held at once that keep every engine's sequences busy on average."""
    episodes = [model.episode(f"slots-{i}") for i in range(samples)]
    busy = sum(e.engine_seconds for e in episodes) / sum(e.seconds for e in episodes)
    return round(engines * model.scenario.engine.max_num_seqs / busy)


def median_episode_seconds(model: EpisodeModel, samples: int = 2000) -> float:
    return statistics.median(model.episode(f"median-{i}").seconds for i in range(samples))


class Payloads:
    """Trajectory arrays as long as an episode (times `fraction`), cut from pools of token
    ids and logprobs drawn once: building one costs slices, not a draw per token."""

    def __init__(self, prompt_tokens: int, fraction: float, seed: int, pool: int = 1 << 17):
        rng = random.Random(seed)
        self.prompt_tokens = prompt_tokens
        self.fraction = fraction
        self.ids = [rng.randrange(VOCABULARY) for _ in range(pool)]
        self.logprobs = [-rng.expovariate(2.0) for _ in range(pool)]
        self.offsets = itertools.count(0, 7919)

    def _cut(self, pool: list, n: int) -> list:
        start = next(self.offsets) % len(pool)
        out = pool[start : start + n]
        while len(out) < n:
            out += pool[: n - len(out)]
        return out

    def length(self, tokens: int) -> int:
        return max(1, round(tokens * self.fraction))

    def trajectory(
        self, request: RolloutRequest, episode: Episode, versions: Callable[[Turn, int], list[int]]
    ) -> Trajectory:
        """`versions(turn, n)`: the policy version of each of the turn's `n` tokens."""
        n = self.length(self.prompt_tokens)
        ids, logprobs, policy, mask = self._cut(self.ids, n), [0.0] * n, [-1] * n, [0] * n
        for turn in episode.turns:
            n = self.length(turn.tokens)
            ids += self._cut(self.ids, n)
            logprobs += self._cut(self.logprobs, n)
            policy += versions(turn, n)
            mask += [1] * n
            if turn.observed:
                n = self.length(turn.observed)
                ids += self._cut(self.ids, n)
                logprobs += [0.0] * n
                policy += [-1] * n
                mask += [0] * n
        reward = 1.0 if episode.solved else 0.0
        return Trajectory(
            run_id=request.run_id, task_id=request.task_id, group_id=request.group_id,
            sample_index=request.sample_index, token_ids=ids, logprobs=logprobs,
            policy_versions=policy, loss_mask=mask, reward=reward,
            reward_components={"correctness": reward}, turns=len(episode.turns),
            calls_per_turn=[t.calls or 1 for t in episode.turns], finish_reason="submitted",
        )  # fmt: skip


# -- the load generator (a process of its own) -----------------------------------------------


def version_key(run_id: str) -> str:
    """Where `publish` writes the version the generator's engines sample with."""
    return f"etude:{run_id}:loadgen:version"


@dataclass(slots=True)
class GeneratorResult:
    written: Counter = field(default_factory=Counter)
    """Trajectory entries written, per bin (int(monotonic / BIN_SECONDS))."""
    written_bytes: Counter = field(default_factory=Counter)
    touched: Counter = field(default_factory=Counter)
    held: dict[int, int] = field(default_factory=dict)
    """Rollouts held, sampled per bin."""
    lateness: list[float] = field(default_factory=list)
    """Real seconds from when each trajectory was due to when it was written."""
    failed: int = 0
    cpu_seconds: float = 0.0
    """The generator process's, over its whole run."""


class LoadGenerator:
    def __init__(
        self, url: str, scenario: Scenario, size: Size, index: int, slots: int,
        prompt_tokens: int,
    ) -> None:  # fmt: skip
        self.client = queue_client(url, socket_timeout=60)
        queue = QueueSettings(claim_idle_seconds=3600)
        consumer = f"loadgen-{index}"
        self.rollouts = rollout_queue(self.client, RUN_ID, consumer, queue)
        self.trajectories = trajectory_queue(self.client, RUN_ID, consumer, queue)
        self.model = EpisodeModel(scenario, prompt_tokens)
        self.payloads = Payloads(prompt_tokens, size.payload_fraction, seed=index)
        self.scale = scenario.time_scale
        self.size = size
        self.slots = slots
        self.result = GeneratorResult()
        self.due: list[tuple[float, int, Delivery, Episode, float]] = []  # a heap
        self.order = itertools.count()
        self.held: set[str] = set()  # entry ids taken and not yet acknowledged
        self.waiting: list[Delivery] = []  # for a newer policy than the engines have
        self.freed = asyncio.Event()
        self.ended: asyncio.Queue = asyncio.Queue()  # episodes over, trajectories to write
        self.changes: list[float] = [0.0]  # when the version changed (monotonic) …
        self.versions: list[int] = [0]  # … and to what

    async def run(self, stop) -> GeneratorResult:
        await self.rollouts.ensure_group()
        await self.trajectories.ensure_group()
        cpu = time.process_time()
        parts = [self._take(), self._dispatch(), self._follow_version(), self._sample()]
        parts += [self._write() for _ in range(WRITERS)]
        if self.size.heartbeat_seconds > 0:
            parts.append(self._heartbeat())
        tasks = [asyncio.create_task(part) for part in parts]
        try:
            while not stop.is_set():
                for task in tasks:
                    if task.done():
                        task.result()  # a part that stopped raises here
                await asyncio.sleep(0.05)
            # A generator that cannot wind down says where it is stuck.
            faulthandler.dump_traceback_later(60, exit=False)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await self.client.aclose()
            self.result.cpu_seconds = time.process_time() - cpu
        return self.result

    async def _take(self) -> None:
        while True:
            raise_if_cancelled()  # redis-py can swallow a cancel mid-command
            free = self.slots - len(self.held)
            if free <= 0:
                self.freed.clear()
                await self.freed.wait()
                continue
            deliveries = await self.rollouts.get(count=min(free, 128), block_ms=50)
            for delivery in deliveries:
                self.held.add(delivery.entry_id)
                self._start(delivery)

    def _start(self, delivery: Delivery) -> None:
        request = delivery.payload
        assert isinstance(request, RolloutRequest)
        if self.versions[-1] < request.min_policy_version:  # as a worker waits for it
            self.waiting.append(delivery)
            return
        episode = self.model.episode(rollout_key(request))
        now = time.monotonic()
        item = (now + episode.seconds / self.scale, next(self.order), delivery, episode, now)
        heapq.heappush(self.due, item)

    async def _dispatch(self) -> None:
        """Hands each episode to the writers when it ends (a writer late to take it makes
        the trajectory late: lateness measures whether the generator keeps up)."""
        while True:
            raise_if_cancelled()  # redis-py can swallow a cancel mid-command
            now = time.monotonic()
            while self.due and self.due[0][0] <= now:
                self.ended.put_nowait(heapq.heappop(self.due))
            await asyncio.sleep(0.005)

    async def _write(self) -> None:
        while True:
            raise_if_cancelled()  # redis-py can swallow a cancel mid-command
            due, _, delivery, episode, started = await self.ended.get()
            await self._finish(delivery, episode, started, due)

    async def _finish(self, delivery: Delivery, episode: Episode, started: float, due: float):
        request = delivery.payload
        assert isinstance(request, RolloutRequest)
        try:
            trajectory = self.payloads.trajectory(
                request, episode, lambda turn, n: self._versions(started, turn, n)
            )
            await self.trajectories.put(trajectory, key=rollout_key(request))
            await self.rollouts.ack(delivery.entry_id)
            done = time.monotonic()
            self.result.lateness.append(done - due)
            self.result.written[int(done / BIN_SECONDS)] += 1
            self.result.written_bytes[int(done / BIN_SECONDS)] += len(encode(trajectory))
        except Exception as error:
            self.result.failed += 1
            log.warning("rollout %s failed: %r", rollout_key(request), error)
            with contextlib.suppress(QueueUnavailableError):
                await self.rollouts.fail(delivery.entry_id, f"{type(error).__name__}: {error}")
        finally:
            self.held.discard(delivery.entry_id)
            self.freed.set()

    def _versions(self, started: float, turn: Turn, n: int) -> list[int]:
        """The version of each of a turn's `n` tokens: the one current when it was decoded
        (a turn that spans an update is split where the update landed)."""
        begin, end = started + turn.start / self.scale, started + turn.end / self.scale
        i = max(0, bisect_right(self.changes, begin) - 1)
        out: list[int] = []
        version = self.versions[i]
        for when, newer in zip(self.changes[i + 1 :], self.versions[i + 1 :], strict=True):
            if when >= end:
                break
            cut = min(n, round(n * (when - begin) / max(end - begin, 1e-9)))
            out += [version] * max(0, cut - len(out))
            version = newer
        return out + [version] * (n - len(out))

    async def _follow_version(self) -> None:
        while True:
            raise_if_cancelled()  # redis-py can swallow a cancel mid-command
            version = int(await self.client.get(version_key(RUN_ID)) or 0)
            if version != self.versions[-1]:
                self.changes.append(time.monotonic())
                self.versions.append(version)
                waiting, self.waiting = self.waiting, []
                for delivery in waiting:
                    self._start(delivery)
            await asyncio.sleep(0.01)

    async def _heartbeat(self) -> None:
        """What a worker's heartbeats cost Redis (a touch per held entry), sent in batches."""
        while True:
            raise_if_cancelled()  # redis-py can swallow a cancel mid-command
            await asyncio.sleep(self.size.heartbeat_seconds / self.scale)
            held = list(self.held)
            for i in range(0, len(held), 1000):
                touched = await self.rollouts.touch(*held[i : i + 1000])
                self.result.touched[int(time.monotonic() / BIN_SECONDS)] += touched

    async def _sample(self) -> None:
        while True:
            raise_if_cancelled()  # redis-py can swallow a cancel mid-command
            self.result.held[int(time.monotonic() / BIN_SECONDS)] = len(self.held)
            await asyncio.sleep(1.0)


def generate(index: int, url: str, scenario: Scenario, size: Size, slots: int,
             prompt_tokens: int, stop, results) -> None:  # fmt: skip
    """A generator process: runs until `stop`, then sends its `GeneratorResult` as a dict
    (or what it raised, as text)."""
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    try:
        generator = LoadGenerator(url, scenario, size, index, slots, prompt_tokens)
        result = asyncio.run(generator.run(stop))
        log.info("load generator %d: stopped, sending its counts", index)
        results.put({f.name: getattr(result, f.name) for f in fields(result)})
    except BaseException as error:
        results.put(f"load generator {index}: {type(error).__name__}: {error}")
        raise


# -- the orchestrator's side (this process) ----------------------------------------------------


@dataclass(slots=True)
class TrainerSide:
    steps: int = 0
    step_ends: list[float] = field(default_factory=list)
    """Simulated seconds from the first schedule to the end of each step."""
    step_waited: list[float] = field(default_factory=list)
    window: tuple[float, float] = (0.0, 0.0)
    """Monotonic start and end of the measured window: the RL loop's run."""
    cpu_seconds: float = 0.0
    trainer_cpu_seconds: float = 0.0
    """The simulated trainer's thread (counting a batch's tokens), not the orchestrator's."""
    redis_cpu_seconds: float = 0.0
    rollout_entries: int = 0
    lags: list[float] = field(default_factory=list)
    held_peak: int = 0
    rss_peak_gb: float = 0.0
    redis_memory_peak_gb: float = 0.0

    @property
    def real_seconds(self) -> float:
        return self.window[1] - self.window[0]

    @property
    def trainer_idle(self) -> float:
        """Share of the steady state (from the end of the first step) the trainer waited."""
        steady = self.step_ends[-1] - self.step_ends[0] if len(self.step_ends) > 1 else 0.0
        return sum(self.step_waited[1:]) / max(steady, 1e-9)


def rss_gb() -> float:
    """Peak resident memory of this process (ru_maxrss: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 30) * (1 if sys.platform == "darwin" else 1024)


async def orchestrate(url: str, scenario: Scenario, size: Size) -> TrainerSide:
    plan = size.plan()
    client = queue_client(url, socket_timeout=60)
    cycle = TaskCycle(list(TaskStore(BUNDLED_TASK_FILES).tasks.values()), seed=scenario.seed)
    queue = QueueSettings(claim_idle_seconds=3600)
    orchestrator = Orchestrator.for_run(client, RUN_ID, cycle, rollout_config(plan), queue)
    orchestrator.poll_ms = 50
    await orchestrator.start()
    clock = SimClock(scenario.time_scale)
    trainer = SimulatedTrainer(scenario, clock)
    side = TrainerSide()
    version = 0

    async def publish() -> tuple[int, float]:
        nonlocal version
        version += 1
        await client.set(version_key(RUN_ID), version)
        return version, 0.0

    def train(groups: list[list[Trajectory]]):
        before = time.thread_time()
        try:
            return trainer.step(groups)
        finally:
            side.trainer_cpu_seconds += time.thread_time() - before

    started = clock.now()

    async def record(done: StepDone) -> None:
        side.step_waited.append((done.waited.waited_seconds + done.sync_seconds) * clock.time_scale)
        side.step_ends.append(clock.now() - started)
        log.info("step %d done at %.0f simulated seconds", len(side.step_ends), side.step_ends[-1])
        await orchestrator.acknowledge(done.waited)

    async def never() -> bool:
        return False

    async def measure_lag() -> None:
        while True:
            before = time.perf_counter()
            await asyncio.sleep(0.01)
            side.lags.append(time.perf_counter() - before - 0.01)

    stopped: list[str] = []  # why the RL loop was cancelled

    async def watch_memory(loop_task: asyncio.Task) -> None:
        while True:
            held = orchestrator.collector.open_groups * plan.group_size
            side.held_peak = max(side.held_peak, held - orchestrator.collector.running_rollouts)
            redis_gb = int((await client.info("memory"))["used_memory"]) / (1 << 30)
            side.redis_memory_peak_gb = max(side.redis_memory_peak_gb, redis_gb)
            side.rss_peak_gb = rss_gb()
            if side.rss_peak_gb + redis_gb > size.memory_gb:
                stopped.append(
                    f"orchestrator {side.rss_peak_gb:.1f} GB + Redis {redis_gb:.1f} GB is over"
                    f" --memory-gb {size.memory_gb}: lower --payload-fraction"
                )
                loop_task.cancel()
                return
            await asyncio.sleep(1.0)

    async def redis_cpu() -> float:
        info = await client.info("cpu")
        return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])

    await publish()  # the engines on version 1 before the first rollout
    lagging = asyncio.create_task(measure_lag())
    redis_before, cpu_before, real_before = await redis_cpu(), time.process_time(), time.monotonic()
    loop = RLLoop(orchestrator, train, publish)
    running = asyncio.create_task(
        loop.run(step=0, version=version, steps=size.steps, stop_requested=never, on_step=record)
    )
    watching = asyncio.create_task(watch_memory(running))
    try:
        side.steps = await running
    except asyncio.CancelledError:
        if not stopped:
            raise
        raise FailedRun(stopped[0]) from None
    finally:
        side.window = (real_before, time.monotonic())
        side.cpu_seconds = time.process_time() - cpu_before
        side.redis_cpu_seconds = await redis_cpu() - redis_before
        side.rollout_entries = orchestrator.next_group * plan.group_size
        for task in (lagging, watching):
            task.cancel()
        await client.aclose()
    return side


def run(size: Size, scenario_name: str) -> tuple[TrainerSide, list[GeneratorResult], dict]:
    """Redis, the generator processes and the orchestrator's side; what each measured."""
    balanced = balanced_trainer(load_scenario(scenario_name, time_scale=size.time_scale),
                                size.plan())  # fmt: skip
    # The trainer counts the tokens it is sent: cut arrays train in the time of whole ones.
    per_token = balanced.trainer_seconds_per_token / size.payload_fraction
    scenario = balanced.model_copy(update={"trainer_seconds_per_token": per_token})
    prompt_tokens = first_prompt_tokens(TaskStore(BUNDLED_TASK_FILES), scenario)
    model = EpisodeModel(scenario, prompt_tokens)
    slots = generator_slots(model, size.engines)
    context = multiprocessing.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="etude-scale-") as data_dir:
        server = RedisServer(data_dir=Path(data_dir)).start()
        stop, results = context.Event(), context.Queue()
        share = -(-slots // size.generators)
        arguments = (server.url, scenario, size, share, prompt_tokens, stop, results)
        processes = [
            context.Process(target=generate, args=(i, *arguments)) for i in range(size.generators)
        ]
        try:
            for process in processes:
                process.start()
            side = asyncio.run(orchestrate(server.url, scenario, size))
        finally:
            stop.set()
            log.info("the RL loop ran %d steps; waiting for the load generators", size.steps)
            generated = [results.get(timeout=600) for _ in processes]
            for process in processes:
                process.join(timeout=30)
            server.stop()
    for result in generated:
        if isinstance(result, str):
            raise FailedRun(result)
    episode = median_episode_seconds(model)
    generated = [GeneratorResult(**result) for result in generated]
    return side, generated, {"slots": slots, "median_episode_s": episode}


def in_window(counts: Counter | dict, window: tuple[float, float]) -> list[float]:
    first, last = int(window[0] / BIN_SECONDS), int(window[1] / BIN_SECONDS)
    return [value for key, value in counts.items() if first <= key <= last]


def check(side: TrainerSide, generated: list[GeneratorResult], size: Size, model: dict) -> None:
    failed = sum(g.failed for g in generated)
    if failed:
        raise FailedRun(f"{failed} generated rollouts failed to write")
    if side.steps < 3:
        raise FailedRun(f"{side.steps} steps (3 or more make a steady state)")
    lateness = percentile([x for g in generated for x in g.lateness], 99) * size.time_scale
    if lateness > 0.025 * model["median_episode_s"]:
        raise FailedRun(
            f"the generator wrote trajectories {lateness:.1f} simulated seconds late (p99), over"
            f" 2.5% of a median episode ({model['median_episode_s']:.0f} s): lower the time"
            " scale or add --generators"
        )


def figures(side: TrainerSide, generated: list[GeneratorResult], size: Size) -> dict:
    seconds = side.real_seconds
    trajectories = sum(sum(in_window(g.written, side.window)) for g in generated)
    payload = sum(sum(in_window(g.written_bytes, side.window)) for g in generated)
    touches = sum(sum(in_window(g.touched, side.window)) for g in generated)
    held = [statistics.fmean(in_window(g.held, side.window) or [0]) for g in generated]
    lateness = [x for g in generated for x in g.lateness]
    orchestrator_cpu = side.cpu_seconds - side.trainer_cpu_seconds
    lags = sorted(side.lags) or [0.0]
    return {
        "engines": metric(size.engines, "engines"),
        "steps": metric(side.steps, "steps"),
        "rollouts_in_flight": metric(sum(held), "rollouts"),
        "queue_entries_per_s": metric((side.rollout_entries + trajectories) / seconds, "entries/s"),
        "trajectories_per_s": metric(trajectories / seconds, "entries/s"),
        "trajectory_mb_per_s": metric(payload / seconds / 1e6, "MB/s"),
        "heartbeat_touches_per_s": metric(touches / seconds, "entries/s"),
        "orchestrator_cpu_cores": metric(orchestrator_cpu / seconds, "cores"),
        "simulated_trainer_cpu_cores": metric(side.trainer_cpu_seconds / seconds, "cores"),
        "generator_cpu_cores": metric(sum(g.cpu_seconds for g in generated) / seconds, "cores"),
        "redis_cpu_cores": metric(side.redis_cpu_seconds / seconds, "cores"),
        "loop_lag_p99_ms": metric(percentile(lags, 99) * 1000, "ms"),
        "loop_lag_max_ms": metric(lags[-1] * 1000, "ms"),
        "trainer_idle": metric(side.trainer_idle, "fraction"),
        "held_trajectories_peak": metric(side.held_peak, "trajectories"),
        "orchestrator_rss_peak_gb": metric(side.rss_peak_gb, "GB"),
        "redis_memory_peak_gb": metric(side.redis_memory_peak_gb, "GB"),
        "generator_lateness_p99_ms": metric(percentile(lateness, 99) * 1000, "ms"),
        "real_seconds": metric(seconds, "s"),
    }


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--scenario", default="default", help="bundled name or YAML file")
    parser.add_argument("--engines", type=int, help="simulated engines (default 1024; quick 64)")
    parser.add_argument("--time-scale", type=float, help="simulated seconds per real second")
    parser.add_argument("--steps", type=int, help="RL steps (at least 3)")
    parser.add_argument("--payload-fraction", type=float,
                        help="token arrays at this share of the episode's length")  # fmt: skip
    parser.add_argument("--generators", type=int, help="load-generator processes (default 1)")
    parser.add_argument("--heartbeat-seconds", type=float,
                        help="simulated seconds between heartbeats (0: none)")  # fmt: skip
    parser.add_argument("--memory-gb", type=float, help="orchestrator + Redis limit (default 8)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    size = QUICK if args.quick else FULL
    options = {
        "engines": args.engines, "time_scale": args.time_scale, "steps": args.steps,
        "payload_fraction": args.payload_fraction, "generators": args.generators,
        "heartbeat_seconds": args.heartbeat_seconds, "memory_gb": args.memory_gb,
    }  # fmt: skip
    size = replace(size, **{k: v for k, v in options.items() if v is not None})
    side, generated, model = run(size, args.scenario)
    check(side, generated, size, model)
    out = figures(side, generated, size)
    plan = size.plan()
    print_metrics(
        f"orchestrator_scale: {size.engines} engines × 64 sequences,"
        f" {plan.groups_per_step * plan.group_size} rollouts/step, time scale {size.time_scale},"
        f" payloads × {size.payload_fraction:g}", out,
    )  # fmt: skip
    layout = {"engines": size.engines, "groups_per_step": plan.groups_per_step, "group_size": 8,
              "over_provision": plan.over_provision, "max_staleness": MAX_STALENESS,
              "schedule": plan.schedule, "time_scale": size.time_scale, "steps": size.steps,
              "payload_fraction": size.payload_fraction, "generators": size.generators,
              "generator_slots": model["slots"], "heartbeat_seconds": size.heartbeat_seconds,
              "median_episode_s": round(model["median_episode_s"], 1),
              "scenario": args.scenario}  # fmt: skip
    write_json(args.json, "orchestrator_scale", out, plan=layout)


if __name__ == "__main__":
    main()
