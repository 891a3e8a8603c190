"""Episodes of the local run, recorded for calibrating a scenario (etude.sim.calibrate), and the
local engine's timings.

- The stack: the local stack `etude train` starts (a redis-server and the inference,
  environment and reward services as processes on loopback, `etude.cli.stack.LocalStack`),
  serving the run config's policy (by default configs/local-tiny.yaml: the 11 M `tiny`
  preset) on the torch engine.
- The warm start: the run's SFT warm start (TrainingRun's): its scripted demonstrations
  through the real agent loop, whose sessions, tool calls and grading are timed too, then
  the SFT steps here; the policy reaches the engine by a weight update, as the trainer
  publishes it (`--policy DIR`: a saved policy, the demonstrations still run, no SFT).
- The episodes: GRPO groups of `rollout.group_size` over the run's training tasks in the
  order the orchestrator draws them (TaskCycle), at the run's hint tier and temperature,
  `rollout.concurrency` at a time (one rollout worker's), through the real agent loop.
  Around each are timed: opening its session, every tool call (`ExecutedCall.seconds`, and
  the tokens of the output the policy was shown), scoring (`Score.seconds`). One
  `RecordedEpisode` per line, written as each ends; a failed episode is run again, as a
  worker gives a failed rollout back.
- The engine (`--engine-out`), after the stack stops: decode steps at 1 … `max_num_seqs`
  sequences running at the episodes' median context, prefills at their turns' prompt
  lengths, a weight update, on the policy's weights with torch's threads as the inference
  service sets them (etude.inference.engine.TorchEngine stepped here).

Everything shares this machine's cores with whatever else runs on it: the latencies are
those of the local stack on this machine, load included.

    python loadtests/record_local_episodes.py --out episodes.jsonl --engine-out engine.json
    python -m etude.sim.calibrate episodes.jsonl --engine engine.json --out local.yaml
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import msgspec
import torch

from etude.cli.stack import LocalStack, ServiceSpec, settings_for
from etude.cli.status import read_status
from etude.common.payloads import RolloutRequest, Trajectory
from etude.common.run_config import RunConfig, load_run_config
from etude.common.tool_text import cut_to
from etude.environment.client import GrpcEnvironment
from etude.environment.types import ExecutedCall, OpenedSession
from etude.inference.backend_factory import cpu_threads
from etude.inference.client import GrpcInference
from etude.inference.config import InferenceConfig
from etude.inference.engine import EngineConfig, TorchEngine
from etude.inference.types import GenerationRequest, SamplingParams
from etude.model.checkpoint import from_pretrained, load_model, save_checkpoint
from etude.model.pretrained import policy_tokenizer, resolve_init
from etude.reward.client import GrpcReward
from etude.reward.types import Score
from etude.rollout.agent import EpisodeRunner
from etude.rollout.client import InProcessEpisodes, TaskCycle
from etude.rollout.repositories import RepositoryCache
from etude.rollout.samplers import PolicySampler, sampling_seed
from etude.rollout.service import repositories_only
from etude.sim.calibrate import EngineTimings, RecordedCall, RecordedEpisode
from etude.tasks.materialize import PROJECTS_DIR
from etude.tasks.task import Task
from etude.tasks.taskset import load_taskset, training_tiers
from etude.trainer.driver import serving_env
from etude.trainer.sft import sft_train

REPOSITORY = Path(__file__).resolve().parents[1]
CONFIG = REPOSITORY / "configs" / "local-tiny.yaml"
SERVICES = ("inference", "environment", "reward")
PREFILL_LENGTHS = (128, 512, 1024, 2048)
ATTEMPTS = 3


# -- what is timed around an episode -----------------------------------------------------------


@dataclass(slots=True)
class Timings:
    """What was timed in one session."""

    session_seconds: float
    calls: list[RecordedCall] = field(default_factory=list)
    score_seconds: float | None = None


class TimedEnvironment:
    """The environment, with each session's opening and every call recorded by session."""

    def __init__(self, inner: GrpcEnvironment, count_tokens: Callable[[str], int], cap: int):
        self.inner, self.count_tokens, self.cap = inner, count_tokens, cap
        self.sessions: dict[str, Timings] = {}

    async def create_session(
        self, task_id: str, repository_path: str, idle_ttl_seconds: float = 0, *,
        python_environment: str = "",
    ) -> OpenedSession:  # fmt: skip
        started = time.perf_counter()
        opened = await self.inner.create_session(
            task_id, repository_path, idle_ttl_seconds, python_environment=python_environment
        )
        self.sessions[opened.session_id] = Timings(time.perf_counter() - started)
        return opened

    async def execute(self, session_id: str, calls, parallel: bool = True) -> list[ExecutedCall]:
        results = await self.inner.execute(session_id, calls, parallel)
        for r in results:
            shown = self.count_tokens(cut_to(r.result.output, self.cap))
            self.sessions[session_id].calls.append(
                RecordedCall(
                    name=r.name,
                    seconds=r.seconds,
                    output_tokens=shown,
                    ends_episode=r.result.ends_episode,
                )
            )
        return results

    def __getattr__(self, name: str):  # fork, diff, close_session, list_tools: as they are
        return getattr(self.inner, name)


