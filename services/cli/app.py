"""`etude`: the command line.

etude up             start the local stack and keep it running until Ctrl-C / SIGTERM
etude up --smoke     start it, check every part end to end, stop it
etude status         each component's address, metrics URL and health (--json)
etude train CONFIG   SFT warm start then RL on the local stack (--ray: Ray actors)
etude sft CONFIG     the warm start alone, saved as a checkpoint
etude runs …         start, list, show and stop runs through the gateway
etude version
"""

from __future__ import annotations

import json
import sys
import time
from importlib.metadata import version as package_version
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from etude.cli.model import app as model_app
from etude.cli.runs import app as runs_app
from etude.cli.search import app as search_app
from etude.cli.stack import LOCAL_SERVICES, LocalStack, ServiceSpec, StackError, settings_for
from etude.cli.status import StackStatus, read_status
from etude.cli.tasks import app as tasks_app
from etude.cli.train import sft, train
from etude.common.logging import configure_logging
from etude.common.settings import EtudeSettings
from etude.common.signals import StopRequested, stop_on_signals

app = typer.Typer(
    name="etude",
    help="Étude: reinforcement learning for coding agents.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console(stderr=True)
app.add_typer(tasks_app, name="tasks")
app.add_typer(search_app, name="search")
app.add_typer(model_app, name="model")
app.add_typer(runs_app, name="runs")
app.command()(train)
app.command()(sft)

RunDirOption = Annotated[
    Path | None,
    typer.Option("--run-dir", help="Where Redis data, logs and the state file go."),
]


@app.command()
def up(
    run_dir: RunDirOption = None,
    smoke: Annotated[
        bool, typer.Option("--smoke", help="Start, run the end-to-end check, then stop.")
    ] = False,
) -> None:
    """Start Redis and every service on loopback; stop them all on Ctrl-C or SIGTERM."""
    settings = settings_for(run_dir)
    configure_logging(settings.log)
    existing = read_status(settings.stack.run_dir.resolve())
    if existing is not None and existing.supervisor_alive:
        console.print(
            f"[red]A stack is already running in {existing.run_dir} "
            f"(pid {existing.supervisor_pid}).[/] Stop it, or pass another --run-dir."
        )
        raise typer.Exit(1)
    if settings.stack.memory_check:
        from etude.cli.memory_budget import refuse_without_memory, stack_need  # imports torch

        refuse_without_memory(stack_need, "the local stack")

    stack = LocalStack(settings, tuple(ServiceSpec.module(n) for n in LOCAL_SERVICES))
    # A signal at any point, even during start-up, unwinds through `stack.stop()`.
    try:
        with stop_on_signals():
            exit_code = _run_stack(stack, settings, smoke)
    except StopRequested as stop:
        console.print(f"{stop.args[0]}: stopping…")
        exit_code = 0
    except StackError as error:
        console.print(f"[red]{error}[/]")
        exit_code = 1
    finally:
        stack.stop()
        console.print("Stopped.")
    raise typer.Exit(exit_code)


def _run_stack(stack: LocalStack, settings: EtudeSettings, smoke: bool) -> int:
    with console.status("Starting the local stack…"):
        stack.start()
    status = read_status(stack.run_dir, stack.tokens_dir)
    assert status is not None
    _print_status(status)
    if smoke:
        from etude.cli.smoke import run_smoke

        return 0 if run_smoke(settings, status, console) else 1
    console.print("[green]Ready.[/] Ctrl-C stops everything.")
    while True:
        time.sleep(0.5)
        dead = stack.exited()
        if dead:
            names = ", ".join(f"{name} (exit {code})" for name, code in dead)
            console.print(f"[red]Stopped unexpectedly: {names}.[/] Taking the stack down.")
            return 1


@app.command()
def status(
    run_dir: RunDirOption = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """Report the local stack: each component's address, metrics URL and health."""
    settings = settings_for(run_dir)
    current = read_status(settings.stack.run_dir.resolve(), settings.auth.tokens_dir)
    if current is None or not current.supervisor_alive:
        if as_json:
            print(json.dumps({"running": False, "services": []}))
        else:
            console.print("No local stack is running here. Start one with `etude up`.")
        raise typer.Exit(1)
    if as_json:
        print(json.dumps({"running": True, **current.as_dict()}, indent=2))
    else:
        _print_status(current)
    raise typer.Exit(0 if current.healthy else 2)


@app.command()
def version() -> None:
    """Print the installed version."""
    print(f"etude {package_version('etude')} (python {sys.version.split()[0]})")


def _print_status(status: StackStatus) -> None:
    table = Table(title=f"Étude local stack — {status.run_dir}")
    for column in ("service", "gRPC / address", "metrics", "health", "pid"):
        table.add_column(column)
    for c in status.components:
        colour = "green" if c.health == "SERVING" else "red"
        pid = str(c.pid) if c.alive else f"{c.pid} (gone)"
        address = f"{c.address}\n{c.http_url}" if c.http_url else c.address
        table.add_row(c.name, address, c.metrics_url or "—", f"[{colour}]{c.health}[/]", pid)
    Console().print(table)
    if status.starting:
        Console().print("starting: the supervisor is still starting services")
    held = [f"{c.role} {c.fingerprint}" for c in status.credentials if c.fingerprint]
    missing = [c.role for c in status.credentials if not c.fingerprint]
    tokens_dir = Path(status.credentials[0].path).parent if status.credentials else None
    Console().print(
        f"credentials in {tokens_dir}: {', '.join(held) or 'none'}"
        + (f" (missing: {', '.join(missing)})" if missing else "")
    )
    gateway = next((c for c in status.components if c.name == "gateway" and c.http_url), None)
    if gateway is not None:  # the token stays in its file: the page asks for it once
        Console().print(f"web view: {gateway.http_url}/ui (its key: the operator token in "
                        f"{tokens_dir})")  # fmt: skip
