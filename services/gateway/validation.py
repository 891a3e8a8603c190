"""What the gateway accepts beyond its models' types: strict JSON, and run configs whose
paths stay inside the gateway's run directory.

Python's json module reads `NaN`, `Infinity` and `-Infinity`, and `1e999` as infinity; a
non-finite number then fails deep inside (a 500 when the answer is encoded) or, worse, is
accepted and poisons a run. `StrictJSONRoute` parses every request body first with those
refused, anywhere in the document, and answers 422 naming the problem.

A run started through the gateway writes to its output directory and reads its task set
and initial checkpoint from the paths its config names: a caller must not choose a
directory elsewhere on the host, so those paths must lie under the gateway's run directory.
The run's task sources and wheelhouse (`tasks.sources`, `tasks.packages.wheelhouse`) are
read by its workers and the reward service, which may run elsewhere: they must lie under
the run directory too, or on the shared task volume (`/shared/tasks`) on a cluster.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any

from fastapi import Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute

from etude.common.run_config import RunConfig, TasksConfig
from etude.gateway.config import GatewaySettings
from etude.tasks.provisioning import SHARED_TASKS_DIR


class _Refused(ValueError):
    pass


def _refuse_constant(name: str) -> float:
    raise _Refused(f"{name} is not a number this API accepts (numbers must be finite)")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"{text[:40]} is too large for a finite number")
    return value


def _check_strings(node: Any) -> None:
    """Refuse strings JSON can spell but UTF-8 cannot carry (lone surrogates, `\\ud800`):
    they fail later, where the record is written to Redis or YAML."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            item.encode("utf-8")
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def parse_strict_json(body: bytes) -> Any:
    """The document, or ValueError when it is not JSON with finite numbers and valid text."""
    try:
        document = json.loads(body, parse_constant=_refuse_constant, parse_float=_finite_float)
        _check_strings(document)
    except UnicodeError as error:
        raise ValueError(f"the body is not valid UTF-8 text: {error}") from None
    except RecursionError:
        raise ValueError("the document is nested too deeply") from None
    except _Refused as error:
        raise ValueError(str(error)) from None
    except ValueError as error:  # JSONDecodeError, or an integer of over 4300 digits
        raise ValueError(f"the body is not valid JSON: {error}") from None
    return document


class StrictJSONRoute(APIRoute):
    """An APIRoute that refuses a JSON body with non-finite numbers (422) before FastAPI's
    own, permissive parse reads it."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            body = await request.body()  # cached on the request: the handler reads it again
            if body and "json" in request.headers.get("content-type", "json"):
                try:
                    parse_strict_json(body)
                except ValueError as error:
                    raise RequestValidationError(
                        [{"type": "json_invalid", "loc": ("body",), "msg": str(error)}]
                    ) from None
            return await handler(request)

        return strict_handler


def gateway_run_dir() -> Path:
    """The directory runs started through the gateway live under (ETUDE_GATEWAY__RUN_DIR,
    else the stack's run directory), resolved."""
    settings = GatewaySettings()
    return Path(os.path.realpath(settings.gateway.run_dir or settings.stack.run_dir))


def _inside(path: Path, directory: Path) -> bool:
    return path == directory or path.is_relative_to(directory)


def confine_run_paths(config: RunConfig, run_dir: Path, *, taskset: bool = True) -> RunConfig:
    """`config` with its output directory under `<run_dir>/runs` (the default, or a
    relative one, placed there); ValueError naming the field of a path outside `run_dir`.
    `taskset` False: the task set's records came with the request, so `tasks.taskset` is
    only their label and is left as it is."""
    runs = run_dir / "runs"
    default = RunConfig.model_fields["output_dir"].default
    output = config.output_dir
    output = runs if output == default else Path(os.path.realpath(runs / output))
    if not _inside(output, runs):
        raise ValueError(f"output_dir must lie under {runs} (the gateway's runs directory)")
    return config.model_copy(
        update={
            "output_dir": output,
            "tasks": _confined_sources(
                config.tasks.model_copy(
                    update={"taskset": _stack_file(config.tasks.taskset, "tasks.taskset", run_dir)}
                )
                if taskset
                else config.tasks,
                run_dir,
            ),
            "policy": config.policy.model_copy(
                update={"init": _stack_file(config.policy.init, "policy.init", run_dir)}
            ),
        }
    )


def _stack_file(value: str, field: str, run_dir: Path) -> str:
    """A bundled name or preset as is; a path (it has a `/`), which the run will read,
    resolved and under `run_dir` — the run resolves it from another working directory."""
    if "/" not in value:
        return value
    real = Path(os.path.realpath(run_dir / value))
    if not _inside(real, run_dir):
        raise ValueError(f"{field} must be a bundled name or a path under {run_dir}")
    return str(real)


def _confined_sources(tasks: TasksConfig, run_dir: Path) -> TasksConfig:
    """`tasks` with its sources' and wheelhouse's real paths (a relative one under
    `run_dir`); ValueError naming a path that lies outside `run_dir` and the shared task
    volume."""

    def confined(path: Path) -> Path:
        real = Path(os.path.realpath(run_dir / path.expanduser()))
        if not (_inside(real, run_dir) or _inside(real, SHARED_TASKS_DIR)):
            raise ValueError(
                f"tasks.sources and tasks.packages.wheelhouse must lie under {run_dir} or "
                f"{SHARED_TASKS_DIR} (the shared task volume), not {path}"
            )
        return real

    return tasks.with_paths(confined)