class TimedReward:
    """The reward service, each score's seconds recorded with its session's timings."""

    def __init__(self, inner: GrpcReward, environment: TimedEnvironment) -> None:
        self.inner, self.environment = inner, environment

    async def score(self, task_id: str, *, session_id: str = "", patch: str = "") -> Score:
        score = await self.inner.score(task_id, session_id=session_id, patch=patch)
        self.environment.sessions[session_id].score_seconds = score.seconds
        return score


def timed_episode(timings: Timings, trajectory: Trajectory | None = None) -> RecordedEpisode:
    return RecordedEpisode(
        trajectory=trajectory, calls=timings.calls, session_seconds=timings.session_seconds,
        score_seconds=timings.score_seconds,
    )  # fmt: skip


# -- the warm start -----------------------------------------------------------------------------


async def warm_start(
    run: RunConfig, model, episodes: InProcessEpisodes, tasks: list[Task], train: bool
) -> None:
    """The run's SFT warm start (TrainingRun._warm_start's steps): its scripted
    demonstrations — real sessions, real tool calls, real grading, whose timings are recorded
    — and, with `train`, the SFT steps on them."""
    sft = run.sft
    if not sft.enabled or sft.steps == 0:
        return
    demonstrated = tasks[: sft.demonstrations or len(tasks)]
    tiers = sft.hint_tiers or training_tiers(run.tasks)
    demos = await episodes.demonstrations(demonstrated, tiers=tiers, variants=sft.variants,
                                          run_id="record-sft")  # fmt: skip
    print(f"{len(demos)} demonstrations of {len(demonstrated)} tasks")
    if train:
        history = await asyncio.to_thread(sft_train, model, demos, sft, seed=run.policy.seed)
        print(f"SFT, {sft.steps} steps: loss {history[0].loss:.3f} → {history[-1].loss:.3f}")


# -- the policy's episodes ----------------------------------------------------------------------


