"""The torch engine's core: continuous batching over a slot KV cache, on the model the
trainer runs. It is synchronous and single-threaded — `step()` admits waiting requests
(one padded prefill), decodes every running sequence by one token (one batched forward),
and hands out deltas. `etude.inference.torch_backend` drives it from a thread.

Weight updates and aborts are queued and applied at the start of a step, i.e. between two
decode steps: requests in flight continue, and every token records the policy version it
was sampled under. An update may carry any subset of the tensors (checkpoint names); the rest
keep their values.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from etude.inference.backend import Tokenizer
from etude.inference.finite import all_finite
from etude.inference.sampling import sample, sequence_generator, top_logprobs
from etude.inference.types import (
    CompletionDelta,
    EngineStats,
    GenerationRequest,
    InferenceError,
    SamplingParams,
    validate_request,
)
from etude.model.kv_cache import CacheBatch, KVCache
from etude.model.model import Transformer
from etude.model.state_dict_adapter import StateDictAdapter

DeltaSink = Callable[[CompletionDelta], None]


@dataclass(kw_only=True, slots=True)
class EngineConfig:
    max_num_seqs: int = 32
    """Sequences decoded together (KV-cache slots); n completions take n slots."""
    max_model_len: int = 4096
    """Prompt plus completion, in tokens."""
    max_prefill_tokens: int = 8192
    """Padded prompt tokens one step may prefill, bounding the stall of running decodes."""


@dataclass(slots=True)
class _Sequence:
    index: int
    slot: int
    tokens: list[int]
    generator: torch.Generator
    num_generated: int = 0
    text: str = ""
    sent_text: int = 0
    finished: bool = False


@dataclass(slots=True)
class _Request:
    request: GenerationRequest
    sink: DeltaSink
    sequences: list[_Sequence] = field(default_factory=list)

    @property
    def params(self) -> SamplingParams:
        return self.request.sampling


@dataclass(slots=True)
class _WeightUpdate:
    version: int
    tensors: list[tuple[str, torch.Tensor, int | None]]
    done: Callable[[int | BaseException], None]


class TorchEngine:
    def __init__(
        self, model: Transformer, tokenizer: Tokenizer, config: EngineConfig | None = None
    ) -> None:
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.config = config or EngineConfig()
        self.max_model_len = min(self.config.max_model_len, model.config.max_position_embeddings)
        dtype = next(model.parameters()).dtype
        device = next(model.parameters()).device
        self.cache = KVCache(
            model.config, self.config.max_num_seqs, self.max_model_len, dtype=dtype, device=device
        )
        self.free_slots = list(range(self.config.max_num_seqs))
        self.waiting: deque[_Request] = deque()
        self.running: dict[str, _Request] = {}
        self.version = 0
        self._lock = threading.Lock()  # guards the queues below, shared with other threads
        self._new: deque[_Request] = deque()
        self._aborts: set[str] = set()
        self._updates: deque[_WeightUpdate] = deque()
        self._adapter = StateDictAdapter(model.config)
        # Every name, shared ones included: with tied embeddings `lm_head.weight` is the
        # embedding's parameter under a second name, and a trainer's state_dict sends both.
        self._parameters = dict(model.named_parameters(remove_duplicate=False))

    # -- called from any thread ---------------------------------------------------------

    def add_request(self, request: GenerationRequest, sink: DeltaSink) -> None:
        self.validate(request)
        with self._lock:
            self._new.append(_Request(request, sink))

    def abort(self, request_id: str) -> None:
        with self._lock:
            self._aborts.add(request_id)

    def queue_weight_update(
        self,
        version: int,
        tensors: Iterable[tuple[str, torch.Tensor]],
        done: Callable[[int | BaseException], None],
    ) -> None:
        """Check names and shapes now (a bad update changes nothing), apply between steps."""
        staged = []
        for name, tensor, expert in self._adapter.iter_from_hf(tensors):
            param = self._parameters.get(name)
            if param is None:
                raise InferenceError(f"the model has no tensor {name!r}")
            target = param[expert] if expert is not None else param
            if tuple(tensor.shape) != tuple(target.shape):
                raise InferenceError(
                    f"{name}: shape {tuple(tensor.shape)} != the model's {tuple(target.shape)}"
                )
            if not all_finite(tensor):
                # NaN weights make every later sampling step fail: refuse them here.
                raise InferenceError(f"{name} holds NaN or infinite values")
            staged.append((name, tensor, expert))
        with self._lock:
            self._updates.append(_WeightUpdate(version, staged, done))

    def has_work(self) -> bool:
        with self._lock:
            pending = bool(self._new or self._aborts or self._updates)
        return pending or bool(self.waiting or self.running)

    def stats(self) -> EngineStats:
        with self._lock:
            new = len(self._new)
        used = self.config.max_num_seqs - len(self.free_slots)
        return EngineStats(
            running=len(self.running),
            waiting=len(self.waiting) + new,
            kv_cache_usage=used / self.config.max_num_seqs,
            capacity=self.config.max_num_seqs,
        )

    def validate(self, request: GenerationRequest) -> None:
        validate_request(request, max_model_len=self.max_model_len,
                         vocab_size=self.model.config.vocab_size,
                         max_n=self.config.max_num_seqs)  # fmt: skip

    # -- the engine thread --------------------------------------------------------------

    @torch.no_grad()
    def step(self) -> None:
        self._apply_control()
        self._prefill(self._admit())
        self._decode()

    def _apply_control(self) -> None:
        with self._lock:
            self.waiting.extend(self._new)
            self._new.clear()
            aborts, self._aborts = self._aborts, set()
            updates = list(self._updates)
            self._updates.clear()
        for request_id in aborts:
            self._cancel(request_id)
        for update in updates:
            try:
                for name, tensor, expert in update.tensors:
                    param = self._parameters[name]
                    (param[expert] if expert is not None else param).copy_(tensor)
                self.version = update.version
                update.done(len(update.tensors))
            except Exception as error:  # reported to the caller, the engine keeps serving
                update.done(error)

    def cancel_all(self) -> None:
        """End every request (the engine is stopping or has failed)."""
        with self._lock:
            self.waiting.extend(self._new)
            self._new.clear()
        for request_id in {r.request.request_id for r in (*self.waiting, *self.running.values())}:
            self._cancel(request_id)

    def _cancel(self, request_id: str) -> None:
        for state in [r for r in self.waiting if r.request.request_id == request_id]:
            self.waiting.remove(state)
            for index in range(state.params.n):
                state.sink(CompletionDelta(index=index, finish_reason="cancelled"))
        state = self.running.get(request_id)
        if state is not None:
            for seq in state.sequences:
                if not seq.finished:
                    self._finish(state, seq, "cancelled", CompletionDelta(index=seq.index))

    def _admit(self) -> list[_Request]:
        admitted, budget = [], self.config.max_prefill_tokens
        longest = 0
        while self.waiting:
            state = self.waiting[0]
            longest_if = max(longest, len(state.request.prompt_token_ids))
            if state.params.n > len(self.free_slots):
                break
            if admitted and longest_if * (len(admitted) + 1) > budget:
                break
            self.waiting.popleft()
            longest = longest_if
            prompt = list(state.request.prompt_token_ids)
            seed = state.params.seed
            for index in range(state.params.n):
                generator = sequence_generator(seed, index, self._device)
                slot = self.free_slots.pop()
                state.sequences.append(_Sequence(index, slot, list(prompt), generator))
            self.running[state.request.request_id] = state
            admitted.append(state)
        return admitted

    def _prefill(self, admitted: list[_Request]) -> None:
        """One right-padded forward over the new prompts; a request's n completions then
        copy its cache prefix and sample their first tokens from the same logits."""
        if not admitted:
            return
        prompts = [list(s.request.prompt_token_ids) for s in admitted]
        width = max(map(len, prompts))
        padded = [prompt + [0] * (width - len(prompt)) for prompt in prompts]
        device = self._device
        tokens = torch.tensor(padded, device=device)
        slots = torch.tensor([s.sequences[0].slot for s in admitted], device=device)
        starts = torch.zeros(len(prompts), dtype=torch.long, device=device)
        last = torch.tensor([row * width + len(p) - 1 for row, p in enumerate(prompts)],
                            device=device)  # fmt: skip
        logits = self.model(tokens, cache=CacheBatch(self.cache, slots, starts, width),
                            logits_at=last).logits  # fmt: skip
        rows, owners = [], []
        for row, state in enumerate(admitted):
            first = state.sequences[0]
            others = [seq.slot for seq in state.sequences[1:]]
            self.cache.copy_prefix(first.slot, others, len(prompts[row]))
            rows.extend([row] * len(state.sequences))
            owners.extend((state, seq) for seq in state.sequences)
        scored = {
            state.request.request_id: self._prompt_logprobs(prompts[row], state.params)
            for row, state in enumerate(admitted)
            if state.params.prompt_logprobs is not None
        }
        self._sample_and_emit(logits[torch.tensor(rows, device=self._device)], owners, scored)

    def _prompt_logprobs(self, prompt: list[int], params: SamplingParams):
        """Each prompt token's logprob given the tokens before it, with the
        `params.prompt_logprobs` likeliest alternatives: one forward over the prompt without
        the cache, paid only by the (rare) requests that ask."""
        tokens = torch.tensor([prompt], device=self._device)
        logprobs_TV = self.model(tokens).logits[0, :-1].float().log_softmax(-1)
        scored: list[dict[int, float] | None] = [None]
        for position, token in enumerate(prompt[1:]):
            row = logprobs_TV[position]
            scored.append({**top_logprobs(row, params.prompt_logprobs), token: float(row[token])})
        return scored

    def _decode(self) -> None:
        owners = [
            (state, seq)
            for state in self.running.values()
            for seq in state.sequences
            if not seq.finished and seq.num_generated > 0
        ]
        if not owners:
            return
        tokens = torch.tensor([[seq.tokens[-1]] for _, seq in owners], device=self._device)
        slots = torch.tensor([seq.slot for _, seq in owners], device=self._device)
        starts = torch.tensor([len(seq.tokens) - 1 for _, seq in owners], device=self._device)
        logits = self.model(tokens, cache=CacheBatch(self.cache, slots, starts, 1)).logits
        self._sample_and_emit(logits[:, 0], owners)

    def _sample_and_emit(
        self, logits, owners: list[tuple[_Request, _Sequence]], prompt_logprobs=None
    ) -> None:
        # Only penalised sequences need their tokens split: no copy per token for the rest.
        histories = [
            (seq.tokens[: len(prompt)], seq.tokens[len(prompt) :]) if state.params.penalised
            else None
            for state, seq in owners
            for prompt in [state.request.prompt_token_ids]
        ]  # fmt: skip
        tokens, logprobs, alternatives = sample(
            logits, [state.params for state, _ in owners], [seq.generator for _, seq in owners],
            histories,
        )  # fmt: skip
        for (state, seq), token, logprob, top in zip(
            owners, tokens, logprobs, alternatives, strict=True
        ):
            seq.tokens.append(token)
            seq.num_generated += 1
            delta = CompletionDelta(
                index=seq.index,
                token_ids=[token],
                logprobs=[logprob],
                top_logprobs=[top] if state.params.top_logprobs else [],
                prompt_logprobs=(prompt_logprobs or {}).get(state.request.request_id),
                policy_versions=[self.version],
            )
            reason = self._update_text(state, seq, token)
            if reason is None and seq.num_generated >= state.params.max_tokens:
                reason = "length"
            if reason is None and len(seq.tokens) >= self.max_model_len:
                reason = "length"
            # Hold back a tail that could be the start of a stop string: it is cut if the
            # stop string completes, and a client must never have seen it.
            hold = 0 if reason else max((len(s) for s in state.params.stop), default=1) - 1
            end = max(seq.sent_text, len(seq.text) - hold)
            delta.text, seq.sent_text = seq.text[seq.sent_text : end], end
            if reason is None:
                state.sink(delta)
            else:
                self._finish(state, seq, reason, delta)

    def _update_text(self, state: _Request, seq: _Sequence, token: int) -> str | None:
        """Decode the completion so far; end it at EOS or at a stop string (cut from the
        text; the tokens stay as sampled)."""
        if token == self.tokenizer.eos_token_id and not state.params.ignore_eos:
            return "stop"
        if token in state.params.stop_token_ids:
            return "stop"
        text = self.tokenizer.decode(seq.tokens[len(state.request.prompt_token_ids) :])
        if text.endswith("\ufffd"):  # an incomplete UTF-8 character: wait for its bytes
            return None
        searched_from = max(0, len(seq.text) - max((len(s) for s in state.params.stop), default=0))
        seq.text = text
        for stop in state.params.stop:
            at = text.find(stop, searched_from)
            if at >= 0:
                seq.text = text[:at]
                return "stop"
        return None

    def _finish(self, state: _Request, seq: _Sequence, reason: str, delta: CompletionDelta):
        seq.finished = True
        delta.finish_reason = reason
        self.free_slots.append(seq.slot)
        state.sink(delta)
        if all(s.finished for s in state.sequences):
            self.running.pop(state.request.request_id, None)

    @property
    def _device(self) -> torch.device:
        return self.cache.keys[0].device
