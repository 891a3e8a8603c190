"""The local stack: a real redis-server and every service as its own process on loopback.

`LocalStack.start()` brings them up in order and waits until each answers: Redis a PING,
a service a gRPC health check reporting SERVING. The addresses go into a state file in the
run directory for `etude status`. `stop()` takes everything down in reverse order; every
child is also bound to die with its parent, so even a killed `etude up` leaves no orphan.

Credentials: the stack keeps a token per role in `<run_dir>/auth` (mode 0600, made on the
first start and reused after, so an `etude train` or `etude runs` joining a running stack
holds valid ones), and Redis a password in its data directory. Each service is told where
the tokens are and which role it presents (its own: the environment calls search as
`environment`); authentication is always on for what the stack starts.

Process trees. Every process the stack starts leads a session of its own, and what it starts
(vLLM's engine core, pools, Ray workers) stays in it: stopping a service ends its session, and
so does noticing that it died (`exited`), so an engine that ignores SIGTERM or lost its parent
to SIGKILL is ended with it. The state file records each process with its start time, so that
when a whole stack was killed (its supervisor too), the next start in the same run directory
ends whatever of its sessions is still running.

Before anything starts, the stack reclaims what killed services left on this host (a
`kill -9`, a crash): the processes of an earlier stack of this run directory, the
environment's sessions under its root, and the cgroups of sessions and gradings, with every
process in them, whose owning process is gone (`etude.sandbox.reclaim`). What a live service
owns, in this stack or another, stays.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from subprocess import Popen

from etude.cli.service_watch import ServiceWatch
from etude.cli.start_progress import StartWatch
from etude.common.auth import write_tokens
from etude.common.grpc_client import health_status
from etude.common.logging import log_fields
from etude.common.net import free_port
from etude.common.process_deaths import ended_because, memory_note
from etude.common.processes import log_tail, pid_alive, reap, spawn, terminate
from etude.common.redis_server import RedisServer, find_redis_server, redis_health
from etude.common.settings import EtudeSettings, get_settings
from etude.environment.config import SESSION_CGROUPS, SESSIONS_DIR, EnvironmentSettings
from etude.sandbox.limits import CgroupSupport
from etude.sandbox.reclaim import Owner, reclaim_cgroups, reclaim_owned_dirs, reclaim_sessions
from etude.tasks.pyenv_build import BUILD_CGROUPS
from etude.tasks.testrun import GRADING_CGROUPS

log = logging.getLogger(__name__)

STATE_FILE = "stack.json"

# Services `etude up` starts, in dependency order; each runs as `python -m etude.<name>`.
# A service joins this list when it exists.
LOCAL_SERVICES: tuple[str, ...] = ("inference", "search", "environment", "reward", "gateway")
# Services that also answer HTTP (a port of their own, `ETUDE_<NAME>__HTTP_PORT`).
HTTP_SERVICES = frozenset({"inference", "gateway"})
# The roles whose tokens each kind of process presents when it calls another service
# (a rollout worker is `rollout-<run>-<i>`); inference and search call nobody.
SERVICE_ROLES: dict[str, tuple[str, ...]] = {
    "inference": (),
    "search": (),
    "environment": ("environment",),
    "reward": ("reward",),
    "gateway": ("gateway",),
    "rollout": ("rollout",),
}
AUTH_DIR = "auth"


@dataclass(frozen=True, slots=True)
class ServiceSpec:
    name: str
    argv: tuple[str, ...]
    http: bool = False
    env: tuple[tuple[str, str], ...] = ()
    """Extra environment of this process only (e.g. a rollout worker's run id)."""

    @classmethod
    def module(cls, name: str) -> ServiceSpec:
        return cls(name, (sys.executable, "-m", f"etude.{name}"), http=name in HTTP_SERVICES)


@dataclass(slots=True)
class Component:
    """One running part of the stack, as the state file records it."""

    name: str
    kind: str  # "redis" or "grpc"
    address: str
    pid: int
    log: str
    metrics_url: str | None = None
    http_url: str | None = None
    owner: str = ""
    """The process as `etude.sandbox.reclaim.Owner` names it (pid, start time, boot), for
    ending its session's leftovers after the whole stack was killed."""
    ready_seconds: float = 0.0
    """From its start to its first SERVING health check (the last try's)."""


@dataclass(slots=True)
class StackState:
    supervisor_pid: int
    run_dir: str
    redis_url: str
    components: list[Component] = field(default_factory=list)
    starting: bool = False
    """Services are still being started: the stack is not ready, whatever is up so far."""

    def write(self, path: Path) -> None:
        tmp = path.with_suffix(".tmp")
        # 0600: the Redis URL in it carries the password.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps(asdict(self), indent=2))
        tmp.replace(path)  # readers never see half a file

    @classmethod
    def read(cls, path: Path) -> StackState:
        data = json.loads(path.read_text())
        components = [Component(**c) for c in data.pop("components")]
        return cls(components=components, **data)


def tokens_dir_of(settings: EtudeSettings) -> Path:
    """Where the stack's credentials are: ETUDE_AUTH__TOKENS_DIR, else `<run_dir>/auth`."""
    return (settings.auth.tokens_dir or settings.stack.run_dir / AUTH_DIR).resolve()


def settings_for(run_dir: Path | None) -> EtudeSettings:
    """The process's settings, with the stack's run directory from `--run-dir` if given and
    the stack's credentials as this process's own."""
    settings = get_settings()
    # Absolute: paths under it (task repositories) travel to services that refuse relative
    # ones, and the default `.etude` is relative.
    stack = settings.stack.model_copy(
        update={"run_dir": (run_dir or settings.stack.run_dir).resolve()}
    )
    settings = settings.model_copy(update={"stack": stack})
    if settings.auth.tokens_dir is None:
        tokens_dir = tokens_dir_of(settings)
        # Exported, not only set here: every channel of this process, its children and
        # its local Ray actors read their credentials from the process's settings.
        os.environ.update(ETUDE_AUTH__TOKENS_DIR=str(tokens_dir))
        get_settings.cache_clear()
        auth = settings.auth.model_copy(update={"tokens_dir": tokens_dir})
        settings = settings.model_copy(update={"auth": auth})
    return settings


def _owner_token(pid: int | None) -> str:
    owner = Owner.of(pid) if pid else None
    return owner.token if owner is not None else ""


class StackError(RuntimeError):
    pass


class LocalStack:
    def __init__(self, settings: EtudeSettings, services: tuple[ServiceSpec, ...]) -> None:
        self.settings = settings
        self.services = services
        self.run_dir = settings.stack.run_dir.resolve()
        self.tokens_dir = tokens_dir_of(settings)
        self.redis: RedisServer | None = None
        self.processes: dict[str, Popen[bytes]] = {}
        self.addresses: dict[str, str] = {}
        self.state: StackState | None = None
        self._watch = ServiceWatch()
        self._started = time.monotonic()
        self.attached = False
        """True when this object joined a stack another `etude` process supervises: it
        starts and stops only its own extra processes, never the stack or its state file."""

    def attach(self) -> StackState:
        """Join the stack already running in the run directory (`etude up` elsewhere)."""
        self.state = StackState.read(self.state_path)
        self.attached = True
        for c in self.state.components:
            if c.kind == "grpc":
                self.addresses[f"ETUDE_SERVICES__{c.name.upper()}"] = c.address
        return self.state

    @property
    def redis_url(self) -> str:
        if self.redis is not None:
            return self.redis.url
        return self.state.redis_url if self.state is not None else ""

    @property
    def state_path(self) -> Path:
        return self.run_dir / STATE_FILE

    def start(self) -> StackState:
        """Start Redis and every service; raise StackError (after cleaning up) on failure."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        host = self.settings.stack.host
        self.reclaim_leftovers()
        write_tokens(self.tokens_dir)
        try:
            self.redis = RedisServer(
                data_dir=self.run_dir / "redis",
                host=host,
                appendfsync=self.settings.stack.redis_appendfsync,
                binary=find_redis_server(self.settings.stack.redis_server),
                ready_timeout=self.settings.stack.ready_timeout_seconds,
            ).start()
            self.state = StackState(os.getpid(), str(self.run_dir), self.redis.url, starting=True)
            self.state.components.append(
                Component(
                    "redis",
                    "redis",
                    f"{host}:{self.redis.port}",
                    self.redis.pid or 0,
                    str(self.redis.log_path),
                    owner=_owner_token(self.redis.pid),
                )
            )
            for spec in self.services:
                component = self._start_service(spec)
                self.state.components.append(component)
                # Services started later find this one through ETUDE_SERVICES__<NAME>.
                self.addresses[f"ETUDE_SERVICES__{spec.name.upper()}"] = component.address
                self.state.write(self.state_path)
            self.state.starting = False
            self.state.write(self.state_path)
            return self.state
        except BaseException:
            self.stop()
            raise

    def reclaim_leftovers(self) -> None:
        """Sessions, grading and environment-build cgroups of killed processes (see the
        module docstring).
        The environment service does the same for its sessions when it starts; doing it
        here also covers cgroups of services that will not start again."""
        ended = self._end_previous_stack()
        environment = EnvironmentSettings(stack=self.settings.stack).resolved()
        assert environment.root_dir is not None
        # The sessions' directories first: each holds where its cgroups are.
        found = reclaim_owned_dirs(environment.root_dir / SESSIONS_DIR)
        parents = CgroupSupport.detect().parents.values()  # where the services make theirs
        for prefix in (SESSION_CGROUPS, GRADING_CGROUPS, BUILD_CGROUPS):
            found += reclaim_cgroups(prefix, parents)
        if found or ended:
            log.info(
                "reclaimed what killed services left",
                extra=log_fields(
                    stack_processes=ended, sessions=found.directories, cgroups=found.cgroups,
                    processes=found.processes,
                ),
            )  # fmt: skip

    def _end_previous_stack(self) -> int:
        """End what is left of the processes of an earlier stack of this run directory whose
        supervisor is gone; how many there were."""
        try:
            previous = StackState.read(self.state_path)
        except (OSError, ValueError, TypeError, KeyError):
            return 0  # none, or not a state file this version wrote
        if previous.supervisor_pid != os.getpid() and pid_alive(previous.supervisor_pid):
            return 0  # a live stack: `etude up` refuses to start beside it
        leaders = [Owner.parse(c.owner) for c in previous.components]
        return reclaim_sessions(leader for leader in leaders if leader is not None)

    def add_service(self, spec: ServiceSpec) -> Component:
        """Start one more process beside the running stack (a rollout worker of a run)."""
        assert self.state is not None, "start the stack first"
        component = self._start_service(spec)
        if not self.attached:
            self.state.components.append(component)
            self.state.write(self.state_path)
        return component

    def add_process(
        self, name: str, argv: tuple[str, ...], env: tuple[tuple[str, str], ...] = ()
    ) -> Component:
        """`add_service` for a plain command: the run driver's rollout worker processes."""
        return self.add_service(ServiceSpec(name, argv, env=env))

    def stop_service(self, name: str) -> int | None:
        """SIGTERM one process, wait for it to finish its work, and forget it."""
        proc = self.processes.pop(name, None)
        if self.state is not None and not self.attached:
            self.state.components = [c for c in self.state.components if c.name != name]
            self.state.write(self.state_path)
        return None if proc is None else terminate(proc, self.settings.stack.stop_timeout_seconds)

    def _start_service(self, spec: ServiceSpec) -> Component:
        host = self.settings.stack.host
        log_path = self.run_dir / "logs" / f"{spec.name}.log"
        for _attempt in range(3):
            port, metrics_port, http_port = free_port(host), free_port(host), free_port(host)
            http = {f"ETUDE_{spec.name.upper()}__HTTP_PORT": str(http_port)} if spec.http else {}
            env = {
                **os.environ,
                "ETUDE_GRPC__HOST": host,
                "ETUDE_GRPC__PORT": str(port),
                "ETUDE_GRPC__METRICS_PORT": str(metrics_port),
                "ETUDE_REDIS__URL": self.redis_url,
                "ETUDE_STACK__RUN_DIR": str(self.run_dir),
                **self._auth_env(spec.name),
                **self.addresses,
                **http,
                **dict(spec.env),
            }
            started = time.monotonic()
            proc = spawn(spec.argv, log_path=log_path, env=env)
            self.processes[spec.name] = proc
            address = f"{host}:{port}"
            failure = self._wait_serving(spec.name, proc, address, log_path)
            if failure is None:
                return Component(
                    spec.name,
                    "grpc",
                    address,
                    proc.pid,
                    str(log_path),
                    metrics_url=f"http://{host}:{metrics_port}/metrics",
                    http_url=f"http://{host}:{http_port}" if spec.http else None,
                    owner=_owner_token(proc.pid),
                    ready_seconds=round(time.monotonic() - started, 2),
                )
            exited = proc.returncode is not None  # reaped while waited for
            terminate(proc, timeout=2)
            if not exited:
                break  # stuck or too slow: a second try would be no better
            # Exited early, perhaps a port race: once more on other ports.
        raise StackError(
            f"{spec.name} did not become healthy: {failure}; its log ({log_path}) says:\n"
            f"{log_tail(log_path)}"
        )

    def _auth_env(self, name: str) -> dict[str, str]:
        """Where a service finds the credentials, which it presents; never auth off."""
        env = {"ETUDE_AUTH__TOKENS_DIR": str(self.tokens_dir), "ETUDE_AUTH__REQUIRED": "true"}
        roles = SERVICE_ROLES.get(name.split("-")[0])
        if roles is not None:
            env["ETUDE_AUTH__ROLES"] = json.dumps(list(roles))
        return env

    def _wait_serving(
        self, name: str, proc: Popen[bytes], address: str, log_path: Path
    ) -> str | None:
        """None once the service reports SERVING; else why not. A start is waited for while
        it shows progress (`start_progress`), up to `ready_timeout_seconds` in all."""
        stack = self.settings.stack
        started = time.monotonic()
        watch = StartWatch(proc.pid, log_path, stack.start_stall_seconds)
        log.info("starting %s", name)
        while (waited := time.monotonic() - started) < stack.ready_timeout_seconds:
            if (code := reap(proc)) is not None:
                return f"it {ended_because(code)} after {waited:.0f} s"
            if health_status(address, timeout=0.5) == "SERVING":
                log.info("%s serving after %.1f s", name, waited)
                return None
            if watch.stalled():
                return (
                    f"it showed no progress for {watch.idle_seconds:.0f} s (no CPU time, no "
                    f"reads, no log output; stack.start_stall_seconds)"
                )
            time.sleep(0.1)
        return (
            f"it was not serving after {stack.ready_timeout_seconds:.0f} s "
            "(stack.ready_timeout_seconds)"
        )

    def exited(self) -> list[tuple[str, int]]:
        """Components that died on their own, with their exit codes."""
        # Reaped with what is left of their sessions (an engine core they started).
        dead = [(n, code) for n, p in self.processes.items() if (code := reap(p)) is not None]
        if self.redis and self.redis.process and (code := reap(self.redis.process)) is not None:
            dead.append(("redis", code))
        return dead

    def failures(self) -> list[str]:
        """The services of this stack that can no longer serve (`service_watch`), each with
        why, the kernel's word if the machine ran out of memory, and where its log is.
        Rollout workers are left to the run driver."""
        if self.state is None:
            return []
        services = {spec.name for spec in self.services} | {"redis"}
        found = []
        for component in self.state.components:
            if component.name not in services:
                continue
            own = self._process_of(component)
            code = reap(own) if own is not None else None
            if code is not None:
                why: str | None = ended_because(code)
            elif own is None and not pid_alive(component.pid):  # another supervisor's
                why = f"is gone (pid {component.pid})"
            else:
                health = (
                    redis_health(self.redis_url) if component.kind == "redis"
                    else health_status(component.address, timeout=1.0)
                )  # fmt: skip
                why = self._watch.verdict(component.name, health)
            if why is not None:
                note = memory_note(within_seconds=time.monotonic() - self._started)
                found.append(f"{component.name} {why}{note} (its log: {component.log})")
        return found

    def _process_of(self, component: Component) -> Popen[bytes] | None:
        """The process of `component` if this stack started it; None for an attached one."""
        if component.kind == "redis":
            return self.redis.process if self.redis is not None else None
        return self.processes.get(component.name)

    def stop(self) -> None:
        """Services in reverse start order, then Redis (which flushes its AOF)."""
        timeout = self.settings.stack.stop_timeout_seconds
        for _name, proc in reversed(self.processes.items()):
            terminate(proc, timeout)
        self.processes.clear()
        if self.redis is not None:
            self.redis.stop(timeout)
            self.redis = None
        if (
            self.state is not None
            and self.state.supervisor_pid == os.getpid()
            and not self.attached
        ):
            self.state_path.unlink(missing_ok=True)
        self.state = None
