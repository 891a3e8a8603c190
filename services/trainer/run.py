"""A training run, end to end, given the services' addresses: the policy, the SFT warm
start, held-out evaluation, and the RL loop — in torchtitan's manner, `rl()` reads at a
glance:

    schedule groups → wait for complete groups → GRPO step → publish version v+1
    → schedule more → checkpoint → acknowledge the trajectories used → report

Rollout workers run elsewhere (processes or Ray actors) and meet this loop only through the
run's two Redis streams and the inference service's policy version. The run asks the rollout
(etude.rollout.client) for a schedule of rollouts and their trajectories (the orchestrator),
and runs held-out evaluations and SFT demonstrations in process (InProcessEpisodes).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from etude.common.auth import metrics_authorizer
from etude.common.metrics import start_metrics_endpoint
from etude.common.payloads import Trajectory
from etude.common.queue import queue_client
from etude.common.run_config import RunConfig
from etude.common.runs import RunRegistry
from etude.common.settings import EtudeSettings
from etude.common.trajectory_log import TrajectoryLog
from etude.environment.client import GrpcEnvironment
from etude.inference.client import GrpcInference
from etude.model.checkpoint import from_pretrained, load_model, save_checkpoint
from etude.model.model import Transformer
from etude.model.pretrained import policy_tokenizer, resolve_init
from etude.reward.client import GrpcReward
from etude.rollout.client import Curriculum, InProcessEpisodes, Orchestrator, TaskCycle
from etude.rollout.config import task_cache_dir
from etude.rollout.types import (
    DROP_REASONS,
    Demonstrations,
    Evaluation,
    WaitedBatch,
    behaviour_summary,
)
from etude.tasks.draw import split_by_project
from etude.tasks.taskset import RunTasks, training_tiers
from etude.trainer import checkpoint, metrics, sft_cache
from etude.trainer.progress import RunProgress
from etude.trainer.publish import WeightPublisher
from etude.trainer.report import Reporter, write_run_snapshot
from etude.trainer.rl_loop import RLLoop, StepDone
from etude.trainer.sft import sft_train
from etude.trainer.trackers import open_trackers
from etude.trainer.trainer import PolicyTrainer, StepStats
from etude.trainer.types import Endpoints

log = logging.getLogger(__name__)


class SftCancelledError(RuntimeError):
    """Ends the SFT thread of a cancelled warm start."""


BatchHook = Callable[[int, list[list[Trajectory]], StepStats], None]


def _drops(demos: Demonstrations) -> str:
    """Why demonstrations were dropped, summed over tiers: `unscriptable 4, failed 2`."""
    totals: dict[str, int] = {}
    for counts in demos.counts.values():
        for name in DROP_REASONS:
            totals[name] = totals.get(name, 0) + getattr(counts, name)
    return ", ".join(f"{name} {n}" for name, n in totals.items() if n) or "nothing written"


class TrainingRun:
    def __init__(
        self, run_id: str, config: RunConfig, endpoints: Endpoints, settings: EtudeSettings
    ) -> None:
        self.run_id = run_id
        self.config = config
        self.endpoints = endpoints
        self.settings = settings
        self.output_dir = config.output_dir / run_id
        self.checkpoint_dir = self.output_dir / "checkpoints"
        self.resources = contextlib.AsyncExitStack()
        self.resumed = False
        self.published_in_full = False
        self.pending_acks: list[WaitedBatch] = []
        self.totals = {"rollouts": 0, "late": 0, "wait_seconds": 0.0, "rl_seconds": 0.0}

    # -- set-up ------------------------------------------------------------------------

    async def setup(self, resume: bool = False) -> None:
        config, settings = self.config, self.settings
        # First: a tracker the config asks for but cannot start (its package not installed)
        # fails the run before anything slow.
        trackers = open_trackers(config, self.output_dir, self.run_id)
        self.reporter = Reporter(self.output_dir, trackers=trackers)
        self.resources.callback(self.reporter.abandon)  # a no-op once the run has finished
        self.policy_source = resolve_init(config.policy.init, settings.stack.models_dir)
        self.tokenizer = policy_tokenizer(config.policy.init, settings.stack.models_dir)
        enter = self.resources.push_async_callback
        self.redis = queue_client(self.endpoints.redis_url)
        enter(self.redis.aclose)
        self.registry = RunRegistry(self.redis)
        self.progress = RunProgress(self.registry, self.run_id)
        enter(self.progress.close)  # before the Redis client closes (the stack unwinds LIFO)
        # The run's tasks as registered with it (by the gateway, or now from the config's
        # task set): what the workers and the reward service look tasks up in.
        taskset = await RunTasks(self.redis).ensure(self.run_id, config.tasks)
        self.train_tasks, self.eval_tasks = taskset.train, taskset.held_out
        self.provisioning = taskset.provisioning
        self.demonstrated_tasks, self.rl_tasks = self.train_tasks, self.train_tasks
        if config.sft.split_projects:
            self.demonstrated_tasks, self.rl_tasks = split_by_project(
                self.train_tasks, config.tasks.seed
            )
            if not self.rl_tasks:
                raise ValueError("sft.split_projects needs training tasks from two projects")
        self.model = self._in_trainer_precision(
            from_pretrained(self.policy_source, seed=config.policy.seed)
        )
        self.model.checkpoint_layers = config.policy.activation_checkpointing
        self.trainer = PolicyTrainer(self.model, config.trainer)  # warm_start adds the reference
        self.state = checkpoint.TrainerState(step=0, policy_version=0)
        latest = checkpoint.latest_checkpoint(self.checkpoint_dir) if resume else None
        if latest is not None:
            self.state = checkpoint.load(latest, self.model, self.trainer.optimizer)
            self.resumed = True
            log.info("resumed from %s (step %d)", latest, self.state.step)

        environment = GrpcEnvironment(self.endpoints.environment, settings.client)
        reward = GrpcReward(self.endpoints.reward, settings.client, run_id=self.run_id)
        self.inference = [GrpcInference(a, settings.client) for a in self.endpoints.inference]
        self.publisher = WeightPublisher(self.inference, self.run_id)
        for client in (environment, reward):
            enter(client.close)
        enter(self.publisher.close)
        timeout = settings.runs.driver_timeout_seconds
        await self.publisher.check_free(lambda run: self.registry.is_alive(run, timeout))
        # Evaluation and SFT demonstrations run here, through the agent loop, on tasks built
        # from where the run's registration says (as the workers build them).
        self.episodes = InProcessEpisodes(
            environment, reward, self.tokenizer, config.rollout, task_cache_dir(settings),
            provisioning=self.provisioning,
        )  # fmt: skip
        self.orchestrator = Orchestrator.for_run(
            self.redis, self.run_id, TaskCycle(self.rl_tasks, config.tasks.seed),
            config.rollout, settings.queue, hint_tier=config.tasks.hint_tier,
        )  # fmt: skip
        await self.orchestrator.start()
        self.curriculum = Curriculum(config.tasks.curriculum, config.tasks.hint_tier)
        if self.resumed:
            self.orchestrator.restore(self.state.extra["orchestrator"])
            if "curriculum" in self.state.extra:
                self.curriculum.restore(self.state.extra["curriculum"])
        write_run_snapshot(self.output_dir, config)
        self.trajectory_log = TrajectoryLog(
            self.output_dir, self.tokenizer, config.trajectories.keep, config.rollout.seed
        )
        # The trainer's Prometheus endpoint (ETUDE_GRPC__METRICS_PORT; 0 picks a free port).
        endpoint = start_metrics_endpoint(
            settings.grpc.host,
            settings.grpc.metrics_port,
            authorize=metrics_authorizer(settings.auth),
        )
        self.resources.callback(endpoint.close)
        self.metrics_url = f"http://{settings.grpc.host}:{endpoint.port}/metrics"
        log.info("trainer metrics at %s", self.metrics_url)

    async def close(self) -> None:
        await self.resources.aclose()

    # -- phases --------------------------------------------------------------------------

    async def publish(self) -> float:
        """Send the trainer's weights as a version newer than any endpoint serves: all of them
        the first time, then (with `trainer.sync: changed`) only the tensors RL trains."""
        version = max(self.state.policy_version, await self.publisher.current_version()) + 1
        partial = self.config.trainer.sync == "changed" and self.published_in_full
        only = set(self.trainer.trainable) if partial else None
        self.progress.say(f"publishing the policy's weights as v{version}", last=True)
        seconds = await self.publisher.publish(
            version, self.model, only, drain=self.orchestrator.drains_updates
        )
        self.progress.say(f"weights v{version} published in {seconds:.1f} s", last=True)
        self.published_in_full = True
        self.state.policy_version = version
        return seconds

    async def warm_start(self) -> dict:
        """SFT on scripted demonstrations (skipped on resume or when disabled), or the cached
        policy of an earlier run with the same SFT key (`sft.cache_dir`); then the KL
        reference is the policy RL starts from."""
        summary = await self._warm_start()
        await asyncio.to_thread(self._keep_reference)
        return summary

    def _keep_reference(self) -> None:
        """The KL term (`trainer.loss.kl_coef`) holds the policy near the one RL starts
        from: the SFT policy, not the initial weights (they would pull the policy back to
        before SFT). It is saved beside the checkpoints, since a
        resumed run no longer has it in memory."""
        if not self.config.trainer.loss.kl_coef:
            return
        saved = self.output_dir / "reference"
        if not (self.resumed and saved.exists()):
            if self.resumed:
                log.warning("no saved KL reference in %s: the resumed policy becomes it", saved)
            save_checkpoint(self.model, saved, self.tokenizer)
        # Read back rather than deep-copied: a trained model holds autograd state.
        reference = self._in_trainer_precision(load_model(saved))
        self.trainer.reference = reference.eval().requires_grad_(False)

    def _in_trainer_precision(self, model: Transformer) -> Transformer:
        if self.config.trainer.precision == "mxfp8":
            from etude.kernels.mx_training import set_precision

            set_precision(model, "mxfp8")
        return model

    async def _warm_start(self) -> dict:
        sft = self.config.sft
        if self.resumed or not sft.enabled or sft.steps == 0:
            return {}
        if sft.cache_dir is not None:
            key = sft_cache.cache_key(self.config, self.demonstrated_tasks)
            cached = sft_cache.cached_policy(sft.cache_dir, key)
            if cached is not None:
                self.progress.say(f"SFT policy from the cache: {cached}", last=True)
                state = load_model(cached).state_dict()
                self.model.load_state_dict(state)
                summary = sft_cache.cached_summary(cached)
                return {**summary, "sft_cached": str(cached), "sft_from_cache": True}
        summary = await self._sft()
        if sft.cache_dir is not None and "sft_skipped" not in summary:
            path = await asyncio.to_thread(
                sft_cache.store_policy, sft.cache_dir, key,
                lambda d: save_checkpoint(self.model, d, self.tokenizer), summary,
            )  # fmt: skip
            summary["sft_cached"] = str(path)
        return summary

    async def _sft(self) -> dict:
        sft = self.config.sft
        tasks = self.demonstrated_tasks[: sft.demonstrations or len(self.demonstrated_tasks)]
        tiers = sft.hint_tiers or training_tiers(self.config.tasks)
        say = self.progress.say
        say(f"writing {len(tasks)} × {len(tiers)} tiers × {sft.variants} demonstrations", last=True)
        demos = await self.episodes.demonstrations(
            tasks, tiers=tiers, variants=sft.variants, run_id=f"{self.run_id}-sft"
        )
        if not demos:
            # Not an error: a task set of the user's own repositories may have no task the
            # scripted solvers can demonstrate (no gold patch, a repository they cannot
            # script; the logged lines above say which); RL starts from the initial policy.
            reason = f"none of {len(tasks)} tasks could be demonstrated ({_drops(demos)})"
            log.warning("SFT skipped: %s", reason)
            say(f"SFT skipped: {reason}", last=True)
            return {**demos.summary(), "sft_skipped": reason}
        say(f"SFT on {len(demos)} demonstrations", last=True)
        tell = self.progress.counter("SFT step", sft.steps)
        # A thread cannot be cancelled: a cancelled warm start (a failed run, Ctrl-C) tells
        # it to end after its step, or the process would wait for every step left.
        cancelled = threading.Event()

        def log_step(step) -> None:  # on the SFT thread
            self.reporter.log(step.step, {"loss": step.loss, "tokens": step.tokens}, "sft")
            tell(step.step, f"loss {step.loss:.3f}")
            if cancelled.is_set():
                raise SftCancelledError(f"SFT cancelled after step {step.step}")

        def log_held_out(loss) -> None:
            self.reporter.log(loss.step, {"held_out_nll": loss.nll}, "sft_held_out")

        training = asyncio.ensure_future(asyncio.to_thread(
            sft_train, self.model, demos, sft, seed=self.config.policy.seed, on_step=log_step,
            on_held_out=log_held_out,
        ))  # fmt: skip
        try:
            history = await asyncio.shield(training)
        except asyncio.CancelledError:
            cancelled.set()
            with contextlib.suppress(SftCancelledError):
                await training  # ended at its next step
            raise
        return {**demos.summary(), **history.summary()}

    async def evaluate(self, label: str) -> list[Evaluation]:
        """Held-out pass@1 at each of `tasks.eval_tiers` (default: the run's tier)."""
        tasks = self.config.tasks
        results = []
        for tier in tasks.eval_tiers or (tasks.hint_tier,):
            if not self.eval_tasks:
                break
            tell = self.progress.counter(
                f"held-out pass@1 {label} RL (tier {tier}): episode",
                len(self.eval_tasks) * tasks.eval_samples,
            )
            result = await self.episodes.evaluate(
                self.eval_tasks, self.inference[0], label=f"{self.run_id}-{label}-t{tier}",
                tier=tier, samples=tasks.eval_samples, temperature=tasks.eval_temperature,
                on_episode=lambda done, _all, passed, tell=tell: tell(done, f"{passed} passed"),
            )  # fmt: skip
            values = {"pass_at_1": result.pass_at_1, "mean_reward": result.mean_reward,
                      "ci_low": result.ci_low, "ci_high": result.ci_high,
                      "episodes": result.episodes, **result.behaviour}  # fmt: skip
            self.reporter.log(0, values, f"eval_{label}/tier{tier}")
            results.append(result)
        return results

    async def rl(
        self,
        stop_requested: Callable[[], Awaitable[bool]],
        on_step: Callable[[dict[str, float]], None] = lambda _: None,
        on_batch: BatchHook | None = None,
    ) -> int:
        """RL steps until `trainer.steps` (or a stop request); returns the last step."""
        config, state = self.config.trainer, self.state

        writing: list[asyncio.Task] = []  # the steps' trajectory files, off the event loop

        def trained(step: int, groups: list[list[Trajectory]], stats: StepStats) -> None:
            if on_batch is not None:
                on_batch(step, groups, stats)
            writing.append(asyncio.create_task(self._keep_trajectories(step, groups)))
            state.step = step
            self.orchestrator.hint_tier = self.curriculum.update(stats.pass_rate)

        async def publish() -> tuple[int, float]:
            seconds = await self.publish()
            return state.policy_version, seconds

        async def record(done: StepDone) -> None:
            self.pending_acks.append(done.waited)
            if done.step % config.checkpoint_every == 0 or done.step == config.steps:
                await self.checkpoint()
            values = self._step_values(done.stats, done.waited, done.sync_seconds, done.elapsed)
            self.reporter.log(done.step, values)
            await self.registry.update(
                self.run_id, step=done.step, policy_version=done.version, metrics=values
            )
            on_step(values)

        started = time.perf_counter()
        loop = RLLoop(self.orchestrator, self.trainer.step, publish)
        step = await loop.run(
            step=state.step, version=state.policy_version, steps=config.steps,
            stop_requested=stop_requested, on_trained=trained, on_step=record,
        )  # fmt: skip
        await asyncio.gather(*writing)
        self.totals["rl_seconds"] += time.perf_counter() - started
        return step

    async def _keep_trajectories(self, step: int, groups: list[list[Trajectory]]) -> None:
        """A step's readable record; a failed write (a full disk) is logged, the run goes on."""
        try:
            await asyncio.to_thread(self.trajectory_log.write, step, groups)
        except Exception:
            log.exception("the trajectories of step %d were not written", step)

    async def checkpoint(self) -> Path:
        self.state.extra = {"orchestrator": self.orchestrator.snapshot(), "totals": self.totals,
                            "curriculum": self.curriculum.snapshot()}  # fmt: skip
        path = await asyncio.to_thread(
            checkpoint.save, self.checkpoint_dir, self.model, self.trainer.optimizer, self.state,
            tokenizer=self.tokenizer, keep=self.config.trainer.keep_checkpoints,
        )  # fmt: skip
        for waited in self.pending_acks:  # durable now: their trajectories are done
            await self.orchestrator.acknowledge(waited)
        self.pending_acks.clear()
        return path

    def _step_values(
        self, stats: StepStats, waited: WaitedBatch, sync_seconds: float, elapsed: float
    ) -> dict[str, float]:
        totals = self.totals
        totals["rollouts"] += stats.sequences
        totals["wait_seconds"] += waited.waited_seconds
        totals["late"] = self.orchestrator.collector.late
        staleness = waited.batch.staleness
        for histogram, values in ((metrics.STALENESS, staleness),
                                  (metrics.STALENESS_IN_FLIGHT, waited.batch.in_flight),
                                  (metrics.STALENESS_IN_QUEUE, waited.batch.in_queue)):  # fmt: skip
            for versions_behind in values:
                histogram.observe(versions_behind)
        metrics.STALE_TOKENS.inc(waited.batch.stale_tokens)
        metrics.TRAINER_IDLE.set(totals["wait_seconds"] / max(elapsed, 1e-9))
        trajectories = [t for g in waited.batch.groups for t in g.trajectories]
        return {
            **stats.as_dict(),
            **behaviour_summary(trajectories),
            "step": self.state.step,
            "hint_tier": float(self.orchestrator.hint_tier),
            "policy_version": self.state.policy_version,
            "tokens_per_second": stats.tokens / max(stats.seconds, 1e-9),
            "step_seconds": stats.seconds,
            "weight_sync_seconds": sync_seconds,
            "wait_seconds": waited.waited_seconds,
            "staleness_mean": sum(staleness) / max(1, len(staleness)),
            "staleness_max": float(max(staleness, default=0)),
            "stale_tokens": float(waited.batch.stale_tokens),
            "late_rollouts": float(totals["late"]),
            "rollouts_total": float(totals["rollouts"]),
            "rollouts_per_min": totals["rollouts"] / max(elapsed, 1e-9) * 60,
            "trainer_idle_fraction": totals["wait_seconds"] / max(elapsed, 1e-9),
        }
