"""`etude runs …`: start, list, inspect and stop training runs through the gateway.

The gateway is `--gateway URL`, else the one the local stack in `--run-dir` recorded in its
state file (the `gateway` component's HTTP address).

`start` with a `tasks.taskset` that is a file (or a `datasets` directory) here reads it and
sends its records with the run, so the gateway registers them however far away it runs;
`taskset` then only labels them.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from etude.cli.stack import STATE_FILE, StackState, settings_for
from etude.common.auth import bearer_header
from etude.common.run_config import RunConfigError, load_run_config
from etude.common.settings import get_settings
from etude.tasks.materialize import BUNDLED_TASKSETS
from etude.tasks.taskset import TaskSetError, read_tasks

app = typer.Typer(help="Training runs: start, list, show and stop them through the gateway.")
console = Console(stderr=True)

GatewayOption = Annotated[
    str | None,
    typer.Option("--gateway", help="The gateway's URL; unset: the local stack's gateway."),
]
RunDirOption = Annotated[
    Path | None, typer.Option("--run-dir", help="Where the local stack keeps its state file.")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


class GatewayError(Exception):
    pass


def _gateway_url(gateway: str | None, run_dir: Path | None) -> str:
    if gateway:
        return gateway.rstrip("/")
    state_path = (run_dir or get_settings().stack.run_dir).resolve() / STATE_FILE
    if state_path.is_file():
        state = StackState.read(state_path)
        for component in state.components:
            if component.name == "gateway" and component.http_url:
                return component.http_url
    raise GatewayError(
        f"no gateway: the local stack in {state_path.parent} has none running "
        "(start one with `etude up`) — or pass --gateway URL"
    )


def _call(
    url: str, method: str, path: str, body: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> Any:  # fmt: skip
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json", **(headers or {})}
    request = urllib.request.Request(f"{url}{path}", data=data, method=method, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return json.loads(reply.read())
    except urllib.error.HTTPError as error:
        try:
            detail = json.loads(error.read()).get("detail", error.reason)
        except (ValueError, AttributeError):
            detail = error.reason
        raise GatewayError(f"{method} {path}: {error.code} {detail}") from None
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        raise GatewayError(f"no gateway reachable at {url}: {reason}") from None


def _request(gateway: str | None, run_dir: Path | None, method: str, path: str,
             body: dict[str, Any] | None = None) -> Any:  # fmt: skip
    # The gateway answers only the operator: this CLI presents the stack's operator token.
    operator = bearer_header(settings_for(run_dir).auth, "operator")
    try:
        return _call(_gateway_url(gateway, run_dir), method, path, body, operator)
    except GatewayError as error:
        console.print(f"[red]{error}[/]")
        raise typer.Exit(1) from None


def _when(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def _metric(value: float | None) -> str:
    return "nan" if value is None else f"{value:.4g}"


def _print_runs(runs: list[dict[str, Any]]) -> None:
    table = Table(title="Runs")
    for column in ("run", "status", "step", "policy", "created", "metrics"):
        table.add_column(column)
    for run in runs:
        metrics = ", ".join(f"{k}={_metric(v)}" for k, v in list(run["metrics"].items())[:3])
        table.add_row(run["run_id"], run["status"], str(run["step"]),
                      str(run["policy_version"]), _when(run["created_ms"]), metrics)  # fmt: skip
    Console().print(table)


def _print_run(run: dict[str, Any]) -> None:
    table = Table(title=f"Run {run['run_id']}", show_header=False)
    config = run["config"]
    steps = config.get("trainer", {}).get("steps", "?")
    table.add_row("name", run["name"])
    table.add_row("status", run["status"])
    table.add_row("step", f"{run['step']} of {steps}")
    table.add_row("policy version", str(run["policy_version"]))
    table.add_row("task set", str(config.get("tasks", {}).get("taskset", "?")))
    if run.get("heartbeat_ms"):
        table.add_row("driver seen", _when(run["heartbeat_ms"]))
    if run.get("progress") and run["status"] in ("running", "stopping"):
        table.add_row("doing", run["progress"])
    table.add_row("policy init", str(config.get("policy", {}).get("init", "?")))
    for key in ("output_dir", "error"):
        if run[key]:
            table.add_row(key.replace("_", " "), run[key])
    table.add_row("stop requested", "yes" if run["stop_requested"] else "no")
    table.add_row("created", _when(run["created_ms"]))
    table.add_row("updated", _when(run["updated_ms"]))
    for name, value in run["metrics"].items():
        table.add_row(name, _metric(value))
    Console().print(table)


def _output(data: Any, as_json: bool, printer: Any) -> None:
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        printer(data)


@app.command("list")
def list_command(
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Newest runs shown.")] = 20,
    gateway: GatewayOption = None,
    run_dir: RunDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """The newest runs first, with status, step and latest metrics."""
    _output(_request(gateway, run_dir, "GET", f"/runs?limit={limit}"), as_json, _print_runs)


@app.command()
def show(
    run_id: Annotated[str, typer.Argument(help="The run's id.")],
    gateway: GatewayOption = None,
    run_dir: RunDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """One run: status, step, policy version and every latest metric."""
    path = f"/runs/{urllib.parse.quote(run_id, safe='')}"
    _output(_request(gateway, run_dir, "GET", path), as_json, _print_run)


@app.command()
def start(
    config: Annotated[Path | None, typer.Argument(help="Run config (YAML).")] = None,
    overrides: Annotated[
        list[str], typer.Option("--set", help="section.key=value, repeatable.")
    ] = [],  # noqa: B006
    run_id: Annotated[str | None, typer.Option("--run-id", help="Unset: <name>-<random>.")] = None,
    gateway: GatewayOption = None,
    run_dir: RunDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """Start a run from a config file (checked here first, then by the gateway)."""
    try:
        document = load_run_config(config, overrides).model_dump(mode="json")
        body = {"config": document, "run_id": run_id, **_local_tasks(document["tasks"])}
    except (RunConfigError, TaskSetError) as error:
        console.print(f"[red]{error}[/]")
        raise typer.Exit(2) from None
    _output(_request(gateway, run_dir, "POST", "/runs", body), as_json, _print_run)


def _local_tasks(tasks: dict[str, Any]) -> dict[str, Any]:
    """`{"tasks": records}` when `tasks.taskset` is a file or directory here (its label made
    absolute in `tasks`); nothing for a bundled name or a path only the gateway can see."""
    source = tasks["taskset"]
    if source in BUNDLED_TASKSETS or not Path(source).exists():
        return {}
    records = [t.to_swe() for t in read_tasks(source)]
    tasks["taskset"] = str(Path(source).resolve())
    console.print(f"Sending {len(records)} tasks from {tasks['taskset']} with the run.")
    return {"tasks": records}


@app.command()
def stop(
    run_id: Annotated[str, typer.Argument(help="The run's id.")],
    gateway: GatewayOption = None,
    run_dir: RunDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """Ask a run to stop: it ends before its next step (at once if it never started; a run
    whose trainer died is ended by the gateway's reaper)."""
    path = f"/runs/{urllib.parse.quote(run_id, safe='')}/stop"
    _output(_request(gateway, run_dir, "POST", path), as_json, _print_run)


def _print_tasksets(sets: list[dict[str, Any]]) -> None:
    table = Table(title="Task sets")
    for column in ("name", "tasks", "train", "held out"):
        table.add_column(column)
    for item in sets:
        table.add_row(item["name"], str(item["tasks"]), str(item["train"]), str(item["held_out"]))
    Console().print(table)


@app.command()
def tasksets(
    gateway: GatewayOption = None, run_dir: RunDirOption = None, as_json: JsonOption = False
) -> None:
    """The task sets the gateway offers, with train and held-out counts."""
    _output(_request(gateway, run_dir, "GET", "/tasksets"), as_json, _print_tasksets)


@app.command()
def trajectories(
    run_id: Annotated[str, typer.Argument(help="The run's id.")],
    step: Annotated[int | None, typer.Option(min=0, help="One RL step's; unset: all.")] = None,
    task: Annotated[str | None, typer.Option(help="One task's (its id).")] = None,
    worst: Annotated[bool, typer.Option("--worst", help="Lowest reward first.")] = False,
    best: Annotated[bool, typer.Option("--best", help="Highest reward first.")] = False,
    limit: Annotated[int, typer.Option(min=1, max=1000, help="Trajectories shown.")] = 5,
    full: Annotated[bool, typer.Option("--full", help="Every message whole.")] = False,
    gateway: GatewayOption = None,
    run_dir: RunDirOption = None,
    as_json: JsonOption = False,
) -> None:
    """What the agent did: each kept trajectory's turns, tool calls, tool results, diff,
    hidden-test outcomes and reward parts (`trajectories.keep` of the run config)."""
    from etude.cli.trajectory_view import print_trajectory

    if worst and best:
        console.print("[red]--worst or --best, not both.[/]")
        raise typer.Exit(2)
    query = {"limit": limit, "order": "worst" if worst else "best" if best else ""}
    query |= {k: v for k, v in (("step", step), ("task", task)) if v is not None}
    path = f"/runs/{urllib.parse.quote(run_id, safe='')}/trajectories"
    records = _request(gateway, run_dir, "GET", f"{path}?{urllib.parse.urlencode(query)}")
    if as_json:
        print(json.dumps(records, indent=2))
        return
    if not records:
        console.print("No trajectories kept for that selection.")
        return
    out = Console()
    for record in records:
        print_trajectory(out, record, 0 if full else 1500)
