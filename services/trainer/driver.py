"""The run driver: one training run's phases, wherever its parts run — the trainer's public
surface for running a run (`etude train` and `etude sft` call it).

    record the run → place the Ray actors (--ray) → SFT warm start → held-out pass@1
    → start the rollout workers → RL steps → held-out pass@1 again → summary

Given the services' addresses: a local stack's, whose supervisor also runs the rollout
workers as processes (or they are Ray actors), or a cluster's, whose deployed workers serve
the run. The trainer is a `TrainerHost` here or a Ray actor (`etude.trainer.placement` says
where each actor goes); its progress is read back from the run registry. What the run shows
goes through a `RunView`, which the command line draws.

The driver is what keeps a run alive in the registry: it writes a heartbeat while it lives
(the gateway's reaper ends a run whose heartbeat stops), and it records how the run ended —
`finished`, `stopped` (a stop request: no evaluation after it), or `failed` with the reason.
A run failed elsewhere (a rollout worker that could not find or build a task) keeps the
reason recorded there, and `RunFailedError` leaves `main`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import sys
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Protocol

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from etude.common.run_config import RunConfig, RunConfigError, parse_run_config
from etude.common.runs import RunFailedError, RunNotFoundError, RunRecord, RunRegistry
from etude.common.settings import EtudeSettings
from etude.common.signals import StopRequested
from etude.model.pretrained import resolve_init
from etude.trainer.heartbeat import Heartbeat
from etude.trainer.host import TrainerHost
from etude.trainer.placement import inference_engines, init_ray, rollout_actors, trainer_actor
from etude.trainer.types import Endpoints, Placement

log = logging.getLogger(__name__)


class RunView(Protocol):
    """What a run shows as it goes."""

    def phase(self, text: str) -> AbstractContextManager[Callable[[RunRecord], None]]:
        """A phase under way (the warm start, a held-out evaluation); the callable it yields
        gets the run's record (its `progress` line) about once a second."""
        ...

    def engines(self, addresses: Sequence[str]) -> None: ...

    def policy_saved(self, path: str) -> None: ...

    def rl(self, steps: int) -> AbstractContextManager[Callable[[RunRecord], None]]:
        """The RL steps; the callable it yields gets the run's record about once a second."""
        ...

    def summary(self, run_id: str, summary: dict[str, Any], output_dir: Path) -> None: ...


class WorkerProcesses(Protocol):
    """The local stack (`etude.cli.stack.LocalStack`), which runs a run's rollout workers as
    processes beside its services: their logs with the others', its shutdown stops them."""

    def add_process(
        self, name: str, argv: tuple[str, ...], env: tuple[tuple[str, str], ...]
    ) -> object: ...

    def stop_service(self, name: str) -> object: ...

    def exited(self) -> list[tuple[str, int]]: ...

    def failures(self) -> list[str]:
        """Its services that can no longer serve, each with why (blocking: health checks)."""
        ...


def recorded_config(run_id: str, redis_url: str) -> RunConfig | None:
    """The config a run was recorded with (`etude runs start`, `POST /runs`), when the run
    registry can be reached and has the run."""

    async def read() -> RunConfig | None:
        client = aioredis.Redis.from_url(redis_url, socket_timeout=5)
        try:
            return parse_run_config((await RunRegistry(client).get(run_id)).config)
        except (RunNotFoundError, RedisError, RunConfigError):
            return None
        finally:
            await client.aclose()

    return asyncio.run(read())


def cluster_endpoints(settings: EtudeSettings, engines: int, *, ray: bool) -> Endpoints:
    """A cluster's deployed services (ETUDE_SERVICES__*); inference may instead be `engines`
    Ray actors the driver starts. ValueError says what is missing."""
    services = settings.services
    missing = [n for n in ("environment", "reward") if not getattr(services, n)]
    if not engines and not services.inference:
        missing.append("inference")
    if missing:
        raise ValueError(f"set ETUDE_SERVICES__{missing[0].upper()}")
    if engines and not ray:
        raise ValueError("--inference-engines needs --ray")
    inference = (services.inference,) if services.inference else ()
    return Endpoints(settings.redis.url, inference, services.environment, services.reward)


def serving_env(run: RunConfig, models_dir: Path) -> dict[str, str]:
    """The settings under which a local inference service serves the run's policy: its
    architecture (a pretrained model imported first if need be), backend and seed, so the
    trainer's weights fit it; and its sizes from the run, unless set already: the context,
    the sequences in flight (every rollout worker's episodes) and a KV cache that holds each
    at its longest. ValueError or FileNotFoundError: `policy.init` is wrong."""
    source = resolve_init(run.policy.init, models_dir)
    model = str(Path(source).resolve()) if Path(source).is_dir() else source
    sizes = serving_sizes(run)
    return {
        **{f"ETUDE_INFERENCE__{name.upper()}": str(value) for name, value in sizes.items()
           if f"ETUDE_INFERENCE__{name.upper()}" not in os.environ},
        "ETUDE_INFERENCE__MODEL": model,
        "ETUDE_INFERENCE__BACKEND": run.policy.serve_with,
        "ETUDE_INFERENCE__SEED": str(run.policy.seed),
    }  # fmt: skip


