"""What every benchmark shares: percentiles, the JSON document, the printed table."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table


def argument_parser(doc: str | None) -> argparse.ArgumentParser:
    """The options every benchmark takes: `--quick` (under a minute) and `--json PATH`."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smaller run, under a minute")
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the results as JSON")
    return parser


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (0–100) by linear interpolation between closest ranks."""
    ordered = sorted(values)
    if not ordered:
        return float("nan")
    position = (len(ordered) - 1) * q / 100
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def median(values: list[float]) -> float:
    return statistics.median(values)


def metric(value: float, unit: str, *, baseline: float | None = None, target: float | None = None):
    entry: dict[str, object] = {"value": round(value, 4), "unit": unit}
    if baseline is not None:
        entry["baseline"] = round(baseline, 4)
    if target is not None:
        entry["target"] = target
    return entry


def write_json(path: str | None, name: str, metrics: dict, **extra: object) -> None:
    if path:
        Path(path).write_text(
            json.dumps({"benchmark": name, "metrics": metrics, **extra}, indent=2)
        )


def print_metrics(title: str, metrics: dict) -> None:
    table = Table(title=title)
    for column in ("figure", "value", "unit", "target"):
        table.add_column(column, justify="right" if column in {"value", "target"} else "left")
    for key, entry in metrics.items():
        target = entry.get("target")
        table.add_row(
            key, f"{entry['value']:,}", entry["unit"], "" if target is None else str(target)
        )
    Console().print(table)


def ensure_credentials(workdir: Path) -> None:
    """Services require credentials: unless ETUDE_AUTH__TOKENS_DIR names a set, one for this
    benchmark under `workdir`, held by its services and its clients alike."""
    from etude.common.auth import write_tokens
    from etude.common.settings import get_settings

    if "ETUDE_AUTH__TOKENS_DIR" not in os.environ:
        write_tokens(workdir / "auth")
        os.environ["ETUDE_AUTH__TOKENS_DIR"] = str(workdir / "auth")
        get_settings.cache_clear()


def start_service(module: str, workdir: Path, **env: str) -> tuple[object, str]:
    """`python -m <module>` on free loopback ports with `env` added (ETUDE_* settings);
    returns the process and its gRPC address once its health check says SERVING."""
    from etude.common.grpc_client import health_status
    from etude.common.net import free_port
    from etude.common.processes import spawn

    ensure_credentials(workdir)
    port = free_port()
    variables = {
        **os.environ,
        "ETUDE_GRPC__PORT": str(port),
        "ETUDE_GRPC__METRICS_PORT": str(free_port()),
        "ETUDE_LOG__LEVEL": "WARNING",
        **env,
    }
    log = workdir / f"{module}.log"
    process = spawn([sys.executable, "-m", module], log_path=log, env=variables)
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while health_status(address, timeout=0.5) != "SERVING":
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(log.read_text())
        time.sleep(0.1)
    return process, address
