"""Picks and starts the configured backend."""

from __future__ import annotations

import os
from pathlib import Path

import torch

from etude.inference.backend import InferenceBackend
from etude.inference.config import InferenceConfig
from etude.inference.engine import EngineConfig
from etude.inference.kv_sizing import kv_cache_bytes
from etude.inference.torch_backend import TorchBackend
from etude.model.checkpoint import init_checkpoint
from etude.sim.config import SimConfig


def preset_checkpoint(config: InferenceConfig, directory: Path) -> Path:
    """A preset written out as a checkpoint directory (vLLM loads only directories)."""
    target = directory / f"{config.model}-seed{config.seed}-{config.dtype}"
    if not (target / "config.json").exists():
        init_checkpoint(
            config.model,
            target,
            seed=config.seed,
            dtype=config.dtype,
            tokenizer_source=config.tokenizer,
        )
    return target


def vllm_kv_cache_bytes(config: InferenceConfig, checkpoint_dir: Path) -> int | None:
    """The KV cache vLLM gets: `kv_cache_tokens` of the checkpoint's keys and values; unset,
    on a CPU, room for `max_num_seqs` sequences of `max_model_len`; None leaves a GPU's
    cache to vLLM (`gpu_memory_utilization`)."""
    tokens = config.kv_cache_tokens
    if tokens is None and not torch.cuda.is_available():
        tokens = config.max_num_seqs * config.max_model_len
    return None if tokens is None else kv_cache_bytes(checkpoint_dir, config.dtype, tokens)


def cpu_threads(config: InferenceConfig) -> int:
    return config.cpu_threads or max(1, len(os.sched_getaffinity(0)) - 1)


async def start_backend(
    config: InferenceConfig, run_dir: Path, sim: SimConfig | None = None
) -> InferenceBackend:
    if config.backend == "sim":
        from etude.inference.sim_backend import SimBackend
        from etude.model.tokenizer import load_tokenizer

        scenario, clock = (sim or SimConfig()).load()
        return SimBackend(scenario, clock, tokenizer=load_tokenizer(config.tokenizer))
    if config.backend == "torch":
        torch.set_num_threads(cpu_threads(config))
        engine = EngineConfig(
            max_num_seqs=config.max_num_seqs,
            max_model_len=config.max_model_len,
            max_prefill_tokens=config.max_prefill_tokens,
        )
        return TorchBackend.load(
            config.model,
            tokenizer=config.tokenizer,
            dtype=config.dtype,
            seed=config.seed,
            config=engine,
            precision=config.precision,
        )
    from etude.inference.vllm_backend import VllmBackend  # vLLM is an optional dependency

    source = Path(config.model)
    if not source.is_dir():
        source = preset_checkpoint(config, config.checkpoint_dir or run_dir / "inference")
    return await VllmBackend.start(
        source,
        dtype=config.dtype,
        max_model_len=config.max_model_len,
        max_num_seqs=config.max_num_seqs,
        gpu_memory_utilization=config.gpu_memory_utilization,
        kv_cache_memory_bytes=vllm_kv_cache_bytes(config, source),
        enforce_eager=config.enforce_eager,
        seed=config.seed,
    )
