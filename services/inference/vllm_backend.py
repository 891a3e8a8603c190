"""The `vllm` inference backend: vLLM's v1 `AsyncLLM` over a Hugging Face checkpoint directory.

Processes. `AsyncLLM` always runs vLLM's `EngineCore` (scheduler, KV cache, model) in a child
process and talks to it over ZMQ; this module sets ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` (unless
already set) so that the model worker runs inside that child instead of in a third process.
Scripts that start a backend therefore need an ``if __name__ == "__main__":`` guard. Starting
takes ~10 s on a CPU, most of it the child importing vLLM; `start` blocks the event loop
meanwhile.

Numerics. Logprobs are vLLM's ``raw_logprobs``: log_softmax of the model's logits before
temperature, top-k or top-p, which is what the trainer recomputes. Sampled tokens are
reproducible per request when `SamplingParams.seed` is set (completion ``i`` of ``n`` uses
``seed + i``), whatever else runs alongside.

Weight updates (`update_weights`). The scheduler is paused between two steps (vLLM's
``pause_generation(mode="keep")``), the tensors are loaded in place by vLLM's layerwise
``reload_weights`` in the worker, the new version is labelled in the engine, and the scheduler
resumes. Requests in flight stay queued; the pause also empties the KV and prefix caches
(running requests are preempted and recomputed), so no token after the update is conditioned
on a cache computed with the old weights. Each token carries the version of the weights that
sampled it as vLLM labelled the engine step (``weight_version``), not the version current when
it reached us: tokens sampled just before an update often arrive after it. The labels are read
from vLLM's client-side request state (``output_processor``), an internal of vLLM 0.32 that a
vLLM upgrade must re-check (the tests do); request ids must be unique among those in flight.

vLLM 0.32's reload does not redo the CPU MoE kernel's weight packing: on a reload
`UnquantizedFusedMoEMethod` copies the new experts into the packed parameters in checkpoint
layout and skips ``fused_experts.process_weights_after_loading`` (the prepack), so an MoE
model's logprobs are off (by 0.1 to 2 nats on the tests' tiny model) until its experts are
packed again. GPU expert kernels have nothing to redo there.
`_WorkerExtension.etude_reload_weights` re-runs that packing (`cpu_prepack_moe_weight`, the
same op the first load runs) on every CPU MoE layer after the reload, which makes an update
exact: logprobs after an update equal those of an engine started from the new checkpoint.
The same holds for a tied LM head (Llama, SmolLM2): the CPU GEMM multiplies by a packed copy
of the embedding that the reload does not refresh, so an update that carries the embedding
repacks the head (`_repack_tied_lm_head`).
Limitation: that repair needs ``moe_intermediate_size`` to be a multiple of the CPU kernel's
alignment (32; every Qwen3-MoE release is), since vLLM pads other sizes at load time and its
reload cannot copy unpadded experts into padded parameters; such a model is refused at
update time, before any weight changes. Weights travel to the engine process in parts of
at most `UPDATE_PART_BYTES`, each a safetensors blob over vLLM's RPC loaded before the next is
packed, all inside one pause: neither process ever holds a blob of the whole model (an update
of SmolLM2-135M in fp32 is 540 MB; one blob cost that three times over in the engine and once
more in the service). A part holds whole layers: vLLM's layerwise reload processes a layer
once all of its tensors arrived and would process a partly loaded one with the rest unset.

Stats come from vLLM's scheduler (running, waiting, KV cache usage), recorded by a stat logger
on every engine step; with stats on, vLLM also registers its ``vllm:*`` Prometheus metrics in
the default registry. On CPU the KV cache is ``kv_cache_memory_bytes`` when given, else
``gpu_memory_utilization`` of the NUMA node's memory minus what the worker already uses; the
legacy ``VLLM_CPU_KVCACHE_SPACE`` variable (GiB), when set, overrides both.
"""

from __future__ import annotations

