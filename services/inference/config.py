"""Settings of the inference service (`ETUDE_INFERENCE__*`)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from etude.common.settings import MIB, EtudeSettings, Section
from etude.sim.config import SimConfig


class InferenceConfig(Section):
    backend: Literal["torch", "vllm", "sim"] = "torch"
    """`torch`: the built-in engine on the trainer's model code (identical numerics).
    `vllm`: vLLM's AsyncLLM (needs vLLM installed; loads a checkpoint directory).
    `sim`: no model, simulated time (etude.inference.sim_backend; `ETUDE_SIM__*`)."""
    model: str = "tiny"
    """A preset (`tiny`, `tiny-dense`, `small`: fresh weights from `seed`) or a checkpoint
    directory in Hugging Face layout (config.json, *.safetensors, tokenizer files)."""
    tokenizer: str | None = None
    """A tokenizer directory; unset: the checkpoint's own, or the bundled one for presets."""
    dtype: Literal["float32", "bfloat16"] = "float32"
    """Weights and KV cache. fp32 on the CPU (bf16 matmuls are slow there); bf16 on a GPU."""
    precision: Literal["default", "mxfp8"] = "default"
    """torch backend: `mxfp8` runs the model's linear layers and experts in MXFP8, the numerics
    a trainer with `precision=mxfp8` uses (etude.kernels); `default`: the model's dtype."""
    cpu_threads: int | None = Field(default=None, ge=1, le=4096)
    """torch backend: threads of torch's CPU operations; unset: one fewer than the CPUs this
    process may use (at least 1). The service's event loop streams tokens while the engine
    decodes: with every CPU in torch's pool, each operation waits for the thread the loop
    preempted (2 cores, 16 completions of 100 tokens with the `tiny` policy: 4.4 s on two
    threads, 2.7 s on one; SmolLM2-135M: 42.8 s, 40.4 s)."""
    seed: int = 0
    """Initial weights of a preset (the trainer publishes real ones through UpdateWeights)."""
    max_num_seqs: int = Field(default=32, ge=1)
    """Sequences decoded together; a request with n completions takes n."""
    max_model_len: int = Field(default=4096, ge=16)
    """Prompt plus completion, in tokens (capped by the model's max_position_embeddings)."""
    max_prefill_tokens: int = Field(default=8192, ge=16)
    """Padded prompt tokens prefilled in one engine step (torch backend)."""
    gpu_memory_utilization: float = Field(default=0.3, gt=0, le=1)
    """vLLM on a GPU, `kv_cache_tokens` unset: fraction of device memory for weights and KV
    cache."""
    kv_cache_tokens: int | None = Field(default=None, ge=16)
    """vLLM: tokens its KV cache holds, all sequences together (etude.inference.kv_sizing
    turns them into bytes). Unset: on a CPU, `max_num_seqs` × `max_model_len` (rather than
    vLLM's `gpu_memory_utilization` of the machine's RAM); on a GPU, vLLM's own sizing. A
    local `etude train` sets it from the run: every episode in flight at its longest."""
    max_update_bytes: int = Field(default=64 << 30, ge=1)
    """Largest UpdateWeights stream accepted (all tensors together)."""
    enforce_eager: bool = True
    """vLLM: skip torch.compile and CUDA graphs. On a CPU an engine then starts in ~10 s
    rather than ~30 s plus a compile on the first request; on a GPU set it false."""
    http_port: int = Field(default=0, ge=0, le=65535)
    """Port of the OpenAI-compatible HTTP API (`/v1/completions`); 0 picks a free one."""
    http_max_generation_body_bytes: int = Field(default=16 * MIB, ge=1024)
    """Largest request body of `/v1/chat/completions`, `/v1/completions`, `/tokenize` and
    `/detokenize` (a chat of 128k tokens is ~1 MB, 64 prompts of 32k tokens ~8 MB). A larger
    `Content-Length` gets 413 before any of the body is read, a chunked body as soon as it
    passes the cap. A body is parsed on the event loop: the cap bounds how long that takes."""
    http_max_body_bytes: int = Field(default=64 * 1024, ge=1024)
    """Largest request body of every other route of the HTTP API (none of them takes one)."""
    max_prompt_bytes_per_token: int = Field(default=32, ge=1)
    """A chat request's messages and tools together, and each text prompt of
    `/v1/completions`, may hold at most `max_model_len` × this many bytes; more gets a 400
    before anything is rendered or tokenized (such a prompt could not fit the context: a
    token of text or code averages 3–4 bytes, the bundled tokenizer's longest is 74)."""
    max_tool_parameters: int = Field(default=256, ge=1)
    """Parameters one tool of a chat request may declare (OpenAI's API allows 128 tools)."""
    checkpoint_dir: Path | None = None
    """Where a preset is written as a checkpoint for vLLM; unset: `<run dir>/inference`."""

    @model_validator(mode="after")
    def _kv_cache_holds_a_sequence(self) -> InferenceConfig:
        if self.kv_cache_tokens is not None and self.kv_cache_tokens < self.max_model_len:
            raise ValueError(
                f"kv_cache_tokens ({self.kv_cache_tokens}) must hold one sequence of "
                f"max_model_len ({self.max_model_len}) tokens"
            )
        return self


class InferenceSettings(EtudeSettings):
    inference: InferenceConfig = InferenceConfig()
    sim: SimConfig = SimConfig()
