"""The gateway's HTTP API: start, list, inspect and stop runs; list task sets; health.

Starting a run registers its task set with it (etude.tasks.taskset.RunTasks): the records
`etude runs start` read from a file on the caller's machine, or the bundled set or file
under the run directory the config names. A task set that cannot be read or leaves nothing
to train on is a 422, and no run is recorded.

The gateway also reaps: every `reap_interval_seconds`, and before it shows a run, it ends a
running or stopping run whose driver has written no heartbeat for `driver_timeout_seconds`
(`failed`, or `stopped` when a stop was requested, with the reason in `error`), and a run
whose process the local launcher started has exited without ending it. So a run never stays
`running` or `stopping` with nothing left to end it.

Every answer about a run comes from Redis, so the gateway keeps no state of its own. When
Redis does not answer, Redis-backed endpoints say so with 503 (the client may retry), never
500. Request bodies are validated by the models below, so a bad document gets a 422 that
names the offending field. Every endpoint but `/health` (and the API's own docs and pages)
needs the operator's token (`Authorization: Bearer <token>`): 401 without a valid one, 403
for a token of another role, answered from the headers before any of the body is read, as
is a body over its route's cap (413; etude.common.http_gate).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from functools import cache
from pathlib import Path
from typing import Annotated, Any

import redis.asyncio as aioredis
from fastapi import Depends, FastAPI, HTTPException, Query, Request
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi_offline import FastAPIOffline
from pydantic import BaseModel, ConfigDict, Field, model_validator
from redis import exceptions as redis_errors
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from etude.common.auth import OPERATOR_ONLY, Verifier
from etude.common.http_gate import Authorize, Refusal, RequestGate, role_check
from etude.common.run_config import RunConfig
from etude.common.run_metrics import by_phase, read_metrics
from etude.common.runs import RUN_ID_PATTERN, TERMINAL, RunNotFoundError, RunRecord, RunRegistry
from etude.common.settings import get_settings
from etude.common.strict_json import StrictJSONRoute
from etude.common.trajectory_log import read_trajectories
from etude.gateway.config import GatewayConfig, GatewaySettings
from etude.gateway.launcher import Launcher
from etude.gateway.metrics import REQUEST_SECONDS, REQUESTS
from etude.gateway.validation import confine_run_paths, gateway_run_dir
from etude.gateway.web import add_pages
from etude.tasks.materialize import BUNDLED_TASKSETS, HELD_OUT_PROJECTS
from etude.tasks.provisioning import TaskProvisioning
from etude.tasks.task import Task, read_jsonl
from etude.tasks.taskset import RunTasks, TaskSetError, read_tasks, select_tasks

log = logging.getLogger(__name__)

MAX_UPLOADED_TASKS = 100_000
SHUTDOWN_TIMEOUT_S = 10.0


class StartRun(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    config: RunConfig = Field(default_factory=RunConfig)
    """The run config document, as `etude train` reads it from YAML. Its `output_dir`
    (default: `<run dir>/runs`) and any task-set or checkpoint path must lie under the
    gateway's run directory."""
    run_id: str | None = Field(default=None, pattern=RUN_ID_PATTERN)
    """Unset: `<config.name>-<random>`."""
    tasks: list[dict[str, Any]] | None = Field(default=None, max_length=MAX_UPLOADED_TASKS)
    """The task set's records (SWE-bench-style, as in a JSONL file), read by the caller
    (`etude runs start` reads a local `tasks.taskset` file and sends them); `config.tasks.
    taskset` then only names where they came from. Unset: the run reads `tasks.taskset`,
    a bundled name or a file under the gateway's run directory."""

    @model_validator(mode="after")
    def _paths_inside_the_run_dir(self) -> StartRun:
        uploaded = self.tasks is not None
        self.config = confine_run_paths(self.config, gateway_run_dir(), taskset=not uploaded)
        return self