import asyncio
import gc
import math
import os
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

# Before anything of vLLM runs; the engine process it starts inherits the environment.
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")

import torch
from safetensors import safe_open
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors
from transformers import AutoTokenizer
from vllm import SamplingParams as VllmSamplingParams
from vllm.engine.arg_utils import AsyncEngineArgs
from vllm.inputs import TokensPrompt
from vllm.sampling_params import RequestOutputKind
from vllm.v1.engine.async_llm import AsyncLLM
from vllm.v1.metrics.loggers import StatLoggerBase

from etude.common.process_deaths import OomKill, ended_because, oom_kills
from etude.inference.finite import all_finite
from etude.inference.types import (
    CompletionDelta,
    EngineDeadError,
    EngineStats,
    FinishReason,
    GenerationRequest,
    InferenceError,
    validate_request,
)
from etude.model.config import ModelConfig
from etude.model.state_dict_adapter import StateDictAdapter, split_stacked_experts

_FINISH_REASONS: dict[str, FinishReason] = {
    "stop": "stop",
    "length": "length",
    "abort": "cancelled",
}


class HFTokenizer:
    """The checkpoint's tokenizer, speaking the backend's `Tokenizer` protocol: `encode` adds
    no special tokens, `decode` keeps them."""

    def __init__(self, checkpoint_dir: Path) -> None:
        self._tokenizer = AutoTokenizer.from_pretrained(checkpoint_dir)
        self.eos_token_id: int | None = self._tokenizer.eos_token_id

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text, add_special_tokens=False)

    def decode(self, token_ids: list[int]) -> str:
        return self._tokenizer.decode(token_ids)

    def __len__(self) -> int:
        return len(self._tokenizer)


class _LatestSchedulerStats(StatLoggerBase):
    """Keeps the scheduler's figures from the last engine step (vLLM calls `record` once per
    step with stats on)."""

    def __init__(self) -> None:  # vLLM's factory signature is handled at the call site
        self.running = 0
        self.waiting = 0
        self.kv_cache_usage = 0.0

    def record(self, scheduler_stats, iteration_stats, mm_cache_stats=None, engine_idx=0):
        if scheduler_stats is not None:
            self.running = scheduler_stats.num_running_reqs
            self.waiting = scheduler_stats.num_waiting_reqs
            self.kv_cache_usage = scheduler_stats.kv_cache_usage

    def log_engine_initialized(self) -> None:
        pass


class _WorkerExtension:
    """Mixed into vLLM's worker class (``worker_extension_cls``), so it runs in the engine
    process with the model at hand; called through ``collective_rpc``."""

    def etude_check_reloadable(self) -> None:
        for name, layer in _cpu_moe_layers(self.model_runner.get_model()):
            experts = layer.quant_method.moe_kernel.fused_experts
            size = experts.moe_config.intermediate_size_per_partition
            if experts._padded_intermediate_size(experts.moe_config) != size:
                raise ValueError(
                    f"{name}: the CPU MoE kernel pads moe_intermediate_size {size} at load "
                    "time and vLLM's in-place reload cannot refill padded experts; use a "
                    "multiple of 32 to update this model's weights"
                )

    def etude_reload_weights(self, blob: bytes) -> int:
        """Load the safetensors `blob` (whole layers) in place, then pack again the CPU MoE
        experts it carried (a layer it did not carry keeps its packed weights)."""
        from vllm._custom_ops import cpu_prepack_moe_weight

        weights = load_safetensors(blob)
        self.reload_weights(weights_iterator=iter(weights.items()))
        model = self.model_runner.get_model()
        carried = {_layer_of(name) for name in weights}
        with torch.no_grad():
            for name, layer in _cpu_moe_layers(model):
                if _layer_of(f"{name}.weight") not in carried:
                    continue
                isa = layer.quant_method.moe_kernel.fused_experts.isa
                for param in (layer.w13_weight, layer.w2_weight):
                    # In place: the kernel and any captured graph keep this storage.
                    param.data.copy_(cpu_prepack_moe_weight(param.data, isa))
            if any("embed_tokens" in name for name in weights):
                _repack_tied_lm_head(model)
        return len(weights)


