"""The `sim` inference backend: an engine that spends no compute, only simulated time.

It is an `InferenceBackend` like the torch and vLLM ones, so the inference service serves it
(`ETUDE_INFERENCE__BACKEND=sim`) and everything in front of it — Serving's draining updates,
GetLoad, a router — is the real code. What it models, in simulated seconds:

* continuous batching: at most `max_num_seqs` sequences decode at once; a decode step takes
  `decode_step_seconds + decode_step_seconds_per_sequence × running`, and every running
  sequence gains one token per step (the rest wait);
* prefill: prompt tokens not in the prefix cache cost `prefill_seconds_per_token` of the
  engine's time, during which no sequence decodes (a prefill takes the steps it shares with
  decoding, as chunked prefill does); the cache keeps the episodes it served last (LRU, in
  tokens), so a turn sent to the engine that served the episode's previous turn prefills
  only what is new, and one sent elsewhere holds that engine for the whole episode so far;
* weight updates: decoding holds for `parameter_bytes / weight_load_bytes_per_second`; the
  sequences in flight go on under the new version, token by token recorded.

Which turns it writes is the scenario's episode shape for the request's episode
(etude.sim.episodes): tool calls the real parser reads, then `submit` in the last turn.

The engine is a fluid model driven by events (an arrival, a prefill done, a completion, an
update), not a loop per token: 16 engines × 64 sequences cost a few hundred wake-ups per
simulated second.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
from collections import OrderedDict, deque
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field

import torch

from etude.common.toolcalls import ToolCall, render_tool_calls
from etude.inference.types import (
    TURN_SEPARATOR,
    CompletionDelta,
    EngineStats,
    GenerationRequest,
    InferenceError,
    affinity_key,
)
from etude.sim.clock import SimClock
from etude.sim.episodes import ShapeSource
from etude.sim.scenario import EngineModel, Scenario

FILLER_TOKEN = 1
"""The id of every token the sim writes but the stop token: only counts matter."""

_TOOLS = (
    ToolCall("read_file", {"path": "src/module.py"}),
    ToolCall("grep", {"pattern": "def handler"}),
    ToolCall("run_terminal_command", {"command": "pytest -q tests"}),
    ToolCall("list_dir", {"path": "src"}),
)


def behaviour_logprob(version: int) -> float:
    """The logprob the sim reports for a token of `version`: differs between versions, so a
    trajectory that spans an update carries per-token importance weights that differ."""
    return -1.0 - 0.01 * version


def turn_text(tool_calls: int, turn: int) -> str:
    """The calls of one turn as the policy writes them; no calls: the episode submits."""
    if tool_calls == 0:
        return render_tool_calls([ToolCall("submit", {"message": "done"})])
    calls = [_TOOLS[(turn + i) % len(_TOOLS)] for i in range(tool_calls)]
    return render_tool_calls(calls)


def turn_index(request_id: str) -> int:
    """1 for an episode's first turn (`<episode>-t1`), or for a request not named per turn."""
    _, sep, turn = request_id.rpartition(TURN_SEPARATOR)
    return int(turn) if sep and turn.isdigit() else 1


@dataclass(eq=False, slots=True)
class _Sequence:
    request: GenerationRequest
    key: str
    total: int
    """Tokens to write, the stop token included."""
    text: str
    stopped: bool
    """Ends on the request's stop token (not cut by `max_tokens`)."""
    finished: asyncio.Future
    ready_at: float = math.inf
    """Simulated time its prefill ends and decoding begins."""
    done: float = 0.0
    """Tokens written so far (fractional between events)."""
    versions: list[tuple[int, int]] = field(default_factory=list)
    """(first token index, version) of each stretch written under one version."""