def _selected(body: StartRun) -> tuple[list[Task], list[Task]]:
    """The run's (train, held-out) tasks; TaskSetError names what is wrong."""
    config = body.config.tasks
    if body.tasks is None:
        named = config.taskset
        return select_tasks(_bundled(named) if named in BUNDLED_TASKSETS else read_tasks(named),
                            config)  # fmt: skip
    tasks = []
    for number, record in enumerate(body.tasks):
        try:
            tasks.append(Task.from_swe(record))
        except (ValueError, KeyError, TypeError) as error:
            raise TaskSetError(f"tasks[{number}]: {error}") from None
    try:
        return select_tasks(tasks, config)
    except TaskSetError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        # A field of the wrong type (metadata hints that are not a mapping, …) found while
        # the records are read: the caller's document, not a gateway failure.
        raise TaskSetError(f"a task record is malformed: {type(error).__name__}: {error}") from None


@cache
def _bundled(name: str) -> list[Task]:
    return read_tasks(name)  # shipped with the package: read once


class Run(BaseModel):
    run_id: str
    name: str
    config: dict
    status: str
    """queued, running, stopping, stopped, finished or failed."""
    created_ms: int
    updated_ms: int
    step: int
    policy_version: int
    metrics: dict[str, float | None]
    """Latest value of each scalar metric; null for NaN or infinity."""
    error: str
    stop_requested: bool
    output_dir: str
    heartbeat_ms: int
    """When the run's driver last said it is alive (Unix ms; 0: no driver yet)."""
    progress: str = ""
    """What the run is doing now, in a line (`held-out pass@1 before RL: 37/88 episodes`)."""

    @classmethod
    def of(cls, record: RunRecord) -> Run:
        return cls(**record.as_dict())


class TaskSet(BaseModel):
    name: str
    tasks: int
    train: int
    held_out: int
    """Tasks of projects kept out of training, to measure generalization."""


class Health(BaseModel):
    status: str


class Problem(BaseModel):
    detail: str


@cache
def _taskset(name: str, tasks_file: Path) -> TaskSet:
    tasks = list(read_jsonl(tasks_file))
    held_out = sum(t.metadata.get("project") in HELD_OUT_PROJECTS for t in tasks)
    return TaskSet(name=name, tasks=len(tasks), train=len(tasks) - held_out, held_out=held_out)


class RequestMetrics:
    """Counts and times every request by its route template."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500  # what the client gets if the app raises

        async def recording_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, recording_send)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            REQUESTS.labels(scope["method"], route, str(status)).inc()
            REQUEST_SECONDS.labels(route).observe(time.perf_counter() - started)


GUARDED = ("/runs", "/tasksets")
"""Paths that need the operator's token, refused from the headers alone."""
CHALLENGE = {"WWW-Authenticate": "Bearer"}


def _refused(refusal: Refusal) -> JSONResponse:
    headers = CHALLENGE if refusal.status == 401 else None
    return JSONResponse({"detail": refusal.message}, refusal.status, headers=headers)


def operator_only(authorize: Authorize):
    """A dependency that lets a request through only with the operator's token, as
    `authorize` decides (behind the gate, which refuses first: a second line, and what the
    OpenAPI document shows)."""
    scheme = HTTPBearer(auto_error=False, description="The operator role's token.")

    # `scheme` only declares the credential to the OpenAPI document; the header is read as
    # the gate reads it. A default, not `Annotated[..., Depends(scheme)]`: with postponed
    # annotations FastAPI would have to resolve the local `scheme` from a string.
    async def dependency(
        request: Request,
        _: HTTPAuthorizationCredentials | None = Depends(scheme),  # noqa: B008
    ) -> None:
        refusal = authorize(request.headers.get("authorization"))
        if refusal is not None:
            headers = CHALLENGE if refusal.status == 401 else None
            raise HTTPException(refusal.status, refusal.message, headers=headers)

    return dependency


NOT_FOUND = {404: {"model": Problem, "description": "No such run."}}
DENIED = {
    401: {"model": Problem, "description": "No valid token."},
    403: {"model": Problem, "description": "A token of another role."},
}
UNAVAILABLE = {503: {"model": Problem, "description": "Redis does not answer."}}


