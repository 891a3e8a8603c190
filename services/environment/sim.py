"""The `sim` environment: sessions and tool calls that cost simulated time and touch no
file. A batch of calls runs in parallel (it takes as long as its slowest call); each call's
latency is drawn from the scenario's per-tool spread and its output is as many words as
the scenario's tool-output spread says. The tools are the real catalog, so the policy's
prompt and the parser are the ones a real run uses. It meets the environment's client
interface: the simulated fleet calls it in process, and the environment service serves it
over gRPC with `ETUDE_ENVIRONMENT__BACKEND=sim`."""

from __future__ import annotations

import itertools

from etude.common.toolcalls import ToolCall
from etude.environment.tools import tool_catalog
from etude.environment.types import (
    ExecutedCall,
    OpenedSession,
    SessionNotFoundError,
    ToolCatalog,
    ToolOutput,
    WorkspaceDiff,
)
from etude.sim.clock import SimClock
from etude.sim.episodes import ShapeSource
from etude.sim.scenario import Scenario, seeded


class SimEnvironment:
    def __init__(self, scenario: Scenario, clock: SimClock) -> None:
        self.scenario = scenario
        self.clock = clock
        self.shapes = ShapeSource(scenario.episodes, scenario.seed)
        self._sessions: dict[str, int] = {}  # session id -> calls run
        self._opened: dict[str, float] = {}
        self._ids = itertools.count(1)
        self.episode_seconds: list[float] = []
        """Simulated time from opening each closed session to closing it (after scoring):
        the episode's duration as the rollout worker lives it."""

    async def create_session(
        self,
        task_id: str,
        repository_path: str,
        idle_ttl_seconds: float = 0,
        *,
        python_environment: str = "",
    ) -> OpenedSession:
        session_id = f"sim-{next(self._ids)}"
        opened = self.clock.now()
        await self.clock.sleep(
            self.scenario.session_seconds.draw(seeded(self.scenario.seed, session_id))
        )
        self._sessions[session_id] = 0
        self._opened[session_id] = opened
        return OpenedSession(session_id, "copy", "sim")

    async def execute(
        self, session_id: str, calls: list[ToolCall], parallel: bool = True
    ) -> list[ExecutedCall]:
        if session_id not in self._sessions:
            raise SessionNotFoundError(f"no session {session_id!r}")
        first = self._sessions[session_id]
        self._sessions[session_id] += len(calls)
        latencies = [
            self.scenario.tools.draw(call.name, seeded(self.scenario.seed, session_id, first + i))
            for i, call in enumerate(calls)
        ]
        await self.clock.sleep(max(latencies, default=0.0) if parallel else sum(latencies))
        return [
            ExecutedCall(call.id, call.name, self._output(call, session_id, first + i), seconds)
            for i, (call, seconds) in enumerate(zip(calls, latencies, strict=True))
        ]

    def _output(self, call: ToolCall, session_id: str, index: int) -> ToolOutput:
        if call.name == "submit":
            return ToolOutput("submitted", ends_episode=True)
        words = self.shapes.tool_output_tokens(f"{session_id}/{index}")
        return ToolOutput(" ".join(["line"] * words))

    async def fork(self, session_id: str) -> str:
        if session_id not in self._sessions:
            raise SessionNotFoundError(f"no session {session_id!r}")
        forked = f"sim-{next(self._ids)}"
        self._sessions[forked] = 0
        return forked

    async def diff(self, session_id: str) -> WorkspaceDiff:
        if session_id not in self._sessions:
            raise SessionNotFoundError(f"no session {session_id!r}")
        return WorkspaceDiff("", [])

    async def close_session(self, session_id: str) -> None:
        if self._sessions.pop(session_id, None) is None:
            raise SessionNotFoundError(f"no session {session_id!r}")
        opened = self._opened.pop(session_id, None)
        if opened is not None:
            self.episode_seconds.append(self.clock.now() - opened)

    @property
    def catalog(self) -> ToolCatalog:
        """The real tool catalog, which the policy's prompt documents."""
        return tool_catalog()

    async def list_tools(self) -> ToolCatalog:
        return self.catalog

    @property
    def open_sessions(self) -> int:
        return len(self._sessions)