class SimBackend:
    name = "sim"

    def __init__(
        self, scenario: Scenario, clock: SimClock, *, tokenizer=None, model_name: str = "sim"
    ) -> None:
        self.model: EngineModel = scenario.engine
        self.clock = clock
        self.shapes = ShapeSource(scenario.episodes, scenario.seed)
        self.model_name = model_name
        self.num_parameters = int(self.model.parameter_bytes // 2)  # bf16
        self.max_model_len = 1 << 22
        self.tokenizer = tokenizer  # only for prompts sent as text; the sim writes ids
        self._version = 0
        self._loading = 0  # the newest version asked for: what tokens decoded next carry
        self._waiting: deque[_Sequence] = deque()
        self._running: list[_Sequence] = []
        self._prefix: OrderedDict[str, int] = OrderedDict()  # episode -> tokens cached
        self._prefix_tokens = 0
        self._held_until = 0.0  # prefills and weight loads hold decoding until then
        self._last = clock.now()
        self._wake = asyncio.Event()
        self._loop_task: asyncio.Task[None] | None = None
        self._closed = False
        self.prompt_tokens = 0
        self.cached_prompt_tokens = 0
        """Prompt tokens served from the prefix cache: `cached / prompt` is its hit rate."""

    # -- InferenceBackend ---------------------------------------------------------------

    @property
    def policy_version(self) -> int:
        return self._version

    @property
    def alive(self) -> bool:
        return not self._closed

    def stats(self) -> EngineStats:
        used = self._prefix_tokens / max(1, self.model.prefix_cache_tokens)
        return EngineStats(
            running=len(self._running), waiting=len(self._waiting),
            kv_cache_usage=min(1.0, used), capacity=self.model.max_num_seqs,
        )  # fmt: skip

    async def generate(self, request: GenerationRequest) -> AsyncIterator[CompletionDelta]:
        if request.sampling.n != 1:
            raise InferenceError("the sim backend writes one completion per request")
        if request.sampling.top_logprobs or request.sampling.prompt_logprobs is not None:
            raise InferenceError("the sim backend computes no logprobs to rank")
        if not request.prompt_token_ids:
            raise InferenceError("prompt_token_ids is empty")
        self._start()
        key = affinity_key(request.request_id)
        turn = turn_index(request.request_id)
        shape = self.shapes.shape(key)
        planned = shape.turns[min(turn, len(shape.turns)) - 1]
        calls = planned.tool_calls if turn < len(shape.turns) else 0
        stop = request.sampling.stop_token_ids[:1]
        wanted = planned.tokens + len(stop)
        total = min(wanted, request.sampling.max_tokens)
        seq = _Sequence(
            request, key, total, turn_text(calls, turn), bool(stop) and total == wanted,
            asyncio.get_running_loop().create_future(),
        )  # fmt: skip
        self._waiting.append(seq)
        self._wake.set()
        try:
            await seq.finished
        finally:
            self._drop(seq)
        yield self._delta(seq, stop)

    async def update_weights(
        self, version: int, tensors: Iterable[tuple[str, torch.Tensor]]
    ) -> int:
        """Hold decoding for the modelled load time; tokens written afterwards carry
        `version`. The tensors are counted, not kept."""
        count = sum(1 for _ in tensors)
        self._start()
        self._advance()
        load = self.model.weight_load_seconds
        now = self.clock.now()
        self._held_until = max(now, self._held_until) + load
        self._loading = version
        for seq in self._running:  # every later token is decoded after the load
            seq.versions.append((math.floor(seq.done), version))
        self._wake.set()
        await self.clock.sleep(self._held_until - now)
        self._version = version
        return count

    async def close(self) -> None:
        self._closed = True
        if self._loop_task is not None:
            self._loop_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._loop_task
        for seq in [*self._waiting, *self._running]:
            if not seq.finished.done():
                seq.finished.set_exception(RuntimeError("the sim engine stopped"))

    # -- the model ------------------------------------------------------------------------

    def _start(self) -> None:
        if self._closed:
            raise RuntimeError("the sim engine is stopped")
        if self._loop_task is None:
            self._last = self.clock.now()
            self._loop_task = asyncio.get_running_loop().create_task(self._run())

    def _delta(self, seq: _Sequence, stop: tuple[int, ...]) -> CompletionDelta:
        n = seq.total
        versions: list[int] = []
        logprobs: list[float] = []
        bounds = [*seq.versions, (n, 0)]
        for (start, version), (end, _) in itertools.pairwise(bounds):
            count = min(end, n) - min(start, n)
            versions += [version] * count
            logprobs += [behaviour_logprob(version)] * count
        tokens = [FILLER_TOKEN] * n
        if seq.stopped:
            tokens[-1] = stop[0]
        return CompletionDelta(
            index=0, token_ids=tokens, logprobs=logprobs,
            policy_versions=versions, text=seq.text if seq.stopped else "",
            finish_reason="stop" if seq.stopped else "length",
        )  # fmt: skip

    def _drop(self, seq: _Sequence) -> None:
        """A sequence cancelled before it finished leaves the engine, what it wrote cached
        (a finished one has left already)."""
        if seq in self._running:
            self._running.remove(seq)
            self._cache(seq.key, len(seq.request.prompt_token_ids) + math.floor(seq.done))
            self._wake.set()
        elif seq in self._waiting:
            self._waiting.remove(seq)

    def _cache(self, key: str, tokens: int) -> None:
        self._prefix_tokens += tokens - self._prefix.pop(key, 0)
        self._prefix[key] = tokens
        while self._prefix_tokens > self.model.prefix_cache_tokens and self._prefix:
            self._prefix_tokens -= self._prefix.popitem(last=False)[1]

    def _advance(self) -> None:
        """Bring every decoding sequence's count up to now."""
        now = self.clock.now()
        start = max(self._last, min(self._held_until, now))
        if now > start:
            decoding = [s for s in self._running if s.ready_at < now]
            step = self.model.step_seconds(len(decoding))
            for seq in decoding:
                seq.done = min(seq.total, seq.done + (now - max(start, seq.ready_at)) / step)
        self._last = now

    def _admit(self, now: float) -> None:
        while self._waiting and len(self._running) < self.model.max_num_seqs:
            seq = self._waiting.popleft()
            prompt = len(seq.request.prompt_token_ids)
            cached = self._prefix.get(seq.key, 0)
            cached = cached if cached <= prompt else 0
            self.prompt_tokens += prompt
            self.cached_prompt_tokens += cached
            if seq.key in self._prefix:
                self._prefix.move_to_end(seq.key)
            prefill = (prompt - cached) * self.model.prefill_seconds_per_token
            self._held_until = max(now, self._held_until) + prefill
            seq.ready_at = self._held_until
            seq.versions.append((0, self._loading))
            self._running.append(seq)

    def _next_event(self, now: float) -> float:
        """Simulated seconds until something changes by itself."""
        if now < self._held_until:
            return self._held_until - now
        decoding = sum(1 for s in self._running if s.ready_at <= now)
        step = self.model.step_seconds(decoding)
        soonest = math.inf
        for seq in self._running:
            if seq.ready_at > now:
                soonest = min(soonest, seq.ready_at - now)
            else:
                soonest = min(soonest, (seq.total - seq.done) * step)
        return soonest

    async def _run(self) -> None:
        while True:
            self._advance()
            now = self.clock.now()
            for seq in [s for s in self._running if s.done >= s.total - 1e-9]:
                seq.done = seq.total
                self._running.remove(seq)
                self._cache(seq.key, len(seq.request.prompt_token_ids) + seq.total)
                if not seq.finished.done():
                    seq.finished.set_result(None)
            self._admit(now)
            self._wake.clear()
            wait = self._next_event(now)
            timer = None
            if not math.isinf(wait):
                later = self.clock.real_seconds(wait)
                timer = asyncio.get_running_loop().call_later(later, self._wake.set)
            await self._wake.wait()
            if timer is not None:
                timer.cancel()
