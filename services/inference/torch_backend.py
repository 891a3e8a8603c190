"""The `torch` backend: `TorchEngine` stepped by one background thread, behind the async
`InferenceBackend` interface.

A step that raises fails the requests in flight (each caller gets `EngineFault`), frees
their cache slots and the engine goes on serving: one bad batch must not take the service
down while its health check still says SERVING."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterable
from pathlib import Path

import torch

from etude.inference.engine import EngineConfig, TorchEngine
from etude.inference.types import (
    CompletionDelta,
    EngineDeadError,
    EngineFault,
    EngineStats,
    GenerationRequest,
    InferenceError,
    coalesce,
)
from etude.model.checkpoint import from_pretrained
from etude.model.model import Transformer
from etude.model.tokenizer import load_tokenizer

log = logging.getLogger(__name__)


class _Inbox:
    """Deltas from the engine thread to one request's caller. The engine thread wakes the
    caller's event loop only when the inbox was empty, and the caller takes everything that
    arrived at once: a wake-up per token and sequence (1,600 for 16 completions of 100
    tokens) cost more than the decoding itself on 2 cores."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._items: list[CompletionDelta | BaseException] = []
        self._lock = threading.Lock()
        self._ready = asyncio.Event()

    def put(self, item: CompletionDelta | BaseException) -> None:  # engine thread
        with self._lock:
            self._items.append(item)
            first = len(self._items) == 1
        if first:
            self._loop.call_soon_threadsafe(self._ready.set)

    async def take_all(self) -> list[CompletionDelta | BaseException]:
        while True:
            await self._ready.wait()
            self._ready.clear()  # a wake-up scheduled before this take may still set it
            with self._lock:
                items, self._items = self._items, []
            if items:
                return items


class TorchBackend:
    name = "torch"

    def __init__(
        self,
        model: Transformer,
        tokenizer,
        config: EngineConfig | None = None,
        model_name: str = "model",
    ) -> None:
        self.engine = TorchEngine(model, tokenizer, config)
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.num_parameters = model.num_parameters
        self.max_model_len = self.engine.max_model_len
        self._wake = threading.Event()
        self._stopping = False
        self._error: BaseException | None = None
        # Requests in flight, and how to tell each that the engine failed it.
        self._failures: dict[str, Callable[[BaseException], None]] = {}
        self._failures_lock = threading.Lock()  # the engine thread reads it
        self._thread = threading.Thread(target=self._loop, name="torch-engine", daemon=True)
        self._thread.start()

    @classmethod
    def load(
        cls,
        source: str | Path,
        *,
        tokenizer: str | Path | None = None,
        dtype: str | None = None,
        seed: int = 0,
        config: EngineConfig | None = None,
        precision: str = "default",
    ) -> TorchBackend:
        """A preset (fresh weights from `seed`, the bundled tokenizer) or a checkpoint
        directory (its own tokenizer unless `tokenizer` names another)."""
        path = Path(source)
        tok = load_tokenizer(tokenizer or (path if path.is_dir() else None))
        model = from_pretrained(source, vocab_size=len(tok), seed=seed, dtype=dtype)
        if precision == "mxfp8":
            from etude.kernels.mx_training import set_precision

            set_precision(model, "mxfp8")
        if model.config.eos_token_id is None:
            model.config.eos_token_id = tok.eos_token_id
        return cls(model, tok, config, model_name=path.name if path.is_dir() else str(source))

    @property
    def policy_version(self) -> int:
        return self.engine.version

    def stats(self) -> EngineStats:
        return self.engine.stats()

    async def generate(self, request: GenerationRequest) -> AsyncIterator[CompletionDelta]:
        self._raise_if_dead()
        inbox = _Inbox(asyncio.get_running_loop())
        request_id = request.request_id
        # The engine keys its state by request id: a second request under a live id would
        # take over the first one's entry and leak its cache slots.
        with self._failures_lock:
            if request_id in self._failures:
                raise InferenceError(f"request id {request_id!r} is already in flight")
            self._failures[request_id] = inbox.put
        remaining = 0
        try:
            self.engine.add_request(request, inbox.put)
            remaining = request.sampling.n
            self._wake.set()
            while remaining:
                arrived = await inbox.take_all()
                failure = next((d for d in arrived if isinstance(d, BaseException)), None)
                if failure is not None:
                    remaining = 0  # the engine has already ended the request
                    raise EngineFault(f"the engine failed this request: {failure!r}") from failure
                for delta in coalesce(arrived):
                    if delta.finish_reason is not None:
                        remaining -= 1
                    yield delta
        finally:
            with self._failures_lock:
                self._failures.pop(request_id, None)
            if remaining:  # the caller stopped listening: free the request's cache slots
                self.engine.abort(request_id)
                self._wake.set()

    async def update_weights(self, version: int, tensors: Iterable[tuple[str, torch.Tensor]]):
        self._raise_if_dead()
        loop = asyncio.get_running_loop()
        finished: asyncio.Future[int] = loop.create_future()

        def done(result) -> None:  # engine thread
            setter = (
                finished.set_exception
                if isinstance(result, BaseException)
                else (finished.set_result)
            )
            loop.call_soon_threadsafe(setter, result)

        self.engine.queue_weight_update(version, tensors, done)
        self._wake.set()
        return await finished

    async def close(self) -> None:
        self._stopping = True
        self._wake.set()
        await asyncio.to_thread(self._thread.join)
        self.engine.cancel_all()  # callers still waiting get a "cancelled" ending

    def _loop(self) -> None:
        while not self._stopping:
            if not self.engine.has_work():
                self._wake.wait()
                self._wake.clear()
                continue
            try:
                self.engine.step()
            except Exception as error:
                self._fail_in_flight(error)
            except BaseException as error:  # the thread itself is ending: refuse requests
                self._error = error
                # The requests in flight fail too, rather than end as if cancelled.
                self._fail_in_flight(EngineDeadError(f"the torch engine died: {error!r}"))
                raise

    def _fail_in_flight(self, error: Exception) -> None:
        """Fail every request the failed step may have touched, free their slots, carry on."""
        log.exception("the torch engine's step failed; failing the requests in flight")
        with self._failures_lock:
            failures = list(self._failures.values())
        for fail in failures:
            fail(error)  # queued before the "cancelled" endings below, so it is seen first
        self.engine.cancel_all()

    @property
    def alive(self) -> bool:
        return self._error is None

    def _raise_if_dead(self) -> None:
        if self._error is not None:
            raise EngineDeadError(f"the torch engine died: {self._error!r}") from self._error
