"""Model configuration: a typed mirror of Hugging Face's `config.json`, and presets.

One config covers four Hugging Face layouts, told apart by two fields:

| `qk_norm` | `num_experts` | `model_type` |
|---|---|---|
| True  | 0   | `qwen3` (dense) |
| True  | > 0 | `qwen3_moe` |
| False | 0   | `llama` (dense; SmolLM2 is one) |
| False | > 0 | `mixtral` (Llama attention, MoE MLP: what upcycling a Llama gives) |
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
    qk_norm: bool = True
    """RMSNorm on every query and key head (Qwen3); False: Llama's attention, without."""
    rms_norm_eps: float = 1e-6
    rope_theta: float = 1_000_000.0
    rope_scaling: dict[str, float] | None = None
    """Llama 3's RoPE frequency scaling (`factor`, `low_freq_factor`, `high_freq_factor`,
    `original_max_position_embeddings`); None: plain RoPE."""
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
        if self.rope_scaling is not None and set(self.rope_scaling) != set(LLAMA3_ROPE_KEYS):
            raise ValueError(f"rope_scaling needs exactly the keys {', '.join(LLAMA3_ROPE_KEYS)}")
        if self.model_type == "mixtral" and (
            self.mlp_only_layers
            or self.decoder_sparse_step != 1
            or self.shared_expert_intermediate_size
            or not self.norm_topk_prob
        ):
            raise ValueError(
                "an MoE without q/k norm is a Mixtral checkpoint, which routes every layer "
                "(no mlp_only_layers, decoder_sparse_step 1), renormalises the top-k weights "
                "(norm_topk_prob) and has no shared expert"
            )

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def model_type(self) -> str:
        """The Hugging Face layout this config is saved as (see the module docstring)."""
        if self.qk_norm:
            return "qwen3_moe" if self.is_moe else "qwen3"
        return "mixtral" if self.is_moe else "llama"

    def is_moe_layer(self, layer: int) -> bool:
        return (
            self.is_moe
            and layer not in self.mlp_only_layers
            and (layer + 1) % self.decoder_sparse_step == 0
        )

    # -- Hugging Face config.json ------------------------------------------------------

    def to_hf_dict(self) -> dict[str, Any]:
        internal = {"extra", "qk_norm", "rope_theta", "rope_scaling"}
        values = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in internal
        }
        values["mlp_only_layers"] = list(self.mlp_only_layers)
        values["rope_parameters"] = self.rope_parameters
        values["rope_theta"] = self.rope_theta  # older readers (vLLM, transformers 4.x)
        values["dtype"] = self.torch_dtype  # transformers 5's name; 4.x reads torch_dtype
        values["hidden_act"] = "silu"
        values["attention_bias"] = False
        if not self.shared_expert_intermediate_size:
            values.pop("shared_expert_intermediate_size")
        model_type = self.model_type
        if not self.is_moe:
            for key in _MOE_KEYS:
                values.pop(key)
        if model_type == "llama":
            values["mlp_bias"] = False
        elif model_type == "mixtral":
            for key in (
                "num_experts",
                "moe_intermediate_size",
                "norm_topk_prob",
                "decoder_sparse_step",
                "mlp_only_layers",
            ):
                values.pop(key)
            values.update(
                num_local_experts=self.num_experts,
                intermediate_size=self.moe_intermediate_size,  # Mixtral's name for it
                sliding_window=None,
                router_jitter_noise=0.0,
            )
        values.update(model_type=model_type, architectures=[_ARCHITECTURES[model_type]])
        return {**self.extra, **values}

    @property
    def rope_parameters(self) -> dict[str, Any]:
        """transformers 5's `rope_parameters` for this config."""
        if self.rope_scaling is None:
            return {"rope_type": "default", "rope_theta": self.rope_theta}
        return {"rope_type": "llama3", "rope_theta": self.rope_theta, **self.rope_scaling}

    @classmethod
    def from_hf_dict(cls, raw: dict[str, Any]) -> ModelConfig:
        model_type = raw.get("model_type")
        if model_type not in _MODEL_TYPES:
            raise ValueError(
                f"unsupported model_type {model_type!r} (one of {', '.join(sorted(_MODEL_TYPES))})"
            )
        _refuse_what_the_model_lacks(raw)
        internal = {"extra", "qk_norm", "rope_scaling"}
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in raw.items() if k in known and k not in internal}
        if "num_local_experts" in raw:  # transformers 5 writes num_experts under this name
            values.setdefault("num_experts", raw["num_local_experts"])
        values["rope_theta"], values["rope_scaling"] = _rope(raw)
        values.setdefault("head_dim", raw["hidden_size"] // raw["num_attention_heads"])
        values.setdefault("intermediate_size", raw.get("intermediate_size", 0))
        values["mlp_only_layers"] = tuple(raw.get("mlp_only_layers") or ())
        if isinstance(values.get("eos_token_id"), list):
            values["eos_token_id"] = values["eos_token_id"][0]
        if model_type in {"qwen3", "llama"}:
            values["num_experts"] = 0
        values["qk_norm"] = model_type not in {"llama", "mixtral"}
        if model_type == "mixtral":  # every layer MoE, experts as wide as `intermediate_size`
            values.update(
                moe_intermediate_size=raw["intermediate_size"],
                norm_topk_prob=True,
                decoder_sparse_step=1,
            )
        if raw.get("dtype"):
            values["torch_dtype"] = str(raw["dtype"])
        ignored = known | MODELLED_HF_KEYS | {"architectures"}
        values["extra"] = {k: v for k, v in raw.items() if k not in ignored}
        return cls(**values)

    def save(self, directory: Path) -> None:
        text = json.dumps(self.to_hf_dict(), indent=2, sort_keys=True)
        (directory / "config.json").write_text(text + "\n")

    @classmethod
    def load(cls, directory: Path) -> ModelConfig:
        return cls.from_hf_dict(json.loads((directory / "config.json").read_text()))


_MODEL_TYPES = {"qwen3", "qwen3_moe", "qwen2_moe", "llama", "mixtral"}
_ARCHITECTURES = {
    "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "llama": "LlamaForCausalLM",
    "mixtral": "MixtralForCausalLM",
}
_MOE_KEYS = (
    "num_experts",
    "num_experts_per_tok",
    "moe_intermediate_size",
    "norm_topk_prob",
    "decoder_sparse_step",
    "mlp_only_layers",
    "router_aux_loss_coef",
)
MODELLED_HF_KEYS = frozenset(
    {
        "model_type",
        "dtype",
        "num_local_experts",
        "rope_parameters",
        "rope_scaling",
        "rope_theta",
        "hidden_act",
        "attention_bias",
        "mlp_bias",
        "sliding_window",
        "router_jitter_noise",
    }
)
"""config.json keys that `from_hf_dict` reads besides `ModelConfig`'s own fields."""
LLAMA3_ROPE_KEYS = (
    "factor",
    "low_freq_factor",
    "high_freq_factor",
    "original_max_position_embeddings",
)


def _refuse_what_the_model_lacks(raw: dict[str, Any]) -> None:
    """A checkpoint this model would load with different numerics is refused, not guessed."""
    if raw.get("attention_bias") or raw.get("mlp_bias"):
        raise ValueError("biases in the attention or MLP projections are not supported")
    if raw.get("hidden_act", "silu") != "silu":
        raise ValueError(f"unsupported hidden_act {raw['hidden_act']!r} (silu)")
    if raw.get("model_type") == "mixtral" and raw.get("sliding_window") is not None:
        raise ValueError("sliding-window attention is not supported (sliding_window: null)")
    if raw.get("model_type") == "mixtral" and raw.get("router_jitter_noise"):
        raise ValueError("router_jitter_noise is not supported (0.0)")


def _rope(raw: dict[str, Any]) -> tuple[float, dict[str, float] | None]:
    """(θ, Llama 3 scaling or None) from `rope_parameters` (transformers 5) or the older
    `rope_theta` + `rope_scaling`."""
    rope = raw.get("rope_parameters") or raw.get("rope_scaling") or {}
    default_theta = 10_000.0 if raw.get("model_type") in {"llama", "mixtral"} else 1e6
    theta = float(rope.get("rope_theta", raw.get("rope_theta", default_theta)))
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type == "default":
        return theta, None
    if rope_type != "llama3":
        raise ValueError(f"unsupported rope_type {rope_type!r} (default, llama3)")
    missing = [key for key in LLAMA3_ROPE_KEYS if key not in rope]
    if missing:
        raise ValueError(f"llama3 RoPE scaling lacks {', '.join(missing)}")
    return theta, {key: rope[key] for key in LLAMA3_ROPE_KEYS}


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
