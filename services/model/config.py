"""Model configuration: a typed mirror of Hugging Face's Qwen3-MoE `config.json`, and presets.

A config with `num_experts == 0` is the dense variant, which Hugging Face calls Qwen3.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass(kw_only=True, slots=True)
class ModelConfig:
    vocab_size: int
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    """Fewer key/value heads than query heads is grouped-query attention."""
    head_dim: int
    intermediate_size: int
    """Width of the dense MLP (dense variant, and the layers in `mlp_only_layers`)."""
    num_experts: int = 0
    """0 makes every layer dense."""
    num_experts_per_tok: int = 2
    moe_intermediate_size: int = 0
    """Width of each routed expert."""
    norm_topk_prob: bool = True
    """Renormalise the top-k router probabilities to sum to one."""
    decoder_sparse_step: int = 1
    """Every `decoder_sparse_step`-th layer is an MoE layer."""
    mlp_only_layers: tuple[int, ...] = ()
    shared_expert_intermediate_size: int = 0
    """Width of an always-on shared expert with a sigmoid gate (Qwen2-MoE style); 0: none.
    Hugging Face's Qwen3-MoE has no shared expert, so such checkpoints load only here."""
    router_aux_loss_coef: float = 0.001
    """Weight of the load-balancing loss (Switch Transformer) in the training loss."""
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    initializer_range: float = 0.02
    eos_token_id: int | None = None
    pad_token_id: int | None = None
    torch_dtype: str = "float32"
    extra: dict[str, Any] = field(default_factory=dict)
    """Keys of a loaded config.json this class does not model, written back on save."""

    def __post_init__(self) -> None:
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        if self.num_experts and not 0 < self.num_experts_per_tok <= self.num_experts:
            raise ValueError("num_experts_per_tok must be in 1..num_experts")
        if self.num_experts and self.moe_intermediate_size <= 0:
            raise ValueError("an MoE config needs moe_intermediate_size > 0")

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def is_moe_layer(self, layer: int) -> bool:
        return (
            self.is_moe
            and layer not in self.mlp_only_layers
            and (layer + 1) % self.decoder_sparse_step == 0
        )

    # -- Hugging Face config.json ------------------------------------------------------

    def to_hf_dict(self) -> dict[str, Any]:
        values = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in {"extra", "rope_theta", "shared_expert_intermediate_size"}
        }
        values["mlp_only_layers"] = list(self.mlp_only_layers)
        values["rope_parameters"] = {"rope_type": "default", "rope_theta": self.rope_theta}
        values["rope_theta"] = self.rope_theta  # older readers (vLLM, transformers 4.x)
        values["hidden_act"] = "silu"
        values["attention_bias"] = False
        if self.shared_expert_intermediate_size:
            values["shared_expert_intermediate_size"] = self.shared_expert_intermediate_size
        if self.is_moe:
            values.update(model_type="qwen3_moe", architectures=["Qwen3MoeForCausalLM"])
        else:
            for key in (
                "num_experts",
                "num_experts_per_tok",
                "moe_intermediate_size",
                "norm_topk_prob",
                "decoder_sparse_step",
                "mlp_only_layers",
                "router_aux_loss_coef",
            ):
                values.pop(key)
            values.update(model_type="qwen3", architectures=["Qwen3ForCausalLM"])
        return {**self.extra, **values}

    @classmethod
    def from_hf_dict(cls, raw: dict[str, Any]) -> ModelConfig:
        model_type = raw.get("model_type")
        if model_type not in {"qwen3", "qwen3_moe", "qwen2_moe"}:
            raise ValueError(f"unsupported model_type {model_type!r} (qwen3, qwen3_moe)")
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in raw.items() if k in known and k != "extra"}
        if "num_local_experts" in raw:  # transformers 5 writes num_experts under this name
            values.setdefault("num_experts", raw["num_local_experts"])
        rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
        if rope.get("rope_type", "default") != "default":
            raise ValueError(f"unsupported rope_type {rope.get('rope_type')!r}")
        values["rope_theta"] = float(rope.get("rope_theta", raw.get("rope_theta", 1e6)))
        values.setdefault("head_dim", raw["hidden_size"] // raw["num_attention_heads"])
        values.setdefault("intermediate_size", raw.get("intermediate_size", 0))
        values["mlp_only_layers"] = tuple(raw.get("mlp_only_layers") or ())
        if isinstance(values.get("eos_token_id"), list):
            values["eos_token_id"] = values["eos_token_id"][0]
        if model_type == "qwen3":
            values["num_experts"] = 0
        if raw.get("dtype"):
            values["torch_dtype"] = str(raw["dtype"])
        modelled = {"num_local_experts", "rope_parameters", "rope_scaling", "model_type"}
        ignored = known | modelled | {"architectures"}
        values["extra"] = {k: v for k, v in raw.items() if k not in ignored}
        return cls(**values)

    def save(self, directory: Path) -> None:
        text = json.dumps(self.to_hf_dict(), indent=2, sort_keys=True)
        (directory / "config.json").write_text(text + "\n")

    @classmethod
    def load(cls, directory: Path) -> ModelConfig:
        return cls.from_hf_dict(json.loads((directory / "config.json").read_text()))


# -- presets ---------------------------------------------------------------------------


def tiny(vocab_size: int = 8192) -> ModelConfig:
    """~11 M parameters (~6 M active): 4 layers, 8 experts (top-2). Trains and samples on
    2 CPU cores."""
    return ModelConfig(
        vocab_size=vocab_size,
        hidden_size=256,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        intermediate_size=512,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=256,
        max_position_embeddings=4096,
    )


def tiny_dense(vocab_size: int = 8192) -> ModelConfig:
    """The dense counterpart of `tiny` (Qwen3 layout)."""
    return dataclasses.replace(tiny(vocab_size), num_experts=0, intermediate_size=512)


def small(vocab_size: int = 8192) -> ModelConfig:
    """~166 M parameters (~34 M active): 8 layers, 32 experts (top-4). A GPU smoke size."""
    return ModelConfig(
        vocab_size=vocab_size,
        hidden_size=512,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=64,
        intermediate_size=1536,
        num_experts=32,
        num_experts_per_tok=4,
        moe_intermediate_size=384,
        max_position_embeddings=8192,
    )


PRESETS = {"tiny": tiny, "tiny-dense": tiny_dense, "small": small}


def preset(name: str, vocab_size: int = 8192) -> ModelConfig:
    try:
        return PRESETS[name](vocab_size)
    except KeyError:
        raise ValueError(f"unknown model preset {name!r} (one of {', '.join(PRESETS)})") from None
