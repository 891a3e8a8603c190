"""`etude train CONFIG` and `etude sft CONFIG`: the options, and where the run goes — the
local stack (started as `etude up` starts it, or the running one joined) or, with
`--cluster`, the deployed services. The run itself is the trainer's driver
(`etude.trainer.driver`); what it shows is `etude.cli.run_view`.
"""

from __future__ import annotations

import asyncio
import os
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from etude.cli.run_view import TerminalView, console
from etude.cli.stack import LOCAL_SERVICES, LocalStack, ServiceSpec, StackError, settings_for
from etude.cli.status import read_status
from etude.common.logging import configure_logging
from etude.common.run_config import RunConfig, RunConfigError, load_run_config
from etude.common.runs import RunFailedError
from etude.common.settings import EtudeSettings
from etude.common.signals import StopRequested, stop_on_signals

if TYPE_CHECKING:  # the trainer (torch, transformers) is imported when a command runs
    from etude.trainer.driver import Driver

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
        console.print(f"[red]{error}[/]", soft_wrap=True)
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
    from etude.trainer.driver import Driver, cluster_endpoints, recorded_config
    from etude.trainer.types import Placement

    run = _load(config, overrides)
    settings = settings_for(run_dir)
    if config is None and not overrides and run_id:
        run = recorded_config(run_id, settings.redis.url) or run
    configure_logging(settings.log)
    if not cluster:
        _on_local_stack(run, run_id, settings, ray=ray, resume=resume)
    # A cluster's: its deployed services, workers and (with --ray) Ray cluster.
    try:
        endpoints = cluster_endpoints(settings, inference_engines, ray=ray)
    except ValueError as error:
        console.print(f"[red]--cluster: {error}.[/]")
        raise typer.Exit(2) from None
    placement = Placement(inference_engines, engine_port, engine_gpus, trainer_gpus)
    driver = Driver(run, run_id, settings, endpoints, TerminalView(), ray=ray, placement=placement)
    _until_done(lambda: driver, resume=resume)


def sft(
    config: ConfigArgument = None,
    overrides: SetOption = None,
    out: Annotated[Path | None, typer.Option("--out", help="Where the SFT policy goes.")] = None,
    run_dir: RunDirOption = None,
) -> None:
    """Warm-start a policy on scripted demonstrations and save it as a checkpoint."""
    run = _load(config, overrides)
    settings = settings_for(run_dir)
    configure_logging(settings.log)
    _on_local_stack(run, None, settings, ray=False, resume=False, sft_only=True, out=out)


def _on_local_stack(
    run: RunConfig, run_id: str | None, settings: EtudeSettings, *, ray: bool, **phases: Any
) -> NoReturn:
    """The run on the stack `etude up` runs here, else on one started for it, which serves
    the run's policy; the stack runs the rollout workers as its processes."""
    from etude.trainer.driver import Driver, serving_env
    from etude.trainer.types import Endpoints

    try:  # exported: the stack's processes inherit this process's environment
        os.environ.update(serving_env(run, settings.stack.models_dir))
    except (ValueError, FileNotFoundError) as error:
        console.print(f"[red]policy.init: {error}[/]")
        raise typer.Exit(2) from None
    existing = read_status(settings.stack.run_dir.resolve())
    if settings.stack.memory_check and not (existing is not None and existing.supervisor_alive):
        from etude.cli.memory_budget import refuse_without_memory, run_need  # imports torch

        refuse_without_memory(lambda inference: run_need(run, inference), "this run")
    stack = LocalStack(settings, tuple(ServiceSpec.module(n) for n in LOCAL_SERVICES))

    def start() -> Driver:
        if existing is not None and existing.supervisor_alive:
            state = stack.attach()
            console.print(f"Using the stack running in {state.run_dir}.")
        else:
            with console.status("Starting the local stack…"):
                state = stack.start()
        addresses = {c.name: c.address for c in state.components}
        endpoints = Endpoints.of_stack(state.redis_url, addresses)
        return Driver(run, run_id, settings, endpoints, TerminalView(), ray=ray, stack=stack)

    _until_done(start, stack, **phases)


def _until_done(
    start: Callable[[], Driver], stack: LocalStack | None = None, **phases: Any
) -> NoReturn:
    """Start the run (the stack first, if any) and drive it until it ends, a signal stops it
    (exit 130), the run is failed elsewhere (a task its workers cannot find or build; exit 1)
    or the stack fails (exit 1)."""
    code = 1
    try:
        with stop_on_signals():  # a signal at any point unwinds through the clean-up
            code = asyncio.run(start().main(**phases))
    except StopRequested as stop:
        console.print(f"{stop.args[0]}: stopping…")
        code = 130
    except StackError as error:
        console.print(f"[red]{error}[/]", soft_wrap=True)
    except RunFailedError as error:  # recorded in the run registry: `etude runs show` says it
        console.print(f"[red]{error}[/]", soft_wrap=True)
    except Exception as error:
        if stack is None:  # on a cluster the job's log is the place for the whole story
            raise
        # The reason on the terminal; the traceback, for a bug report, beside the services'.
        logs = stack.run_dir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        with open(logs / "train.log", "a") as trace:
            traceback.print_exception(error, file=trace)
        console.print(
            f"[red]The run failed: {type(error).__name__}: {error}[/]\n"
            f"The services' logs and this traceback ({logs / 'train.log'}) are in {logs}.",
            soft_wrap=True,
        )
    finally:
        if stack is not None:
            stack.stop()
    raise typer.Exit(code)
