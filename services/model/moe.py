"""Mixture of experts: a top-k softmax router, grouped SwiGLU experts, an optional shared
expert, and the load-balancing loss.

Shape suffixes: T tokens, D model width, F expert width, E experts, K experts per token.
Every expert matmul goes through `grouped_mm`, the one place where a different kernel (the
MXFP8 grouped GEMM) plugs in.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from etude.model.config import ModelConfig

# y[rows of group e] = x[rows of group e] @ w[e].T; offsets are the groups' cumulative ends.
GroupedMM = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def torch_grouped_mm(x_TD: torch.Tensor, w_EFD: torch.Tensor, offsets_E: torch.Tensor):
    """`torch._grouped_mm` (CPU: fp32 and bf16; CUDA: bf16 on sm90+)."""
    return torch._grouped_mm(x_TD, w_EFD.transpose(-2, -1), offs=offsets_E)


_grouped_mm_impl: GroupedMM = torch_grouped_mm


def grouped_mm(x_TD: torch.Tensor, w_EFD: torch.Tensor, offsets_E: torch.Tensor) -> torch.Tensor:
    return _grouped_mm_impl(x_TD, w_EFD, offsets_E)


def use_grouped_mm(impl: GroupedMM | None) -> GroupedMM:
    """Route every expert matmul through `impl` (None: back to `torch._grouped_mm`).
    Returns the previous implementation so a caller can restore it."""
    global _grouped_mm_impl
    previous, _grouped_mm_impl = _grouped_mm_impl, impl or torch_grouped_mm
    return previous


class Router(nn.Module):
    """Softmax over experts, then the top k; Qwen3-MoE's `mlp.gate`."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.top_k = config.num_experts_per_tok
        self.normalize = config.norm_topk_prob
        self.weight = nn.Parameter(torch.empty(config.num_experts, config.hidden_size))

    def forward(self, x_TD: torch.Tensor):
        logits_TE = F.linear(x_TD, self.weight)
        probs_TE = logits_TE.softmax(dim=-1, dtype=torch.float32)
        weights_TK, experts_TK = probs_TE.topk(self.top_k, dim=-1)
        if self.normalize:
            weights_TK = weights_TK / weights_TK.sum(dim=-1, keepdim=True)
        return probs_TE, weights_TK.to(x_TD.dtype), experts_TK


class GroupedExperts(nn.Module):
    """E SwiGLU experts stored as stacked weights (Hugging Face stores one module per
    expert; the state-dict adapter stacks and unstacks them)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        E, F_, D = config.num_experts, config.moe_intermediate_size, config.hidden_size
        self.gate_proj = nn.Parameter(torch.empty(E, F_, D))
        self.up_proj = nn.Parameter(torch.empty(E, F_, D))
        self.down_proj = nn.Parameter(torch.empty(E, D, F_))
        self.matmul: GroupedMM | None = None
        """This module's grouped GEMM (e.g. MXFP8, set per run); None: the global entry
        point `grouped_mm`."""

    def forward(self, x_TD: torch.Tensor, offsets_E: torch.Tensor) -> torch.Tensor:
        """x_TD holds the tokens sorted by expert; offsets_E the cumulative group ends."""
        mm = self.matmul or grouped_mm
        hidden_TF = F.silu(mm(x_TD, self.gate_proj, offsets_E)) * mm(x_TD, self.up_proj, offsets_E)
        return mm(hidden_TF, self.down_proj, offsets_E)


class DenseMLP(nn.Module):
    """SwiGLU MLP with Hugging Face's names (dense layers and the shared expert)."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MoE(nn.Module):
    """Qwen3-MoE's sparse MLP block (`mlp.gate`, `mlp.experts`), plus an optional shared
    expert (`mlp.shared_expert`, `mlp.shared_expert_gate`)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.num_experts = config.num_experts
        self.gate = Router(config)
        self.experts = GroupedExperts(config)
        self.shared_expert = None
        if config.shared_expert_intermediate_size:
            self.shared_expert = DenseMLP(
                config.hidden_size, config.shared_expert_intermediate_size
            )
            self.shared_expert_gate = nn.Linear(config.hidden_size, 1, bias=False)
        self.aux_loss: torch.Tensor | None = None
        """Load-balancing loss of the last forward (set only while training)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x_TD = x.reshape(-1, shape[-1])
        probs_TE, weights_TK, experts_TK = self.gate(x_TD)
        top_k = experts_TK.shape[-1]

        # Sort the (token, expert) pairs by expert so each expert reads one contiguous group.
        flat_experts = experts_TK.reshape(-1)
        order = flat_experts.argsort(stable=True)
        token_of_row = order // top_k
        counts_E = torch.bincount(flat_experts, minlength=self.num_experts)
        offsets_E = counts_E.cumsum(0).to(torch.int32)
        rows = self.experts(x_TD[token_of_row], offsets_E)
        rows = rows * weights_TK.reshape(-1)[order].unsqueeze(-1)
        out_TD = torch.zeros_like(x_TD).index_add_(0, token_of_row, rows)

        if self.shared_expert is not None:
            gate = torch.sigmoid(self.shared_expert_gate(x_TD))
            out_TD = out_TD + gate * self.shared_expert(x_TD)
        if self.training:
            self.aux_loss = load_balancing_loss(probs_TE, counts_E, top_k)
        return out_TD.reshape(shape)


def load_balancing_loss(probs_TE: torch.Tensor, counts_E: torch.Tensor, top_k: int) -> torch.Tensor:
    """Switch Transformer's auxiliary loss for one layer: E · Σ_e f_e · P_e, where f_e is the
    fraction of routing slots sent to expert e and P_e its mean router probability. Equals
    top_k when routing is perfectly uniform."""
    num_tokens, num_experts = probs_TE.shape
    fraction_E = counts_E.to(probs_TE.dtype) / max(num_tokens, 1)
    return num_experts * (fraction_E * probs_TE.mean(dim=0)).sum()
