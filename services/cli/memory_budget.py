"""Whether this machine has the memory a local stack, and a run on it, will need: said before
anything starts, with what to change, rather than found out by the kernel's OOM killer after
twenty minutes of a warm start.

The need is an estimate from the run's config and the policy's shape: what each process
holds at its peak. The constants are resident sets measured on `make run` (2 cores, 24 GiB,
docs/benchmarks.md): Python with each service's imports, vLLM's engine process without its
KV cache, the search service with its embedding model. The model-dependent parts are
computed: weights (and the copy an update holds while it arrives), the KV cache
(etude.inference.kv_sizing), the trainer's optimizer state and a step's activations.
`ETUDE_STACK__MEMORY_CHECK=false` starts anyway.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import typer

from etude.cli.run_view import console
from etude.common.run_config import RunConfig
from etude.inference.config import InferenceConfig, InferenceSettings
from etude.inference.kv_sizing import DTYPE_BYTES, kv_bytes_per_token
from etude.model.checkpoint import build_model
from etude.model.config import ModelConfig, preset

log = logging.getLogger(__name__)

GIB = 1 << 30

# Resident sets at rest, measured (see the module's docstring).
SMALL_SERVICES = int(0.35 * GIB)  # environment, reward, gateway and Redis together
SEARCH_SERVICE = int(1.2 * GIB)  # its embedding model and index
TORCH_PROCESS = int(0.6 * GIB)  # a process that imported torch and Étude's model code
VLLM_SERVICE = int(0.8 * GIB)  # the inference service in front of vLLM
VLLM_ENGINE = int(1.2 * GIB)  # vLLM's engine process, before weights and KV cache
ROLLOUT_WORKER = int(0.3 * GIB)
# A step's activations per token of a micro-batch, in hidden-size units of 4 bytes: a
# trained layer keeps ~32 (SmolLM2's SFT, measured); with activation checkpointing each
# keeps its input (1) and one layer's worth (32) is recomputed at a time.
LAYER_ACTIVATIONS = 32
HEAD_PIECE_BYTES = 128 << 20  # etude.trainer.batch.HEAD_PIECE_BYTES


@dataclass(frozen=True, slots=True)
class PolicyShape:
    parameters: int
    hidden_size: int
    layers: int
    vocab_size: int

    @classmethod
    def of(cls, source: str) -> PolicyShape:
        """A preset's or a checkpoint directory's shape (no weights read)."""
        config = ModelConfig.load(Path(source)) if Path(source).is_dir() else preset(source)
        with torch.device("meta"):
            parameters = build_model(config).num_parameters
        return cls(parameters, config.hidden_size, config.num_hidden_layers, config.vocab_size)


@dataclass(frozen=True, slots=True)
class MemoryNeed:
    parts: tuple[tuple[str, int], ...]

    @property
    def total(self) -> int:
        return sum(size for _, size in self.parts)

    def describe(self) -> str:
        return ", ".join(f"{what} {size / GIB:.1f} GiB" for what, size in self.parts)


class NotEnoughMemoryError(RuntimeError):
    pass


def inference_need(config: InferenceConfig, shape: PolicyShape, checkpoint: Path | None) -> int:
    weights = shape.parameters * DTYPE_BYTES[config.dtype]
    per_token = (
        kv_bytes_per_token(checkpoint, config.dtype)
        if checkpoint is not None and (checkpoint / "config.json").is_file()
        else 2 * shape.layers * shape.hidden_size * DTYPE_BYTES[config.dtype]
    )
    # An update arriving holds the weights once more in the service.
    if config.backend == "vllm":
        tokens = config.kv_cache_tokens or config.max_num_seqs * config.max_model_len
        return VLLM_SERVICE + VLLM_ENGINE + 2 * weights + tokens * per_token
    if config.backend == "torch":  # its cache is allocated whole, every sequence at full length
        return TORCH_PROCESS + 2 * weights + config.max_num_seqs * config.max_model_len * per_token
    return TORCH_PROCESS  # sim: no model


def trainer_need(run: RunConfig, shape: PolicyShape) -> int:
    weights = shape.parameters * 4  # the trainer keeps fp32 weights
    reference = weights if run.trainer.loss.kl_coef else 0
    trained = max(_trained_share(run.sft.trainable_layers, shape),
                  _trained_share(run.trainer.trainable_layers, shape))  # fmt: skip
    optimizer = int(trained * weights * 3)  # gradients and AdamW's two moments
    tokens = max(run.sft.batch_size, run.trainer.micro_batch) * run.rollout.max_episode_tokens
    layers = trained * shape.layers
    units = (
        layers + LAYER_ACTIVATIONS
        if run.policy.activation_checkpointing
        else layers * LAYER_ACTIVATIONS
    )
    activations = int(tokens * shape.hidden_size * 4 * units)
    head = HEAD_PIECE_BYTES * 4  # a piece's logits, log-softmax and their gradients
    return TORCH_PROCESS + weights + reference + optimizer + activations + head


def _trained_share(layers: int | None, shape: PolicyShape) -> float:
    return 1.0 if layers is None else min(layers, shape.layers) / shape.layers


def run_need(run: RunConfig, inference: InferenceConfig) -> MemoryNeed:
    """A local `etude train`: the stack serving the run's policy, the trainer in this
    process and the rollout workers."""
    shape = PolicyShape.of(inference.model)
    checkpoint = Path(inference.model) if Path(inference.model).is_dir() else None
    return MemoryNeed((
        ("inference", inference_need(inference, shape, checkpoint)),
        ("trainer", trainer_need(run, shape)),
        ("search", SEARCH_SERVICE),
        ("rollout workers", run.rollout.workers * ROLLOUT_WORKER),
        ("other services", SMALL_SERVICES),
    ))  # fmt: skip


def stack_need(inference: InferenceConfig) -> MemoryNeed:
    """`etude up`: the stack alone."""
    shape = PolicyShape.of(inference.model)
    checkpoint = Path(inference.model) if Path(inference.model).is_dir() else None
    return MemoryNeed((
        ("inference", inference_need(inference, shape, checkpoint)),
        ("search", SEARCH_SERVICE),
        ("other services", SMALL_SERVICES),
    ))  # fmt: skip


def available_memory() -> int:
    """What the machine can give now: the kernel's MemAvailable, capped by this cgroup's
    limit where one is set (a container)."""
    available = 0
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            available = int(line.split()[1]) * 1024
    limit = _cgroup_room()
    return min(available, limit) if limit is not None else available


def _cgroup_room() -> int | None:
    try:
        own = Path("/proc/self/cgroup").read_text().split("\n")[0].split(":")[-1]
        group = Path("/sys/fs/cgroup") / own.lstrip("/")
        limit = (group / "memory.max").read_text().strip()
        if limit == "max":
            return None
        return int(limit) - int((group / "memory.current").read_text())
    except (OSError, ValueError, IndexError):
        return None


def check(need: MemoryNeed, available: int, what: str) -> None:
    """NotEnoughMemoryError saying what needs how much, when `need` exceeds `available`."""
    if need.total <= available:
        return
    raise NotEnoughMemoryError(
        f"{what} needs about {need.total / GIB:.1f} GiB of memory ({need.describe()}); "
        f"this machine has {available / GIB:.1f} GiB available. Lower rollout.concurrency, "
        "policy.max_model_len or the trained layers, turn on "
        "policy.activation_checkpointing, free memory, or set "
        "ETUDE_STACK__MEMORY_CHECK=false to start anyway"
    )


def refuse_without_memory(need_of: Callable[[InferenceConfig], MemoryNeed], what: str) -> None:
    """Exit 2 with the reason when `need_of` the inference settings the stack will start
    with exceeds the memory available. A policy whose shape cannot be read here (a
    checkpoint layout etude.model does not build) is started unchecked, which is logged."""
    try:
        need = need_of(InferenceSettings().inference)
    except (ValueError, KeyError, OSError) as error:
        log.warning("memory not estimated (%s): starting unchecked", error)
        return
    try:
        check(need, available_memory(), what)
    except NotEnoughMemoryError as error:
        console.print(f"[red]{error}[/]", soft_wrap=True)
        raise typer.Exit(2) from None
    log.info("%s needs about %.1f GiB (%s)", what, need.total / GIB, need.describe())
