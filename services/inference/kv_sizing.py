"""How many bytes a KV cache of a given number of tokens takes for a checkpoint.

vLLM on a CPU otherwise sizes its cache as `gpu_memory_utilization` of the machine's memory:
5.3 GiB of a 24 GiB machine for a 135 M policy whose run holds 16 sequences of 3,072 tokens
at most (2.2 GiB in fp32). The run knows how many sequences it keeps in flight and how long
they grow; the cache is sized from that instead (etude.trainer.driver.serving_env).
"""

from __future__ import annotations

import json
from pathlib import Path

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def kv_bytes_per_token(checkpoint_dir: Path, dtype: str) -> int:
    """Keys and values of one token in every layer, from the checkpoint's config.json."""
    raw = json.loads((Path(checkpoint_dir) / "config.json").read_text())
    raw = raw.get("text_config", raw)  # a multimodal wrapper keeps the language model inside
    heads = raw["num_attention_heads"]
    kv_heads = raw.get("num_key_value_heads") or heads
    head_dim = raw.get("head_dim") or raw["hidden_size"] // heads
    return 2 * raw["num_hidden_layers"] * kv_heads * head_dim * DTYPE_BYTES[dtype]


def kv_cache_bytes(checkpoint_dir: Path, dtype: str, tokens: int) -> int:
    return tokens * kv_bytes_per_token(checkpoint_dir, dtype)
