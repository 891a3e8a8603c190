"""Which inference engine generates each turn: load-aware, prefix-keeping, version-gated.

A rollout worker reaches several engines (a local stack's, `--ray`'s actors, a cluster's
inference workers). Round robin over them ignores two things that decide tail latency in
multi-turn episodes: how busy each engine is, and which engine already holds an episode's
context in its prefix cache (a turn sent elsewhere prefills the whole episode again). The
router, per request:

1. **Admission.** Only engines serving the current policy version are eligible: the newest
   version any engine reports. An engine that is new, restarted or behind takes no request
   until it has loaded the current weights (the trainer's next publication sends them).
2. **Affinity.** The turns of an episode (`etude.inference.types.affinity_key`) go to the
   engine that served its previous turn, while that engine is not overloaded: its
   outstanding sequences below `overload × capacity`, or no engine `spill_margin` (of a
   capacity) less busy.
3. **Least load.** Otherwise the admitted engine with the least outstanding work relative
   to its capacity.

Load and version come from the engines (GetLoad), polled every `refresh_seconds`, plus the
requests this router sent since an engine's last report (so a burst between two reports
spreads instead of piling onto one engine). `strategy="round_robin"` keeps admission and
drops the rest: the baseline the simulated fleet compares against.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from etude.inference.types import CompletionDelta, EngineLoad, GenerationRequest, affinity_key
from etude.rollout import metrics

log = logging.getLogger(__name__)


class NoEngineError(RuntimeError):
    """No engine has served the current policy version for `admission_timeout` seconds."""


class Engine(Protocol):
    """An inference endpoint: GrpcInference, or InProcessInference in this process."""

    def generate(self, request: GenerationRequest) -> AsyncIterator[CompletionDelta]: ...

    async def get_load(self) -> EngineLoad: ...


@dataclass(eq=False, slots=True)
class _Engine:
    name: str
    client: Engine
    report: EngineLoad | None = None
    """Its last GetLoad; None until it answers (or after it failed)."""
    sent_since_report: int = 0
    in_flight: int = 0
    """This router's requests on it now."""
    admitted: bool = False

    @property
    def outstanding(self) -> int:
        reported = self.report.outstanding if self.report else 0
        return max(reported + self.sent_since_report, self.in_flight)

    @property
    def capacity(self) -> int:
        return max(1, self.report.capacity if self.report else 1)

    @property
    def pressure(self) -> float:
        return self.outstanding / self.capacity


