"""The policy network: Qwen3-MoE, dense Qwen3, Llama or Mixtral (see `ModelConfig`) with
Hugging Face's module names, so that `state_dict()` keys equal the checkpoint's tensor names
except for the stacked experts (and Mixtral's expert names, see the state-dict adapter).

Shape suffixes: B batch, T tokens, D model width, H heads, K key/value heads, Dh head width,
V vocabulary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from etude.model.config import ModelConfig
from etude.model.kv_cache import CacheBatch
from etude.model.moe import DenseMLP, MoE


class RMSNorm(nn.Module):
    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32 whatever the activation dtype, as Hugging Face does.
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


def rope_frequencies(config: ModelConfig) -> torch.Tensor:
    """RoPE's inverse frequencies [Dh/2], with Llama 3's scaling when configured: wavelengths
    longer than the original context are stretched by `factor`, shorter ones than
    context / high_freq_factor kept, the band between interpolated."""
    exponents = torch.arange(0, config.head_dim, 2, dtype=torch.int64).float()
    inv_freq = 1.0 / (config.rope_theta ** (exponents / config.head_dim))
    if config.rope_scaling is None:
        return inv_freq
    scaling = config.rope_scaling
    factor, context = scaling["factor"], scaling["original_max_position_embeddings"]
    low, high = scaling["low_freq_factor"], scaling["high_freq_factor"]
    wavelength = 2 * math.pi / inv_freq
    stretched = torch.where(wavelength > context / low, inv_freq / factor, inv_freq)
    smooth = (context / wavelength - low) / (high - low)
    interpolated = (1 - smooth) * stretched / factor + smooth * stretched
    between = (wavelength >= context / high) & (wavelength <= context / low)
    return torch.where(between, interpolated, stretched)


class RotaryEmbedding(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.register_buffer("inv_freq", rope_frequencies(config), persistent=False)

    def forward(self, positions_BT: torch.Tensor, dtype: torch.dtype):
        angles = positions_BT.float()[..., None] * self.inv_freq  # [B, T, Dh/2]
        angles = torch.cat((angles, angles), dim=-1)
        return angles.cos().to(dtype), angles.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


def apply_rotary(x_BTHD: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    cos, sin = cos[:, :, None, :], sin[:, :, None, :]
    return x_BTHD * cos + _rotate_half(x_BTHD) * sin


class Attention(nn.Module):
    """Grouped-query attention, with RMSNorm on each query and key head (Qwen3) or without
    (Llama, `qk_norm=False`: no `q_norm`/`k_norm` tensors at all)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = config.head_dim
        width = config.hidden_size
        self.q_proj = nn.Linear(width, self.num_heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(width, self.num_kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(width, self.num_kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(self.num_heads * self.head_dim, width, bias=False)
        if config.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        else:
            self.q_norm = self.k_norm = nn.Identity()

    def forward(
        self, x_BTD, rope, layer: int, cache: CacheBatch | None, prefix: SharedPrefix | None
    ) -> torch.Tensor:
        B, T, _ = x_BTD.shape
        q = self.q_norm(self.q_proj(x_BTD).view(B, T, self.num_heads, self.head_dim))
        k = self.k_norm(self.k_proj(x_BTD).view(B, T, self.num_kv_heads, self.head_dim))
        v = self.v_proj(x_BTD).view(B, T, self.num_kv_heads, self.head_dim)
        q, k = apply_rotary(q, *rope), apply_rotary(k, *rope)
        if prefix is not None and prefix.recording:
            prefix.keys.append(k)
            prefix.values.append(v)
        elif prefix is not None:  # every sequence continues the one shared prefix
            P = prefix.length
            k = torch.cat((prefix.keys[layer].to(k.dtype).expand(B, P, -1, -1), k), dim=1)
            v = torch.cat((prefix.values[layer].to(v.dtype).expand(B, P, -1, -1), v), dim=1)
            out = F.scaled_dot_product_attention(
                q.transpose(1, 2),
                k.transpose(1, 2),
                v.transpose(1, 2),
                attn_mask=prefix.mask(T, q.device),
                enable_gqa=True,
            )
            return self.o_proj(out.transpose(1, 2).reshape(B, T, -1))
        if cache is None:
            out = F.scaled_dot_product_attention(
                q.transpose(1, 2),
                k.transpose(1, 2),
                v.transpose(1, 2),
                is_causal=True,
                enable_gqa=True,
            )
        else:
            k, v = cache.write_and_read(layer, k, v)
            out = F.scaled_dot_product_attention(
                q.transpose(1, 2),
                k.transpose(1, 2).to(q.dtype),
                v.transpose(1, 2).to(q.dtype),
                attn_mask=cache.mask,
                enable_gqa=True,
            )
        return self.o_proj(out.transpose(1, 2).reshape(B, T, -1))


class DecoderLayer(nn.Module):
    def __init__(self, config: ModelConfig, index: int) -> None:
        super().__init__()
        self.index = index
        self.self_attn = Attention(config)
        self.mlp = (
            MoE(config)
            if config.is_moe_layer(index)
            else DenseMLP(config.hidden_size, config.intermediate_size)
        )
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, x, rope, cache: CacheBatch | None, prefix: SharedPrefix | None = None):
        x = x + self.self_attn(self.input_layernorm(x), rope, self.index, cache, prefix)
        return x + self.mlp(self.post_attention_layernorm(x))


class Backbone(nn.Module):
    """Hugging Face's `model.` prefix: embeddings, decoder layers, final norm."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList(
            DecoderLayer(config, i) for i in range(config.num_hidden_layers)
        )
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary = RotaryEmbedding(config)


@dataclass(slots=True)
class SharedPrefix:
    """The keys and values, per layer, of a prefix several sequences share (a GRPO group's
    prompt): `Transformer.forward_prefix` runs it once, and a forward given it runs only what
    follows, each sequence attending to the prefix and causally to itself. Differentiable:
    gradients reach the layers that computed the prefix's keys and values, once."""

    length: int
    keys: list[torch.Tensor] = field(default_factory=list)
    """[1, P, K, Dh] per layer, after RoPE."""
    values: list[torch.Tensor] = field(default_factory=list)
    recording: bool = True
    """Set while `forward_prefix` fills it."""

    def mask(self, T: int, device: torch.device) -> torch.Tensor:
        """[T, P + T]: query t sees the whole prefix and the sequence up to itself."""
        keys = torch.arange(self.length + T, device=device)
        return keys[None, :] <= (self.length + torch.arange(T, device=device))[:, None]


@dataclass(slots=True)
class ForwardOutput:
    logits: torch.Tensor
    """[B, T, V], or [N, V] when `logits_at` selected N positions."""
    aux_loss: torch.Tensor | None
    """Mean load-balancing loss over the MoE layers (training only; None otherwise)."""


class Transformer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.model = Backbone(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.checkpoint_layers = False
        """Training: keep only each trained layer's input and recompute the rest in the
        backward pass (activation checkpointing; `policy.activation_checkpointing`)."""

    def forward(
        self,
        tokens_BT: torch.Tensor,
        *,
        cache: CacheBatch | None = None,
        logits_at: torch.Tensor | None = None,
        prefix: SharedPrefix | None = None,
    ) -> ForwardOutput:
        """Without a cache: a causal forward over whole sequences (training, scoring). With
        one: new tokens attend to the cached prefix. With a `prefix`: the sequences continue
        that shared prefix (training a group of completions of one prompt). `logits_at`
        indexes the flattened [B*T] positions whose logits are wanted (a sampler wants one
        per sequence)."""
        h, aux = self.hidden(tokens_BT, cache=cache, at=logits_at, prefix=prefix)
        return ForwardOutput(self.lm_head(h), aux)

    def hidden(
        self,
        tokens_BT: torch.Tensor,
        *,
        cache: CacheBatch | None = None,
        at: torch.Tensor | None = None,
        prefix: SharedPrefix | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`forward` without the output layer: the final hidden states ([B, T, D], or [N, D]
        at the flattened positions `at`) and the MoE load-balancing loss. A caller that
        wants logits over a large vocabulary at many positions applies `lm_head` a piece at
        a time (etude.trainer.batch)."""
        B, T = tokens_BT.shape
        h = self._hidden(tokens_BT, cache, prefix)
        if at is not None:
            h = h.reshape(B * T, -1)[at]
        return h, self._aux_loss()

    def forward_prefix(self, tokens_1P: torch.Tensor) -> SharedPrefix:
        """Run a prefix shared by several sequences (one row) once; see `SharedPrefix`."""
        prefix = SharedPrefix(tokens_1P.shape[1])
        self._hidden(tokens_1P, None, prefix)
        prefix.recording = False
        return prefix

    def _hidden(self, tokens_BT, cache: CacheBatch | None, prefix: SharedPrefix | None):
        B, T = tokens_BT.shape
        h = self.model.embed_tokens(tokens_BT)
        if cache is not None:
            positions = cache.positions
        else:
            start = 0 if prefix is None or prefix.recording else prefix.length
            positions = torch.arange(start, start + T, device=tokens_BT.device).expand(B, T)
        rope = self.model.rotary(positions, h.dtype)
        # Not while a shared prefix records its keys: a recomputed layer would record twice.
        recompute = (
            self.checkpoint_layers and torch.is_grad_enabled() and cache is None
            and (prefix is None or not prefix.recording)
        )  # fmt: skip
        for layer in self.model.layers:
            if recompute and any(p.requires_grad for p in layer.parameters()):
                h = checkpoint(layer, h, rope, None, prefix, use_reentrant=False)
            else:
                h = layer(h, rope, cache, prefix)
        return self.model.norm(h)

    def _aux_loss(self) -> torch.Tensor | None:
        if not self.training:
            return None
        losses = [m.aux_loss for m in self.modules() if isinstance(m, MoE)]
        losses = [loss for loss in losses if loss is not None]
        return torch.stack(losses).mean() if losses else None

    @property
    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    @torch.no_grad()
    def init_weights(self, seed: int = 0) -> None:
        """Normal(0, initializer_range) for matrices, ones for norms; reproducible by seed."""
        generator = torch.Generator().manual_seed(seed)
        std = self.config.initializer_range
        for name, param in self.named_parameters():
            if name.endswith("norm.weight"):
                param.fill_(1.0)
            else:
                values = torch.randn(param.shape, generator=generator) * std
                param.copy_(values.to(param.dtype))
