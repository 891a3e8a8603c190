"""`etude train CONFIG` and `etude sft CONFIG`: a whole run on one machine.

Starts the local stack as `etude up` does (Redis, inference, search, environment, reward,
gateway), records the run in the run registry, then: SFT warm start → publish the policy →
held-out pass@1 → rollout workers → RL steps (progress: step, reward, pass rate, tokens/s,
staleness) → held-out pass@1 again → summary, metrics.jsonl, TensorBoard log and
reward_curve.png under `<output_dir>/<run id>/`. With `--ray` the trainer and the rollout
workers are Ray actors (`ray.init` on this machine); otherwise the trainer runs here and
each worker is a `python -m etude.rollout` process.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import sys
from pathlib import Path
from typing import Annotated, Any

import redis.asyncio as aioredis
import typer
from redis.exceptions import RedisError
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from etude.cli.signals import StopRequested, stop_on_signals
from etude.cli.stack import LOCAL_SERVICES, LocalStack, ServiceSpec, StackError, settings_for
from etude.cli.status import read_status
from etude.common.logging import configure_logging
from etude.common.run_config import RunConfig, RunConfigError, load_run_config, parse_run_config
from etude.common.runs import RunNotFoundError, RunRegistry
from etude.common.settings import EtudeSettings
from etude.inference.host import InferenceHost
from etude.rollout.config import RolloutServiceConfig, RolloutSettings
from etude.trainer.hosts import RolloutHost, TrainerHost
from etude.trainer.run import Endpoints

console = Console(stderr=True)

ConfigArgument = Annotated[Path | None, typer.Argument(help="Run config (YAML); unset: defaults.")]
SetOption = Annotated[
    list[str] | None, typer.Option("--set", help="Override a key: section.key=value (repeatable).")
]
RunDirOption = Annotated[
    Path | None, typer.Option("--run-dir", help="Where the stack keeps Redis data and logs.")
]


def _load(config: Path | None, overrides: list[str] | None) -> RunConfig:
    try:
        return load_run_config(config, overrides or [])
    except RunConfigError as error:
        console.print(f"[red]{error}[/]")
        raise typer.Exit(2) from None


def train(
    config: ConfigArgument = None,
    overrides: SetOption = None,
    run_id: Annotated[
        str | None, typer.Option("--run-id", help="Use (or resume) this run id.")
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="Continue from the newest checkpoint.")
    ] = False,
    ray: Annotated[bool, typer.Option("--ray", help="Trainer and workers as Ray actors.")] = False,
    cluster: Annotated[
        bool,
        typer.Option(
            "--cluster",
            help="Use the deployed services (ETUDE_SERVICES__*, ETUDE_REDIS__URL) and their "
            "rollout workers instead of a local stack; with --ray, join the Ray cluster.",
        ),
    ] = False,
    inference_engines: Annotated[
        int,
        typer.Option(
            help="--cluster --ray: inference engines as Ray actors (0: use "
            "ETUDE_SERVICES__INFERENCE)."
        ),
    ] = 0,
    engine_port: Annotated[int, typer.Option(help="gRPC port of each engine actor.")] = 50051,
    engine_gpus: Annotated[float, typer.Option(help="GPUs per engine actor.")] = 0,
    trainer_gpus: Annotated[float, typer.Option(help="GPUs of the trainer actor.")] = 0,
    run_dir: RunDirOption = None,
) -> None:
    """Train a policy: SFT warm start, then RL, on the local stack (or a cluster's).
    Without CONFIG, a `--run-id` the gateway recorded trains with the recorded config."""
    run = _load(config, overrides)
    settings = settings_for(run_dir)
    if config is None and not overrides and run_id:
        run = _recorded_config(run_id, settings) or run
    if cluster:
        placement = Placement(inference_engines, engine_port, engine_gpus, trainer_gpus)
        _run_on_cluster(run, run_id, settings, resume=resume, ray=ray, placement=placement)
    _run_with_stack(run, run_id, settings, resume=resume, ray=ray, sft_only=False)


def sft(
    config: ConfigArgument = None,
    overrides: SetOption = None,
    out: Annotated[Path | None, typer.Option("--out", help="Where the SFT policy goes.")] = None,
    run_dir: RunDirOption = None,
) -> None:
    """Warm-start a policy on scripted demonstrations and save it as a checkpoint."""
    run = _load(config, overrides)
    _run_with_stack(
        run, None, settings_for(run_dir), resume=False, ray=False, sft_only=True, out=out
    )


def _run_with_stack(
    run: RunConfig, run_id: str | None, settings: EtudeSettings, *, resume: bool, ray: bool,
    sft_only: bool, out: Path | None = None,
) -> None:  # fmt: skip
    configure_logging(settings.log)
    _serve_the_policy(run, settings)
    existing = read_status(settings.stack.run_dir.resolve())
    stack = LocalStack(settings, tuple(ServiceSpec.module(n) for n in LOCAL_SERVICES))
    code = 0
    try:
        with stop_on_signals():
            code = _attach_or_start_and_run(
                stack, existing, run, run_id, settings, resume=resume, ray=ray,
                sft_only=sft_only, out=out,
            )  # fmt: skip
    except StopRequested as stop:
        console.print(f"{stop.args[0]}: stopping…")
        code = 130
    except StackError as error:
        console.print(f"[red]{error}[/]")
        code = 1
    finally:
        stack.stop()
    raise typer.Exit(code)


def _serve_the_policy(run: RunConfig, settings: EtudeSettings) -> None:
    """The local inference service starts on the run's policy architecture (a pretrained
    model imported first if need be) and backend, so the trainer's weights fit it. Exported:
    the stack's processes inherit this process's environment."""
    from etude.model.pretrained import resolve_init

    try:
        source = resolve_init(run.policy.init, settings.stack.models_dir)
    except (ValueError, FileNotFoundError) as error:
        console.print(f"[red]policy.init: {error}[/]")
        raise typer.Exit(2) from None
    model = str(Path(source).resolve()) if Path(source).is_dir() else source
    os.environ.update(
        ETUDE_INFERENCE__MODEL=model,
        ETUDE_INFERENCE__BACKEND=run.policy.serve_with,
        ETUDE_INFERENCE__SEED=str(run.policy.seed),
    )


def _recorded_config(run_id: str, settings: EtudeSettings) -> RunConfig | None:
    """The config a run was recorded with (`etude runs start`, `POST /runs`), when the run
    registry can be reached and has the run."""

    async def read() -> RunConfig | None:
        client = aioredis.Redis.from_url(settings.redis.url, socket_timeout=5)
        try:
            return parse_run_config((await RunRegistry(client).get(run_id)).config)
        except (RunNotFoundError, RedisError, RunConfigError):
            return None
        finally:
            await client.aclose()

    return asyncio.run(read())


@dataclasses.dataclass(frozen=True, slots=True)
class Placement:
    """Where a cluster run's Ray actors go: the chart's worker groups advertise the custom
    resources `trainer` and `inference_engine` (one per worker)."""

    inference_engines: int = 0
    engine_port: int = 50051
    engine_gpus: float = 0
    trainer_gpus: float = 0


def _run_on_cluster(
    run: RunConfig, run_id: str | None, settings: EtudeSettings, *, resume: bool, ray: bool,
    placement: Placement,
) -> None:  # fmt: skip
    configure_logging(settings.log)
    services = settings.services
    missing = [n for n in ("environment", "reward") if not getattr(services, n)]
    if placement.inference_engines == 0 and not services.inference:
        missing.append("inference")
    if missing or (placement.inference_engines and not ray):
        problem = (f"set ETUDE_SERVICES__{missing[0].upper()}" if missing
                   else "--inference-engines needs --ray")  # fmt: skip
        console.print(f"[red]--cluster: {problem}.[/]")
        raise typer.Exit(2)
    endpoints = Endpoints(
        settings.redis.url, (services.inference,) if services.inference else (),
        services.environment, services.reward,
    )  # fmt: skip
    driver = _Driver(run, run_id, settings, endpoints, ray=ray, placement=placement)
    try:
        with stop_on_signals():
            code = asyncio.run(driver.main(resume=resume, sft_only=False, out=None))
    except StopRequested as stop:
        console.print(f"{stop.args[0]}: stopping…")
        code = 130
    raise typer.Exit(code)


def _attach_or_start_and_run(
    stack: LocalStack, existing, run: RunConfig, run_id: str | None, settings: EtudeSettings,
    *, resume: bool, ray: bool, sft_only: bool, out: Path | None,
) -> int:  # fmt: skip
    if existing is not None and existing.supervisor_alive:  # `etude up` runs: join it
        state = stack.attach()
        console.print(f"Using the stack running in {state.run_dir}.")
    else:
        with console.status("Starting the local stack…"):
            state = stack.start()
    status = read_status(stack.run_dir)
    assert status is not None
    address = {c.name: c.address for c in status.components}
    endpoints = Endpoints(
        state.redis_url, (address["inference"],), address["environment"], address["reward"]
    )
    driver = _Driver(run, run_id, settings, endpoints, ray=ray, stack=stack)
    return asyncio.run(driver.main(resume=resume, sft_only=sft_only, out=out))


class _Driver:
    """One run's phases. With a local stack it starts the rollout workers (processes or
    Ray actors); on a cluster (`stack` None) the deployed workers serve the run."""

    def __init__(
        self, run: RunConfig, run_id: str | None, settings: EtudeSettings, endpoints: Endpoints,
        *, ray: bool, stack: LocalStack | None = None, placement: Placement | None = None,
    ) -> None:  # fmt: skip
        self.run, self.run_id, self.settings, self.stack = run, run_id, settings, stack
        self.endpoints, self.ray, self.placement = endpoints, ray, placement
        self.redis_url = endpoints.redis_url
        self.workers: list[Any] = []
        self.engines: list[Any] = []

    async def main(self, *, resume: bool, sft_only: bool, out: Path | None) -> int:
        client = aioredis.Redis.from_url(self.redis_url)
        registry = RunRegistry(client)
        record = await self._record(registry)
        self.run_id = record.run_id
        if resume:
            await registry.reopen(self.run_id)
        output_dir = self.run.output_dir / self.run_id
        await registry.update(self.run_id, status="running", output_dir=str(output_dir))
        self._init_ray()
        await self._start_engines()
        trainer = self._trainer()

        def call(method: str, *args: Any):
            """A TrainerHost method, here or on its Ray actor: either way an awaitable."""
            bound = getattr(trainer, method)
            return bound.remote(*args) if self.ray else bound(*args)

        try:
            summary: dict[str, Any] = {"run_id": self.run_id}
            resumed = await call("setup", resume)
            with console.status("Warm start (SFT on scripted demonstrations)…"):
                summary.update(await call("warm_start"))
            if sft_only:
                path = await call("save_policy", str(out or output_dir / "sft-policy"))
                console.print(f"SFT policy saved to [bold]{path}[/]")
                summary.update(await call("finish", summary))
                await registry.update(self.run_id, status="finished")
                return 0
            if not resumed:
                with console.status("Held-out pass@1 before RL…"):
                    summary["eval_before"] = await call("evaluate", "before")
            await self._start_workers()
            steps = await self._with_progress(call("rl"), registry)
            await self._stop_workers()
            with console.status("Held-out pass@1 after RL…"):
                summary["eval_after"] = await call("evaluate", "after")
            summary["steps"] = steps
            stopped = (await registry.get(self.run_id)).stop_requested
            summary.update(await call("finish", summary))
            await registry.update(self.run_id, status="stopped" if stopped else "finished")
            self._print_summary(summary, output_dir)
            return 0
        except StopRequested:
            await registry.update(self.run_id, status="stopped", error="interrupted")
            raise
        except Exception as error:
            await registry.update(
                self.run_id, status="failed", error=f"{type(error).__name__}: {error}"
            )
            raise
        finally:
            await self._stop_workers()
            for engine in self.engines:
                await engine.stop.remote()
            await client.aclose()
            if self.ray:
                import ray

                ray.shutdown()

    async def _record(self, registry: RunRegistry):
        if self.run_id:
            try:
                return await registry.get(self.run_id)
            except RunNotFoundError:
                pass
        return await registry.create(self.run, run_id=self.run_id)

    def _init_ray(self) -> None:
        if not self.ray:
            return
        import ray

        if self.placement is not None:
            try:  # a KubeRay job's submitter or a pod of the cluster: join it
                ray.init(address="auto", log_to_driver=False)
                return
            except ConnectionError:
                pass  # no Ray cluster here: a local one stands in for it
        # This machine: declare the placement resources the chart's worker groups have.
        engines = self.placement.inference_engines if self.placement else 0
        resources = {"trainer": 1} | ({"inference_engine": engines} if engines else {})
        ray.init(num_cpus=2, resources=resources, include_dashboard=False,
                 log_to_driver=False, ignore_reinit_error=True)  # fmt: skip

    async def _start_engines(self) -> None:
        p = self.placement
        if p is None or not p.inference_engines:
            return
        import ray

        actor = ray.remote(InferenceHost).options(
            num_cpus=0, num_gpus=p.engine_gpus, resources={"inference_engine": 1}
        )
        self.engines = [actor.remote(p.engine_port) for _ in range(p.inference_engines)]
        addresses = await asyncio.gather(*(e.start.remote() for e in self.engines))
        console.print(f"Inference engines: {', '.join(addresses)}")
        self.endpoints = dataclasses.replace(self.endpoints, inference=tuple(addresses))

    def _trainer(self):
        if not self.ray:
            return TrainerHost(self.run_id, self.run, self.endpoints, self.settings)
        import ray

        options: dict[str, Any] = {"num_cpus": 0, "max_concurrency": 4}
        if self.placement is not None:
            options |= {"num_gpus": self.placement.trainer_gpus, "resources": {"trainer": 1}}
        actor = ray.remote(TrainerHost).options(**options)
        return actor.remote(self.run_id, self.run, self.endpoints, self.settings)

    async def _start_workers(self) -> None:
        if self.stack is None:  # a cluster: the deployed rollout workers serve the run
            return
        count = self.run.rollout.workers
        if self.ray:
            import ray

            settings = RolloutSettings(**{
                **self.settings.model_dump(),
                "redis": {"url": self.redis_url},
                "services": {"inference": self.endpoints.inference[0],
                             "environment": self.endpoints.environment,
                             "reward": self.endpoints.reward},
            })  # fmt: skip
            for i in range(count):
                section = RolloutServiceConfig(run_id=self.run_id, consumer=f"ray-{i}")
                worker_settings = settings.model_copy(update={"rollout": section})
                actor = ray.remote(RolloutHost).options(num_cpus=0, max_concurrency=4)
                handle = actor.remote(worker_settings, self.run)
                self.workers.append((handle, handle.run.remote()))
            return
        for i in range(count):
            env = (
                ("ETUDE_ROLLOUT__RUN_ID", self.run_id),
                ("ETUDE_ROLLOUT__CONSUMER", f"worker-{i}"),
            )
            name = f"rollout-{self.run_id}-{i}"  # several runs may share one stack
            spec = ServiceSpec(name, (sys.executable, "-m", "etude.rollout"), env=env)
            await asyncio.to_thread(self.stack.add_service, spec)
            self.workers.append(spec.name)

    async def _stop_workers(self) -> None:
        workers, self.workers = self.workers, []
        for worker in workers:
            if isinstance(worker, str):
                await asyncio.to_thread(self.stack.stop_service, worker)
            else:
                handle, running = worker
                await handle.stop.remote()
                await running

    async def _with_progress(self, rl, registry: RunRegistry) -> int:
        total = self.run.trainer.steps
        columns = (
            TextColumn("[bold]RL[/]"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
            TextColumn("{task.description}"), TimeElapsedColumn(),
        )  # fmt: skip
        with Progress(*columns, console=console) as progress:
            bar = progress.add_task("waiting for the first groups…", total=total)
            running = asyncio.ensure_future(rl)
            while not running.done():
                await asyncio.wait([running], timeout=1.0)
                record = await registry.get(self.run_id)
                m = record.metrics
                if m:
                    progress.update(bar, completed=record.step, description=(
                        f"reward {m['reward_mean']:.2f}  pass {m['pass_rate']:.2f}  "
                        f"{m['tokens_per_second']:.0f} tok/s  staleness {m['staleness_mean']:.1f}"
                        f"  v{record.policy_version}"))  # fmt: skip
            return running.result()

    def _print_summary(self, summary: dict[str, Any], output_dir: Path) -> None:
        table = Table(title=f"Run {self.run_id}")
        table.add_column("")
        table.add_column("value")
        before, after = summary.get("eval_before") or {}, summary.get("eval_after") or {}
        sft_loss = _pair(summary.get("sft_first_loss"), summary.get("sft_final_loss"))
        rows = [
            ("RL steps", summary.get("steps")),
            ("demonstrations (SFT)", summary.get("demonstrations")),
            ("SFT loss first → last", sft_loss),
            ("SFT held-out loss first → last",
             _pair(summary.get("sft_held_out_first_nll"), summary.get("sft_held_out_final_nll"))),
            ("training reward, first → last quarter of the steps",
             _pair(summary.get("train_reward_first"), summary.get("train_reward_last"))),
        ]  # fmt: skip
        for tier, first in (before.get("by_tier") or {}).items():
            last = (after.get("by_tier") or {}).get(tier, {})
            rows.append((f"held-out pass@1, tier {tier}, before → after", _counts(first, last)))
        for key in BEHAVIOUR_SHOWN:
            first, last = before.get("behaviour", {}), after.get("behaviour", {})
            rows.append((f"held-out {key.replace('_', ' ')}", _pair(first.get(key), last.get(key))))
        rows.append(("output", str(output_dir)))
        for name, value in rows:
            table.add_row(name, "—" if value is None else str(value))
        Console().print(table)


# Eval behaviour the summary shows before → after (all of it is in metrics.jsonl).
BEHAVIOUR_SHOWN = (
    "turns_per_episode", "tool_calls_per_turn", "parallel_share", "reads_before_first_edit",
    "blind_edit_rate", "malformed_rate", "finish_submitted",
)  # fmt: skip


def _counts(first: dict, last: dict) -> str | None:
    """`3/40 (0.03–0.20) → 9/40 (0.12–0.38)`: passes / episodes with the 95% interval."""
    if not first or not last:
        return None
    return " → ".join(
        f"{e['passed']}/{e['episodes']} ({e['ci_low']:.2f}–{e['ci_high']:.2f})"
        for e in (first, last)
    )


def _pair(first: float | None, last: float | None) -> str | None:
    if first is None or last is None:
        return None
    return f"{first:.3f} → {last:.3f}"