def _repack_tied_lm_head(model: torch.nn.Module) -> None:
    """vLLM's CPU GEMMs multiply by a packed copy of each weight made after loading, and a
    reload repacks the layers it loads; a tied LM head loads nothing of its own (its weight
    is the embedding's), so its packed copy would keep the old embedding. Repack it."""
    head = getattr(model, "lm_head", None)
    method = getattr(head, "quant_method", None)
    if getattr(model.config, "tie_word_embeddings", False) and method is not None:
        method.process_weights_after_loading(head)


def _cpu_moe_layers(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """The MoE layers whose experts run on vLLM's CPU grouped-gemm kernel (packed weights)."""
    from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUUnquantizedExperts

    layers = []
    for name, module in model.named_modules():
        kernel = getattr(getattr(module, "quant_method", None), "moe_kernel", None)
        experts = getattr(kernel, "fused_experts", None)
        if isinstance(experts, CPUUnquantizedExperts) and not experts._use_zentorch:
            layers.append((name, module))
    return layers


def _checkpoint_shapes(checkpoint_dir: Path) -> dict[str, tuple[int, ...]]:
    """Name → shape of every tensor of the checkpoint (read from the file headers)."""
    shapes = {}
    for path in sorted(checkpoint_dir.glob("*.safetensors")):
        with safe_open(path, framework="pt") as f:
            for key in f.keys():  # noqa: SIM118 (safe_open is not a mapping)
                shapes[key] = tuple(f.get_slice(key).get_shape())
    return shapes


CheckpointNames = Callable[[Iterable[tuple[str, torch.Tensor]]], Iterable[tuple[str, torch.Tensor]]]


def _checkpoint_names(checkpoint_dir: Path) -> CheckpointNames:
    """Our tensor names → the checkpoint's: stacked experts split, and Mixtral's expert names
    for an MoE with Llama attention (an upcycled Llama)."""
    try:
        config = ModelConfig.load(checkpoint_dir)
    except (ValueError, KeyError):  # a layout etude.model does not build: names as they are
        return split_stacked_experts
    return StateDictAdapter(config).iter_to_hf


def _checked(
    tensors: Iterable[tuple[str, torch.Tensor]],
    shapes: dict[str, tuple[int, ...]],
    to_checkpoint_names: CheckpointNames = split_stacked_experts,
) -> list[tuple[str, torch.Tensor]]:
    """Checkpoint-named tensors, each known with the right shape. vLLM's loaders skip names
    they do not know, so an unchecked typo would change nothing and still report success."""
    named = [
        (name, tensor)
        for name, tensor in to_checkpoint_names(tensors)
        if name != "lm_head.weight" or name in shapes  # tied: the embedding carries it
    ]
    for name, tensor in named:
        if name not in shapes:
            raise InferenceError(f"the model has no tensor {name!r}")
        if tuple(tensor.shape) != shapes[name]:
            raise InferenceError(
                f"{name}: shape {tuple(tensor.shape)} != the model's {shapes[name]}"
            )
        if not all_finite(tensor):
            raise InferenceError(f"{name} holds NaN or infinite values")
    return named


DEATH_CHECK_SECONDS = 0.5
"""How often a call waiting on the engine looks whether the engine died."""
T = TypeVar("T")


def engine_death(ended: list[tuple[str, int, int]], kills: list[OomKill]) -> str:
    """`the inference engine died: out of memory (the kernel's OOM killer ended
    VLLM::EngineCore (pid 12) 3 s ago)`, from the engine processes that ended (what, pid,
    exit code) and the kernel's out-of-memory kills."""
    pids = {pid for _, pid, _ in ended}
    killed = [k for k in kills if k.pid in pids]
    if killed:
        which = ", ".join(f"{k.command} (pid {k.pid}) {k.seconds_ago:.0f} s ago" for k in killed)
        return f"the inference engine died: out of memory (the kernel's OOM killer ended {which})"
    how = "; ".join(f"{what} {ended_because(code)}" for what, _, code in ended)
    return f"the inference engine died: {how or 'vLLM reports its engine core dead'}"


UPDATE_PART_BYTES = 64 << 20
"""Bytes of one part of an update sent to the engine (a larger layer goes whole, alone)."""


def _layer_of(name: str) -> str:
    """The decoder layer a checkpoint tensor belongs to (`model.layers.3`), or the name of
    the module holding it (`model.embed_tokens`)."""
    parts = name.split(".")
    for i, part in enumerate(parts[:-1]):
        if part == "layers" and parts[i + 1].isdigit():
            return ".".join(parts[: i + 2])
    return ".".join(parts[:-1])


def _parts(
    named: list[tuple[str, torch.Tensor]], max_bytes: int = UPDATE_PART_BYTES
) -> list[list[tuple[str, torch.Tensor]]]:
    """`named` in parts of whole layers, each at most `max_bytes` unless one layer is more."""
    layers: dict[str, list[tuple[str, torch.Tensor]]] = {}
    for name, tensor in named:
        layers.setdefault(_layer_of(name), []).append((name, tensor))
    parts: list[list[tuple[str, torch.Tensor]]] = []
    size = 0
    for layer in layers.values():
        layer_bytes = sum(t.numel() * t.element_size() for _, t in layer)
        if not parts or size + layer_bytes > max_bytes:
            parts.append([])
            size = 0
        parts[-1].extend(layer)
        size += layer_bytes
    return parts


def _pack(tensors: Iterable[tuple[str, torch.Tensor]]) -> bytes:
    """One safetensors blob; tensors that share storage (tied weights) are copied apart."""
    named: dict[str, torch.Tensor] = {}
    seen: set[int] = set()
    for name, tensor in tensors:
        t = tensor.detach().to("cpu").contiguous()
        if t.untyped_storage().data_ptr() in seen:
            t = t.clone()
        seen.add(t.untyped_storage().data_ptr())
        named[name] = t
    return save_safetensors(named)


class VllmBackend:
    """`InferenceBackend` over vLLM's `AsyncLLM`. Build it with `await VllmBackend.start(...)`."""

    name = "vllm"

    def __init__(
        self,
        engine: AsyncLLM,
        *,
        tokenizer: HFTokenizer,
        model_name: str,
        shapes: dict[str, tuple[int, ...]],
        version: int,
        stats_sink: _LatestSchedulerStats,
        to_checkpoint_names: CheckpointNames = split_stacked_experts,
    ) -> None:
        self._engine = engine
        self._to_checkpoint_names = to_checkpoint_names
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.num_parameters = sum(math.prod(shape) for shape in shapes.values())
        self._shapes = shapes
        self.max_model_len: int = engine.model_config.max_model_len
        self._vocab_size: int = engine.model_config.get_vocab_size()
        self._version = version
        self._stats = stats_sink
        self._update_lock = asyncio.Lock()
        self._closed = False
        self._in_flight = 0  # completions of requests being streamed
        self.capacity = 0  # the scheduler's max_num_seqs, read once the engine is up
        self._request_ids: set[str] = set()
        self.last_update_seconds: float | None = None
        """How long the last `update_weights` held generation paused."""
        self.update_part_bytes = UPDATE_PART_BYTES

    @classmethod
    async def start(
        cls,
        checkpoint_dir: str | Path,
        *,
        dtype: str = "float32",
        max_model_len: int | None = None,
        gpu_memory_utilization: float = 0.3,
        kv_cache_memory_bytes: int | None = None,
        max_num_seqs: int | None = None,
        enforce_eager: bool = False,
        seed: int = 0,
        model_name: str | None = None,
        version: int = 0,
    ) -> VllmBackend:
        """Start an engine on `checkpoint_dir` (config.json, *.safetensors, tokenizer files).

        `gpu_memory_utilization` is the fraction of device memory vLLM may take (on CPU: of the
        NUMA node's memory, KV cache included); `kv_cache_memory_bytes` sizes the KV cache
        directly instead. `enforce_eager` skips torch.compile and CUDA graphs: a much faster
        start, slower steps. `version` is the policy version of the checkpoint's weights.
        """
        checkpoint_dir = Path(checkpoint_dir)
        if not (checkpoint_dir / "config.json").is_file():
            raise InferenceError(f"{checkpoint_dir} is not a checkpoint: no config.json")
        model_name = model_name or checkpoint_dir.name
        stats_sink = _LatestSchedulerStats()
        args = AsyncEngineArgs(
            **_prefill_args(max_model_len),
            model=str(checkpoint_dir),
            served_model_name=[model_name],
            dtype=dtype,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            kv_cache_memory_bytes=kv_cache_memory_bytes,
            max_num_seqs=max_num_seqs,
            enforce_eager=enforce_eager,
            seed=seed,
            logprobs_mode="raw_logprobs",
            generation_config="vllm",  # the request's sampling, not the checkpoint's defaults
            worker_extension_cls=f"{_WorkerExtension.__module__}._WorkerExtension",
            disable_log_stats=True,  # vLLM's periodic log lines; our sink still gets stats
        )
        engine = AsyncLLM.from_engine_args(args, stat_loggers=[lambda _cfg, _idx: stats_sink])
        try:
            await engine.update_weight_version(str(version))
            backend = cls(
                engine,
                tokenizer=HFTokenizer(checkpoint_dir),
                model_name=model_name,
                shapes=_checkpoint_shapes(checkpoint_dir),
                version=version,
                stats_sink=stats_sink,
                to_checkpoint_names=_checkpoint_names(checkpoint_dir),
            )
            backend.capacity = engine.vllm_config.scheduler_config.max_num_seqs
        except BaseException:
            engine.shutdown()
            raise
        return backend

    @property
    def policy_version(self) -> int:
        return self._version

    @property
    def alive(self) -> bool:
        return not self._engine.errored

    def death(self) -> str | None:
        """Why the engine can no longer serve (its process ended, how, and the kernel's
        word when it ran out of memory), or None while it can."""
        if not self._engine.errored:
            return None
        manager = getattr(self._engine.engine_core.resources, "engine_manager", None)
        ended = [p for p in getattr(manager, "processes", ()) if p.exitcode is not None]
        return engine_death(
            [(f"{p.name} (pid {p.pid})", p.pid, p.exitcode) for p in ended],
            oom_kills(within_seconds=600),
        )

    async def _while_alive(self, call: Awaitable[T]) -> T:
        """`call`'s result, or InferenceError within `DEATH_CHECK_SECONDS` of the engine
        dying: vLLM fails new calls to a dead engine core but leaves those already sent to it
        waiting for an answer that never comes (a weight update, then, for its deadline)."""
        running = asyncio.ensure_future(call)
        try:
            while True:
                done, _ = await asyncio.wait([running], timeout=DEATH_CHECK_SECONDS)
                reason = self.death()
                failed = bool(done) and (running.cancelled() or running.exception() is not None)
                if reason is not None and (failed or not done):
                    raise EngineDeadError(reason)
                if done:
                    return running.result()
        finally:
            running.cancel()

    def _check(self, request: GenerationRequest) -> VllmSamplingParams:
        s = request.sampling
        validate_request(request, max_model_len=self.max_model_len, vocab_size=self._vocab_size)
        try:
            return VllmSamplingParams(
                n=s.n,
                temperature=s.temperature,
                top_p=s.top_p,
                top_k=s.top_k,
                max_tokens=s.max_tokens,
                stop=list(s.stop),
                stop_token_ids=list(s.stop_token_ids),
                seed=s.seed,
                ignore_eos=s.ignore_eos,
                # The sampled token's own logprob, plus the alternatives asked for.
                logprobs=s.top_logprobs,
                prompt_logprobs=s.prompt_logprobs,
                presence_penalty=s.presence_penalty,
                frequency_penalty=s.frequency_penalty,
                repetition_penalty=s.repetition_penalty,
                logit_bias=dict(s.logit_bias) or None,
                output_kind=RequestOutputKind.DELTA,
            )
        except ValueError as e:
            raise InferenceError(str(e)) from e

    async def generate(self, request: GenerationRequest) -> AsyncIterator[CompletionDelta]:
        if self._closed:
            raise InferenceError("the backend is closed")
        params = self._check(request)
        if request.request_id in self._request_ids:
            raise InferenceError(f"request id {request.request_id!r} is already in flight")
        n = request.sampling.n
        emitted = [0] * n  # tokens already streamed, per completion
        labels: dict[int, Any] | None = None  # completion index -> vLLM's request state
        stream = self._engine.generate(
            TokensPrompt(prompt_token_ids=list(request.prompt_token_ids)),
            params,
            request.request_id,
        )
        self._in_flight += n
        self._request_ids.add(request.request_id)
        try:
            while True:
                try:
                    output = await anext(stream)
                except StopAsyncIteration:
                    return
                except Exception as e:  # a dead engine fails its requests (EngineDeadError)
                    reason = self.death()
                    if reason is None and not isinstance(e, ValueError):
                        raise
                    if reason is not None:
                        raise EngineDeadError(reason) from e
                    raise InferenceError(str(e)) from e  # vLLM refused the request
                if labels is None:
                    labels = self._request_states(request.request_id)
                for c in output.outputs:
                    finish = c.finish_reason
                    if finish is not None and finish not in _FINISH_REASONS:
                        raise InferenceError(f"vLLM ended completion {c.index} with {finish}")
                    token_ids = list(c.token_ids)
                    start = emitted[c.index]
                    emitted[c.index] += len(token_ids)
                    yield CompletionDelta(
                        index=c.index,
                        token_ids=token_ids,
                        logprobs=[c.logprobs[i][t].logprob for i, t in enumerate(token_ids)]
                        if c.logprobs
                        else [],
                        top_logprobs=_alternatives(c.logprobs, request.sampling.top_logprobs),
                        prompt_logprobs=_prompt_logprobs(output.prompt_logprobs)
                        if start == 0
                        else None,
                        policy_versions=self._versions(labels.get(c.index), c, start),
                        text=c.text,
                        finish_reason=_FINISH_REASONS[finish] if finish else None,
                    )
        finally:
            self._in_flight -= n
            self._request_ids.discard(request.request_id)
            # Closing vLLM's generator aborts the request in the engine and frees its cache
            # (so does a cancellation reaching it inside `anext`). Its abort hands the engine
            # core the message before its first await (pyzmq sends at once unless the socket
            # is full), so a cancellation that repeats (anyio's, as a streamed HTTP response
            # is torn down) does not lose it.
            await stream.aclose()

    def _request_states(self, request_id: str) -> dict[int, Any]:
        """vLLM's client-side state of each completion of a request in flight, by index. It
        records the weight version of every engine step that produced tokens as (version,
        first token index) pairs; the objects outlive the request, so they are kept."""
        processor = self._engine.output_processor
        states = (processor.request_states.get(i) for i in processor.external_req_ids[request_id])
        return {s.request_index: s for s in states if s is not None}

    def _versions(self, state: Any, completion: Any, start: int) -> list[int]:
        """The version of the weights that sampled each new token of `completion` (output
        tokens `start`, `start + 1`...), as the engine labelled them. A token that arrives
        after an update may still come from the weights before it: the labels, not the
        time of arrival, decide."""
        count = len(completion.token_ids)
        if state is not None:
            starts = list(state.weight_version_starts)
        else:  # finished before we looked: the last output carries the spans
            starts = [(span.version, span.start) for span in completion.weight_versions or ()]
        if not starts:
            return [self._version] * count
        versions = []
        for i in range(start, start + count):
            label = next((v for v, first in reversed(starts) if first <= i), starts[0][0])
            versions.append(int(label))
        return versions

    async def update_weights(
        self, version: int, tensors: Iterable[tuple[str, torch.Tensor]]
    ) -> int:
        if self._closed:
            raise InferenceError("the backend is closed")
        named = _checked(tensors, self._shapes, self._to_checkpoint_names)
        parts = _parts(named, self.update_part_bytes)
        engine, alive = self._engine, self._while_alive
        async with self._update_lock:
            try:
                await alive(engine.collective_rpc("etude_check_reloadable"))
            except InferenceError:
                raise
            except Exception as e:
                raise InferenceError(f"cannot load version {version}: {e}") from e
            started = time.perf_counter()
            await alive(engine.pause_generation(mode="keep", clear_cache=True))
            try:
                try:
                    loaded = 0
                    for part in parts:
                        rpc = engine.collective_rpc("etude_reload_weights", args=(_pack(part),))
                        (count,) = await alive(rpc)
                        loaded += count
                except InferenceError:  # EngineDeadError included
                    raise
                except Exception as e:
                    raise InferenceError(
                        f"loading version {version} failed (the engine's weights may be "
                        f"partly updated): {e}"
                    ) from e
                await alive(engine.update_weight_version(str(version)))
                self._version = version
            finally:
                if self.death() is None:
                    await alive(engine.resume_generation())
            self.last_update_seconds = time.perf_counter() - started
        return loaded

    def stats(self) -> EngineStats:
        """The scheduler's figures after its last step. vLLM reports them only when a step
        runs, so after an abort leaves the engine idle they would stay stale: with no request
        of ours in flight the engine is idle by construction and reports zeros."""
        if self._in_flight == 0:
            return EngineStats(running=0, waiting=0, kv_cache_usage=0.0, capacity=self.capacity)
        return EngineStats(
            running=self._stats.running,
            waiting=self._stats.waiting,
            kv_cache_usage=self._stats.kv_cache_usage,
            capacity=self.capacity,
        )

    async def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._engine.shutdown()
            # AsyncLLM.__del__ shuts down again; let it run now rather than at interpreter
            # exit, when the modules it calls into are already torn down.
            del self._engine
            gc.collect()


def _prefill_args(max_model_len: int | None) -> dict:
    """On a CPU, whole prompts in one engine step. vLLM 0.32's CPU runner cannot rewind a
    seeded request's generator after a partial (chunked) prefill step ("CPU Generator does
    not use offset"): the engine dies on the first long prompt of a seeded request. Without
    chunking, and with a step budget that holds a whole prompt, no step is partial."""
    import torch

    if torch.cuda.is_available():
        return {}
    return {
        "enable_chunked_prefill": False,
        "max_num_batched_tokens": max(max_model_len or 0, _CPU_PREFILL_TOKENS),
    }


_CPU_PREFILL_TOKENS = 8192


def _alternatives(logprobs: Any, k: int) -> list[dict[int, float]]:
    """vLLM's per-token {id: Logprob} (the sampled token plus the top `k`, ranked) as the top
    `k` alone."""
    if not k or not logprobs:
        return []
    return [
        {t: lp.logprob for t, lp in position.items() if lp.rank is not None and lp.rank <= k}
        for position in logprobs
    ]


def _prompt_logprobs(logprobs: Any) -> list[dict[int, float] | None] | None:
    if logprobs is None:
        return None
    return [
        None if position is None else {t: lp.logprob for t, lp in position.items()}
        for position in logprobs
    ]