async def record_episodes(
    run: RunConfig, inference: GrpcInference, tokenizer, environment: GrpcEnvironment,
    reward: GrpcReward, repositories: RepositoryCache, tasks: list[Task], count: int,
    seconds: float, out: BinaryIO,
) -> list[RecordedEpisode]:  # fmt: skip
    """Up to `count` episodes, groups started until `seconds` have passed, each written to
    `out` as it ends."""
    rollout = run.rollout
    cycle = TaskCycle(tasks, run.tasks.seed)
    gate = asyncio.Semaphore(rollout.concurrency)
    deadline = time.perf_counter() + seconds
    recorded: list[RecordedEpisode] = []
    failures: list[str] = []

    def count_tokens(text: str) -> int:
        return len(tokenizer.encode(text)) if text else 0

    async def attempt(request: RolloutRequest, task: Task, key: str) -> RecordedEpisode:
        timed = TimedEnvironment(environment, count_tokens, rollout.max_tool_output_chars)
        runner = EpisodeRunner(timed, TimedReward(reward, timed), tokenizer, rollout,
                               repositories_only(repositories))  # fmt: skip
        sampler = PolicySampler(
            inference, tokenizer, key, temperature=rollout.temperature, top_p=rollout.top_p,
            seed=sampling_seed(rollout.seed, request),
        )  # fmt: skip
        trajectory = await asyncio.wait_for(  # a hung session fails the attempt
            runner.run(request, task, sampler), rollout.wall_clock_seconds + 120
        )
        [timings] = timed.sessions.values()
        return timed_episode(timings, trajectory)

    async def episode(group: int, task: Task, sample: int) -> None:
        request = RolloutRequest(
            run_id="record", task_id=task.id, group_id=f"g{group:06d}-{task.id}",
            sample_index=sample, min_policy_version=0, hint_tier=run.tasks.hint_tier,
        )  # fmt: skip
        async with gate:
            for tries in range(1, ATTEMPTS + 1):  # as a worker gives a failed rollout back
                if time.perf_counter() > deadline:
                    return
                try:
                    episode = await attempt(request, task, f"record-{group}-{sample}-{tries}")
                    break
                except Exception as error:
                    failures.append(f"{task.id}: {type(error).__name__}: {error}")
                    print(f"     {task.id}: failed ({failures[-1]})", flush=True)
            else:
                return
        recorded.append(episode)
        out.write(msgspec.json.encode(episode) + b"\n")
        out.flush()
        t = episode.trajectory
        assert t is not None
        print(f"{len(recorded):4d} {task.id}: {t.turns} turns, {sum(t.loss_mask)} tokens, "
              f"{t.finish_reason}, reward {t.reward:.2f}", flush=True)  # fmt: skip

    groups = -(-count // rollout.group_size)
    jobs = []
    for group in range(groups):
        task = cycle.next()
        for sample in range(rollout.group_size):
            if len(jobs) < count:
                jobs.append(episode(group, task, sample))
    await asyncio.gather(*jobs)
    if failures:
        print(f"{len(failures)} attempts failed and were run again")
    return recorded


# -- the engine ---------------------------------------------------------------------------------


def median_context(trajectories: list[Trajectory]) -> int:
    """The median position of a sampled token: the context a typical decode step attends."""
    positions = [i for t in trajectories for i, m in enumerate(t.loss_mask) if m]
    return int(statistics.median(positions)) if positions else 1024


def prefill_lengths(trajectories: list[Trajectory]) -> list[int]:
    """The 10th, 30th, … 90th percentile of the turns' prompts (every turn prefills its whole
    context: the torch engine keeps no prefix cache), to the nearest 16 tokens."""
    starts = [
        i for t in trajectories for i, m in enumerate(t.loss_mask) if m and not t.loss_mask[i - 1]
    ]
    if len(starts) < 2:
        return list(PREFILL_LENGTHS)
    deciles = statistics.quantiles(starts, n=10)
    return sorted({max(16, round(deciles[k] / 16) * 16) for k in (0, 2, 4, 6, 8)})


def measure_engine(
    model, tokenizer, inference: InferenceConfig, context: int, lengths: list[int]
) -> dict:
    """Decode steps at each batch size (at `context`) and prefills of each of `lengths`, on
    a fresh engine."""
    engine_config = EngineConfig(max_num_seqs=inference.max_num_seqs,
                                 max_model_len=inference.max_model_len,
                                 max_prefill_tokens=inference.max_prefill_tokens)  # fmt: skip
    engine = TorchEngine(model, tokenizer, engine_config)
    rng = random.Random(0)
    vocab = model.config.vocab_size

    def add(request_id: str, length: int, tokens: int) -> None:
        prompt = tuple(rng.randrange(256, vocab) for _ in range(length))
        params = SamplingParams(temperature=1.0, max_tokens=tokens, ignore_eos=True, seed=0)
        request = GenerationRequest(request_id=request_id, prompt_token_ids=prompt, sampling=params)
        engine.add_request(request, lambda _: None)

    def timed_step() -> float:
        started = time.perf_counter()
        engine.step()
        return time.perf_counter() - started

    decode: list[tuple[int, float]] = []
    batch = 1
    while batch <= inference.max_num_seqs:
        for i in range(batch):
            add(f"decode-{batch}-{i}", context, 24)
        by_running: dict[int, list[float]] = {}
        while engine.has_work():
            admitting = engine.stats().waiting > 0
            running = engine.stats().running
            seconds = timed_step()
            if not admitting and running:  # a step of decoding alone
                by_running.setdefault(running, []).append(seconds)
        steps = by_running.get(batch, [])
        if steps:
            decode.append((batch, statistics.median(steps)))
            print(f"decode step, {batch:3d} running: {decode[-1][1] * 1e3:.2f} ms")
        batch *= 2
    prefill: list[tuple[int, float]] = []
    for length in lengths:
        if length + 2 > engine.max_model_len:
            continue
        seconds = []
        for repeat in range(3):
            add(f"prefill-{length}-{repeat}", length, 1)
            seconds.append(timed_step())  # the prompt's prefill and its first token
            while engine.has_work():
                engine.step()
        prefill.append((length, statistics.median(seconds)))
        print(f"prefill of {length:5d} tokens: {prefill[-1][1] * 1e3:.1f} ms")
    tensors = list(model.state_dict().items())  # every tensor, as the trainer publishes
    loads = []
    for version in (1, 2, 3):
        started = time.perf_counter()
        engine.queue_weight_update(version, tensors, lambda _: None)  # checked, then staged
        engine.step()  # applied between two steps: decoding waits for it
        loads.append(time.perf_counter() - started)
    parameter_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    print(f"weight update of {parameter_bytes / 1e6:.1f} MB: {statistics.median(loads):.3f} s")
    return {"decode_steps": decode, "prefills": prefill, "parameter_bytes": float(parameter_bytes),
            "weight_load_seconds": statistics.median(loads)}  # fmt: skip


# -- the whole ----------------------------------------------------------------------------------


async def main_async(args: argparse.Namespace) -> None:
    run = load_run_config(args.config, args.set)
    if run.policy.serve_with != "torch":
        raise SystemExit(f"policy.serve_with is {run.policy.serve_with!r}: this records torch")
    with tempfile.TemporaryDirectory(prefix="etude-record-") as scratch, args.out.open("wb") as out:
        settings = settings_for(Path(scratch) / "stack")
        models_dir = settings.stack.models_dir
        tokenizer = policy_tokenizer(run.policy.init, models_dir)
        train_tasks, _ = load_taskset(run.tasks)
        os.environ.update(serving_env(run, models_dir))  # the stack serves the run's policy
        stack = LocalStack(settings, tuple(ServiceSpec.module(n) for n in SERVICES))
        stack.start()
        try:
            status = read_status(stack.run_dir)
            assert status is not None
            address = {c.name: c.address for c in status.components}
            model, recorded, demonstrations, wall = await record(
                run, args, settings, tokenizer, train_tasks, address, stack.run_dir, out
            )
        finally:
            stack.stop()
    print(f"{len(recorded)} episodes of the policy in {wall:.0f} s and the timings of "
          f"{len(demonstrations)} scripted ones → {args.out}")  # fmt: skip
    if args.engine_out is None:
        return
    inference = InferenceConfig()  # the local stack's engine settings
    torch.set_num_threads(cpu_threads(inference))
    trajectories = [e.trajectory for e in recorded if e.trajectory is not None]
    context = median_context(trajectories)
    measured = measure_engine(model, tokenizer, inference, context, prefill_lengths(trajectories))
    note = (
        f"recorded {time.strftime('%Y-%m-%d')} on {os.cpu_count()} CPU cores ({cpu_model()}) by "
        f"`{recorder_command(args)}`: {len(recorded)} episodes of {run.name}'s policy "
        f"({run.policy.init}, SFT warm start of {run.sft.steps} steps) and {len(demonstrations)} "
        f"scripted demonstrations of its warm start, on the local stack; the torch engine, fp32, "
        f"{torch.get_num_threads()} torch thread(s), decode steps at a context of {context} "
        "tokens (the episodes' median), prefills at the 10th–90th percentile of their turns' "
        "prompts, a weight update as it holds decoding (in process)"
    )
    timings = EngineTimings(
        max_num_seqs=inference.max_num_seqs, prefix_cache_tokens=0,  # it prefills every turn
        note=note, **measured,
    )  # fmt: skip
    args.engine_out.write_bytes(msgspec.json.format(msgspec.json.encode(timings)) + b"\n")
    print(f"engine timings → {args.engine_out}")


async def record(
    run: RunConfig, args: argparse.Namespace, settings, tokenizer, train_tasks: list[Task],
    address: dict[str, str], run_dir: Path, out: BinaryIO,
):  # fmt: skip
    """The warm start and the episodes on the running stack: the policy, the policy's
    episodes, the demonstrations' timings and the episodes' wall time."""
    environment = GrpcEnvironment(address["environment"], settings.client)
    reward = GrpcReward(address["reward"], settings.client)
    inference = GrpcInference(address["inference"], settings.client)
    try:
        scripted = TimedEnvironment(
            environment, lambda text: len(tokenizer.encode(text)) if text else 0,
            run.rollout.max_tool_output_chars,
        )  # fmt: skip
        episodes = InProcessEpisodes(scripted, TimedReward(reward, scripted), tokenizer,
                                     run.rollout, run_dir / "tasks")  # fmt: skip
        if args.policy is not None:
            model = load_model(args.policy)
        else:
            model = from_pretrained(
                resolve_init(run.policy.init, settings.stack.models_dir), seed=run.policy.seed
            )
        await warm_start(run, model, episodes, train_tasks, train=args.policy is None)
        demonstrations = [timed_episode(t) for t in scripted.sessions.values()]
        for episode in demonstrations:
            out.write(msgspec.json.encode(episode) + b"\n")
        if args.save_policy is not None:
            save_checkpoint(model, args.save_policy, tokenizer)
        model.eval().requires_grad_(False)
        await inference.update_weights(1, list(model.state_dict().items()))  # as published
        started = time.perf_counter()
        recorded = await record_episodes(
            run, inference, tokenizer, environment, reward,
            RepositoryCache(run_dir / "tasks", PROJECTS_DIR), train_tasks, args.episodes,
            args.minutes * 60, out,
        )  # fmt: skip
        return model, recorded, demonstrations, time.perf_counter() - started
    finally:
        for client in (environment, reward, inference):
            await client.close()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def recorder_command(args: argparse.Namespace) -> str:
    """This command as it was run, less where its files went."""
    words = ["python loadtests/record_local_episodes.py"]
    config = args.config.resolve()
    if config != CONFIG:
        shown = config.relative_to(REPOSITORY) if config.is_relative_to(REPOSITORY) else config
        words.append(f"--config {shown}")
    words += [f"--set {item}" for item in args.set]
    words += [f"--episodes {args.episodes}", f"--minutes {args.minutes:g}"]
    return " ".join(words)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=CONFIG, help="the run config")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a key of the run config (repeatable)",
    )
    parser.add_argument("--episodes", type=int, default=128, help="episodes to record at most")
    parser.add_argument(
        "--minutes",
        type=float,
        default=8.0,
        help="start no episode after this many minutes of recording",
    )
    parser.add_argument("--out", type=Path, required=True, help="the episodes (JSONL)")
    parser.add_argument("--engine-out", type=Path, help="the engine's timings (JSON)")
    parser.add_argument("--policy", type=Path, help="a saved policy: no SFT")
    parser.add_argument("--save-policy", type=Path, help="keep the warm-started policy here")
    asyncio.run(main_async(parser.parse_args()))


if __name__ == "__main__":
    main()