def serving_sizes(run: RunConfig) -> dict[str, int]:
    """`max_model_len`, `max_num_seqs` and `kv_cache_tokens` of the inference service that
    serves `run` alone: its rollout workers' episodes at once (the held-out evaluation runs
    fewer), each at most `rollout.max_episode_tokens` long."""
    sequences = run.rollout.workers * run.rollout.concurrency
    longest = min(run.rollout.max_episode_tokens, run.policy.max_model_len)
    return {
        "max_model_len": run.policy.max_model_len,
        "max_num_seqs": sequences,
        "kv_cache_tokens": max(sequences * longest, run.policy.max_model_len),
    }


class Driver:
    """One run. `stack` set: a local run, whose rollout workers are the stack's processes
    (Ray actors with `ray`); unset: a cluster's, whose deployed workers serve the run."""

    def __init__(
        self, run: RunConfig, run_id: str | None, settings: EtudeSettings, endpoints: Endpoints,
        view: RunView, *, ray: bool = False, placement: Placement | None = None,
        stack: WorkerProcesses | None = None,
    ) -> None:  # fmt: skip
        self.run, self.run_id, self.settings, self.view = run, run_id, settings, view
        self.endpoints, self.ray, self.placement, self.stack = endpoints, ray, placement, stack
        self.workers: list[Any] = []  # process names, or (actor, its running `run()`)
        self.engines: list[Any] = []

    async def main(self, *, resume: bool, sft_only: bool = False, out: Path | None = None) -> int:
        client = aioredis.Redis.from_url(self.endpoints.redis_url)
        registry = RunRegistry(client)
        try:
            return await self._main(registry, resume=resume, sft_only=sft_only, out=out)
        finally:
            await client.aclose()

    async def _main(
        self, registry: RunRegistry, *, resume: bool, sft_only: bool, out: Path | None
    ) -> int:
        self.run_id = (await self._record(registry)).run_id
        if resume:
            await registry.reopen(self.run_id)
        output_dir = self.run.output_dir / self.run_id
        await registry.heartbeat(self.run_id)
        try:
            await registry.update(self.run_id, status="running", output_dir=str(output_dir))
        except ValueError as error:  # stopped while queued, before this driver took it
            log.warning("not starting: %s", error)
            return 0
        # While this process lives the run is alive; the gateway's reaper ends a run whose
        # heartbeat stops (this process killed), so it never stays `running` for nobody.
        runs = self.settings.runs
        with Heartbeat(self.endpoints.redis_url, self.run_id, runs.heartbeat_seconds,
                       runs.driver_timeout_seconds, prefix=registry.prefix):  # fmt: skip
            return await self._phases(registry, output_dir, resume, sft_only, out)

    async def _phases(
        self, registry: RunRegistry, output_dir: Path, resume: bool, sft_only: bool,
        out: Path | None,
    ) -> int:  # fmt: skip
        if self.ray:
            init_ray(self.placement)
        await self._start_engines()
        trainer = self._trainer()

        def call(method: str, *args: Any):
            """A TrainerHost method, here or on its Ray actor: either way an awaitable."""
            bound = getattr(trainer, method)
            return bound.remote(*args) if self.ray else bound(*args)

        try:
            summary: dict[str, Any] = {"run_id": self.run_id}
            resumed = await call("setup", resume)
            with self.view.phase("Warm start (SFT on scripted demonstrations)…") as show:
                summary.update(await self._watched(call("warm_start"), registry, show))
            if sft_only:
                path = await call("save_policy", str(out or output_dir / "sft-policy"))
                self.view.policy_saved(path)
                summary.update(await call("finish", summary))
                await registry.update(self.run_id, status="finished")
                return 0
            # A stop asked for during the warm start ends the run before the evaluations.
            if not resumed and not await registry.should_stop(self.run_id):
                with self.view.phase("Held-out pass@1 before RL…") as show:
                    evaluation = call("evaluate", "before")
                    summary["eval_before"] = await self._watched(evaluation, registry, show)
            await self._start_workers()
            with self.view.rl(self.run.trainer.steps) as show:
                steps = await self._watched(call("rl"), registry, show, workers=True)
            await self._stop_workers()
            stopped = (await registry.get(self.run_id)).stop_requested
            if not stopped:  # a stopped run ends now, not after another evaluation
                with self.view.phase("Held-out pass@1 after RL…") as show:
                    evaluation = call("evaluate", "after")
                    summary["eval_after"] = await self._watched(evaluation, registry, show)
            summary["steps"] = steps
            summary.update(await call("finish", summary))
            await registry.update(self.run_id, status="stopped" if stopped else "finished")
            self.view.summary(self.run_id, summary, output_dir)
            return 0
        except StopRequested:
            await registry.update(self.run_id, status="stopped", error="interrupted")
            raise
        except RunFailedError:
            raise  # failed where it was found out, with that reason: leave it as it is
        except Exception as error:
            await registry.update(
                self.run_id, status="failed", error=f"{type(error).__name__}: {error}"
            )
            raise
        finally:
            await self._stop_workers()
            with contextlib.suppress(Exception):  # the failure that brought us here says why
                await call("close")
            for engine in self.engines:
                await engine.stop.remote()
            if self.ray:
                import ray

                ray.shutdown()

    async def _record(self, registry: RunRegistry) -> RunRecord:
        if self.run_id:
            try:
                return await registry.get(self.run_id)
            except RunNotFoundError:
                pass
        return await registry.create(self.run, run_id=self.run_id)

    async def _start_engines(self) -> None:
        if self.placement is None or not self.placement.inference_engines:
            return
        self.engines = inference_engines(self.placement)
        addresses = await asyncio.gather(*(e.start.remote() for e in self.engines))
        self.view.engines(addresses)
        self.endpoints = dataclasses.replace(self.endpoints, inference=tuple(addresses))

    def _trainer(self) -> Any:
        args = (self.run_id, self.run, self.endpoints, self.settings)
        if not self.ray:
            return TrainerHost(*args)
        return trainer_actor(*args, self.placement)

    async def _start_workers(self) -> None:
        if self.stack is None:  # a cluster: the deployed rollout workers serve the run
            return
        count = self.run.rollout.workers
        if self.ray:
            for actor in rollout_actors(
                self.run_id, self.run, self.endpoints, self.settings, count
            ):
                self.workers.append((actor, actor.run.remote()))
            return
        for i in range(count):
            env = (
                ("ETUDE_ROLLOUT__RUN_ID", self.run_id),
                ("ETUDE_ROLLOUT__CONSUMER", f"worker-{i}"),
            )
            name = f"rollout-{self.run_id}-{i}"  # several runs may share one stack
            argv = (sys.executable, "-m", "etude.rollout")
            await asyncio.to_thread(self.stack.add_process, name, argv, env)
            self.workers.append(name)

    async def _stop_workers(self) -> None:
        workers, self.workers = self.workers, []
        for worker in workers:
            if isinstance(worker, str):
                await asyncio.to_thread(self.stack.stop_service, worker)
            else:
                actor, running = worker
                await actor.stop.remote()
                await running

    async def _watched(
        self, work: Any, registry: RunRegistry, show: Callable[[RunRecord], None],
        *, workers: bool = False,
    ) -> Any:  # fmt: skip
        """`work`'s result, the run's record shown about once a second meanwhile (the
        trainer's progress line starts empty for each phase); with `workers`, a run whose
        rollout workers all died is failed. A run whose local stack can no longer serve
        fails within seconds with the reason, rather than waiting on a call that cannot
        end (a weight update to an engine the kernel killed)."""
        await registry.update(self.run_id, progress="")
        running = asyncio.ensure_future(work)
        try:
            while not running.done():
                await asyncio.wait([running], timeout=1.0)
                # The stack first: the registry itself is in its Redis, which may be what died.
                if self.stack is not None and not running.done():
                    failed = await asyncio.to_thread(self.stack.failures)
                    if failed:
                        error = "the local stack can no longer serve: " + "; ".join(failed)
                        with contextlib.suppress(RedisError):  # recorded where it still can be
                            await registry.update(self.run_id, status="failed", error=error)
                        raise RunFailedError(self.run_id, error)
                record = await registry.get(self.run_id)
                show(record)
                if workers:
                    await self._fail_if_workers_died(registry, record)
            return running.result()
        finally:
            # Cancelled work is awaited: a warm start ends its SFT thread after the step
            # under way, before the trainer closes (a Ray call's future just cancels).
            running.cancel()
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await running

    async def _fail_if_workers_died(self, registry: RunRegistry, record: RunRecord) -> None:
        """A local run whose rollout worker processes have all exited gets no more
        rollouts: it fails with their exit codes, and the RL loop, which asks the registry
        about once a second, ends. A stop asked for first is left to end it as `stopped`.
        (Ray actors are not watched here: Ray restarts or fails them.)"""
        names = [w for w in self.workers if isinstance(w, str)]
        if not names or self.stack is None:
            return
        exited = dict(self.stack.exited())
        if any(name not in exited for name in names):
            return
        if record.stop_requested:
            return
        codes = ", ".join(f"{name} (exit code {exited[name]})" for name in names)
        where = "their logs are logs/<worker>.log in the stack's run dir"
        error = f"every rollout worker exited: {codes}; {where}"
        await registry.update(self.run_id, status="failed", error=error)