def create_app(
    redis_url: str,
    launcher: Launcher,
    *,
    prefix: str = "etude",
    task_sets: Mapping[str, Path] = BUNDLED_TASKSETS,
    redis_timeout_seconds: float = 2.0,
    verifier: Verifier | None = None,
    driver_timeout_seconds: float = 60.0,
    reap_interval_seconds: float = 5.0,
    config: GatewayConfig | None = None,
) -> FastAPI:
    """The gateway over the Redis at `redis_url`; `launcher` starts each created run. The
    Redis client is made in the app's lifespan, on the loop that serves the requests, and
    the reaper runs there. `verifier` unset: the process's credentials (ETUDE_AUTH__*);
    `config` unset: the process's settings (ETUDE_GATEWAY__*: the body caps)."""
    authorize = role_check(
        verifier or Verifier.from_settings(get_settings().auth),
        OPERATOR_ONLY,
        unauthenticated="a credential is required",
        forbidden="this endpoint is for the operator role",
    )
    config = config or GatewaySettings().gateway
    guarded = [Depends(operator_only(authorize))]

    async def reap(runs: RunRegistry, run_id: str | None = None) -> None:
        """End the runs whose process exited (all of them: `exited` hands each exit over
        once) and those, or just `run_id`, whose driver is silent."""
        for ended, code in launcher.exited().items():
            why = f"its `etude train` process exited with code {code} before ending it"
            await runs.abandon(ended, f"{why}; see {launcher.log_of(ended)}")
        for ended, status in (await runs.reap(driver_timeout_seconds, run_id)).items():
            log.warning("run %s ended as %s: its driver is gone", ended, status)

    async def reap_forever(runs: RunRegistry) -> None:
        while True:
            await asyncio.sleep(reap_interval_seconds)
            try:
                await reap(runs)
            except redis_errors.RedisError as error:  # Redis back later: reap then
                log.warning("reaper: %s", error)
            except Exception:  # a reaper that died would leave every later run unended
                log.exception("reaper: this round failed; the next one runs as usual")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        client = aioredis.Redis.from_url(
            redis_url,
            socket_timeout=redis_timeout_seconds,
            socket_connect_timeout=redis_timeout_seconds,
        )
        app.state.registry = RunRegistry(client, prefix)
        app.state.run_tasks = RunTasks(client, prefix)
        reaper = asyncio.create_task(reap_forever(app.state.registry))
        try:
            yield
        finally:
            # Bounded, and raising nothing: a shutdown that hangs or fails holds up the
            # process that is stopping (and a TestClient's exit waits on it for ever).
            reaper.cancel()
            await asyncio.wait({reaper}, timeout=SHUTDOWN_TIMEOUT_S)
            try:
                await asyncio.wait_for(client.aclose(), SHUTDOWN_TIMEOUT_S)
            except (TimeoutError, redis_errors.RedisError, OSError) as error:
                log.warning("closing the Redis client: %r", error)

    app = FastAPIOffline(  # /docs with Swagger UI's assets from the package, not a CDN
        title="Étude gateway",
        summary="Start, watch and stop training runs; list task sets.",
        version="1",
        lifespan=lifespan,
    )
    app.add_middleware(
        RequestGate,
        authorize=authorize,
        guarded=GUARDED,
        respond=_refused,
        max_body_bytes=config.max_body_bytes,
        body_limits={"/runs": config.max_run_body_bytes},
    )
    app.add_middleware(RequestMetrics)  # added last, so outermost: it counts refusals too
    add_pages(app)
    app.router.route_class = StrictJSONRoute  # every route below: non-finite numbers → 422

    def registry(request: Request) -> RunRegistry:
        return request.app.state.registry

    @app.exception_handler(redis_errors.RedisError)
    async def redis_unavailable(request: Request, error: redis_errors.RedisError) -> JSONResponse:
        return JSONResponse({"detail": f"redis unavailable: {error}"}, status_code=503)

    @app.exception_handler(RunNotFoundError)
    async def run_not_found(request: Request, error: RunNotFoundError) -> JSONResponse:
        return JSONResponse({"detail": str(error)}, status_code=404)

    @app.get("/health", responses=UNAVAILABLE)
    async def health(request: Request) -> Health:
        """`ok` when Redis answers a PING."""
        await registry(request).redis.ping()
        return Health(status="ok")

    @app.post(
        "/runs",
        status_code=201,
        responses={409: {"model": Problem}, **DENIED, **UNAVAILABLE},
        dependencies=guarded,
    )
    async def start_run(request: Request, body: StartRun) -> Run:
        """Record a run as queued with its task set, and hand it to the launcher. 422 when
        the task set cannot be read or has no training task."""
        runs = registry(request)
        try:
            train, held_out = await asyncio.to_thread(_selected, body)
        except TaskSetError as error:
            raise HTTPException(422, f"tasks: {error}") from None
        try:
            record = await runs.create(body.config, body.run_id)
        except ValueError as error:
            raise HTTPException(409, str(error)) from None
        run_tasks: RunTasks = request.app.state.run_tasks
        try:
            tasks = body.config.tasks
            await run_tasks.register(
                record.run_id, tasks.taskset, train, held_out, TaskProvisioning.from_config(tasks)
            )
            await launcher.launch(record, body.config)
        except Exception as error:
            # The record stays, marked failed, so the failure is visible in `GET /runs`.
            message = f"could not launch: {error}"
            await runs.update(record.run_id, status="failed", error=message)
            raise HTTPException(500, f"run {record.run_id!r} failed: {message}") from error
        return Run.of(record)

    @app.get("/runs", responses={**DENIED, **UNAVAILABLE}, dependencies=guarded)
    async def list_runs(
        request: Request, limit: Annotated[int, Query(ge=1, le=1000)] = 100
    ) -> list[Run]:
        """The newest runs first."""
        return [Run.of(r) for r in await registry(request).list(limit)]

    @app.get(
        "/runs/{run_id}", responses={**NOT_FOUND, **DENIED, **UNAVAILABLE}, dependencies=guarded
    )
    async def get_run(request: Request, run_id: str) -> Run:
        """A run's status, step, policy version and latest metrics (a run whose driver is
        gone is ended first, so it is not shown as running)."""
        await reap(registry(request), run_id)
        return Run.of(await registry(request).get(run_id))

    @app.post(
        "/runs/{run_id}/stop",
        status_code=202,
        responses={**NOT_FOUND, 409: {"model": Problem}, **DENIED, **UNAVAILABLE},
        dependencies=guarded,
    )
    async def stop_run(request: Request, run_id: str) -> Run:
        """Ask a run to stop: the training loop ends it before its next step, a queued run
        no driver has taken stops at once, and a run whose driver is gone is ended by the
        reaper. 409 when it had already ended."""
        record = await registry(request).request_stop(run_id)
        if record.status in TERMINAL and not record.stop_requested:
            raise HTTPException(409, f"run {run_id!r} has already ended ({record.status})")
        return Run.of(record)

    @app.get(
        "/runs/{run_id}/metrics",
        responses={**NOT_FOUND, **DENIED, **UNAVAILABLE},
        dependencies=guarded,
    )
    async def run_metrics(request: Request, run_id: str) -> dict[str, list[dict[str, Any]]]:
        """Every step the run has reported so far (its metrics.jsonl): `sft`, `rl` (reward,
        pass rate, behaviour, staleness, throughput per RL step) and `eval` (held-out
        pass@1 before and after RL, with their intervals)."""
        record = await registry(request).get(run_id)
        if not record.output_dir:
            return by_phase([])
        return by_phase(await asyncio.to_thread(read_metrics, Path(record.output_dir)))

    @app.get(
        "/runs/{run_id}/trajectories",
        responses={**NOT_FOUND, **DENIED, **UNAVAILABLE},
        dependencies=guarded,
    )
    async def run_trajectories(
        request: Request,
        run_id: str,
        step: Annotated[int | None, Query(ge=0)] = None,
        task: Annotated[str | None, Query(min_length=1, max_length=1000)] = None,
        order: Annotated[str, Query(pattern="^(|worst|best)$")] = "",
        limit: Annotated[int, Query(ge=1, le=1000)] = 20,
    ) -> list[dict[str, Any]]:
        """The run's kept trajectories (etude.common.trajectory_log), read where the run
        writes them: one step's or all, one task's or all, worst or best reward first."""
        record = await registry(request).get(run_id)
        if not record.output_dir:
            raise HTTPException(404, f"run {run_id!r} has not written anything yet")
        return await asyncio.to_thread(
            read_trajectories, Path(record.output_dir), step=step, task=task, order=order,
            limit=limit,
        )  # fmt: skip

    @app.get("/tasksets", responses=DENIED, dependencies=guarded)
    async def tasksets() -> list[TaskSet]:
        """The bundled task sets and how their tasks divide into train and held out."""
        return [_taskset(name, path) for name, path in task_sets.items()]

    return app