class Router:
    def __init__(
        self,
        engines: Sequence[Engine],
        *,
        names: Sequence[str] | None = None,
        strategy: Literal["load_aware", "round_robin"] = "load_aware",
        overload: float = 1.0,
        spill_margin: float = 0.25,
        refresh_seconds: float = 0.05,
        admission_timeout: float = 120.0,
        remembered_episodes: int = 100_000,
    ) -> None:
        if not engines:
            raise ValueError("a router needs at least one engine")
        names = names or [f"engine-{i}" for i in range(len(engines))]
        self.engines = [_Engine(n, c) for n, c in zip(names, engines, strict=True)]
        self.strategy = strategy
        self.overload = overload
        self.spill_margin = spill_margin
        self.refresh_seconds = refresh_seconds
        self.admission_timeout = admission_timeout
        self.remembered_episodes = remembered_episodes
        self.current_version = -1
        self._affinity: OrderedDict[str, _Engine] = OrderedDict()
        self._turn = itertools.count()
        self._refresher: asyncio.Task[None] | None = None
        self._admitted = asyncio.Event()
        self.decisions: dict[str, int] = {}
        """Requests routed by decision: affinity (to the engine holding the prefix), spilled
        (it was overloaded or not admitted), least_loaded (a first turn), round_robin."""
        self.admissions = 0

    # -- membership --------------------------------------------------------------------------

    def add_engine(self, name: str, client: Engine) -> None:
        """A new (or restarted) engine: it takes requests once it reports the current
        version (the trainer's next publication brings it up to date)."""
        if any(e.name == name for e in self.engines):
            raise ValueError(f"engine {name!r} is already routed to")
        self.engines.append(_Engine(name, client))

    def remove_engine(self, name: str) -> Engine:
        """An engine that went away; its requests in flight finish or fail on their own."""
        engine = next((e for e in self.engines if e.name == name), None)
        if engine is None:
            raise KeyError(f"no engine {name!r}")
        self.engines.remove(engine)
        for key in [k for k, e in self._affinity.items() if e is engine]:
            del self._affinity[key]
        return engine.client

    @property
    def names(self) -> list[str]:
        return [e.name for e in self.engines]

    # -- engine reports --------------------------------------------------------------------

    async def refresh(self) -> None:
        """Ask every engine for its load and version; admit those on the current version."""
        reports = await asyncio.gather(
            *(e.client.get_load() for e in self.engines), return_exceptions=True
        )
        for engine, report in zip(self.engines, reports, strict=True):
            if isinstance(report, BaseException):
                if engine.report is not None:
                    log.warning("engine %s did not report its load: %s", engine.name, report)
                engine.report = None
            else:
                engine.report = report
            engine.sent_since_report = 0
        versions = [e.report.version for e in self.engines if e.report is not None]
        self.current_version = max(versions, default=self.current_version)
        for engine in self.engines:
            admitted = engine.report is not None and engine.report.version >= self.current_version
            if admitted and not engine.admitted:
                self.admissions += 1
                metrics.ROUTER_ADMISSIONS.inc()
            engine.admitted = admitted
            load = engine.report.outstanding if engine.report else 0
            metrics.ENGINE_OUTSTANDING.labels(engine.name).set(load)
        if any(e.admitted for e in self.engines):
            self._admitted.set()
        else:
            self._admitted.clear()

    async def _refresh_forever(self) -> None:
        while True:
            await asyncio.sleep(self.refresh_seconds)
            try:
                await self.refresh()
            except Exception:  # one bad round must not stop routing
                log.exception("refreshing engine loads failed")

    def _start(self) -> None:
        if self._refresher is None:
            self._refresher = asyncio.get_running_loop().create_task(self._refresh_forever())

    async def close(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._refresher
            self._refresher = None

    async def policy_version(self) -> int:
        """The version the admitted engines serve (-1 before any engine has answered)."""
        if self._refresher is None:
            await self.refresh()
            self._start()
        return self.current_version

    # -- routing ---------------------------------------------------------------------------

    def choose(self, key: str) -> _Engine | None:
        """The engine for a request of episode `key`; None while no engine is admitted."""
        admitted = [e for e in self.engines if e.admitted]
        if not admitted:
            return None
        if self.strategy == "round_robin":
            return self._decide(admitted[next(self._turn) % len(admitted)], "round_robin")
        start = next(self._turn) % len(admitted)  # ties go round, not to the first engine
        rotated = admitted[start:] + admitted[:start]
        least = min(rotated, key=lambda e: e.pressure)
        previous = self._affinity.get(key)
        if previous is None:
            return self._decide(least, "least_loaded")
        if previous.admitted and not self._overloaded(previous, least):
            return self._decide(previous, "affinity")
        return self._decide(least, "spilled")

    def _overloaded(self, engine: _Engine, least: _Engine) -> bool:
        """Full (`overload` × capacity outstanding) while another engine is clearly less
        busy: leaving the prefix behind then costs less than queueing behind the others
        (when every engine is full, moving would only add a prefill)."""
        return (
            engine.pressure >= self.overload
            and least.pressure <= engine.pressure - self.spill_margin
        )

    def _decide(self, engine: _Engine, decision: str) -> _Engine:
        self.decisions[decision] = self.decisions.get(decision, 0) + 1
        metrics.ROUTER_DECISIONS.labels(decision).inc()
        return engine

    def _remember(self, key: str, engine: _Engine) -> None:
        self._affinity[key] = engine
        self._affinity.move_to_end(key)
        while len(self._affinity) > self.remembered_episodes:
            self._affinity.popitem(last=False)

    async def _engine_for(self, key: str) -> _Engine:
        self._start()
        deadline = time.monotonic() + self.admission_timeout
        while (engine := self.choose(key)) is None:
            if time.monotonic() > deadline:
                raise NoEngineError(
                    f"no engine has served policy version {self.current_version} for"
                    f" {self.admission_timeout:.0f} s"
                )
            await self.refresh()
            if not self._admitted.is_set():
                await asyncio.sleep(self.refresh_seconds)
        return engine

    async def generate(self, request: GenerationRequest) -> AsyncIterator[CompletionDelta]:
        key = affinity_key(request.request_id)
        engine = await self._engine_for(key)
        self._remember(key, engine)
        engine.sent_since_report += 1
        engine.in_flight += 1
        try:
            async for delta in engine.client.generate(request):
                yield delta
        finally:
            engine.in_flight -= 1
