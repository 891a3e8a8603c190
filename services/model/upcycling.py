"""Sparse upcycling (Komatsuzaki et al., 2022): a dense checkpoint becomes an MoE whose every
expert starts as a copy of the dense MLP it replaces.

At step 0 the MoE computes the dense model exactly: each token's output is Σₖ wₖ · MLP(x)
with the top-k weights renormalised to sum to one (`norm_topk_prob`), which is MLP(x) whatever
the router says. The router is therefore free to start random (std `initializer_range`)
rather than at zero: a zero router ties every expert and `topk` would send every token to the
first k, which would then see the same tokens, get the same gradients and never diverge. A
random one spreads the tokens, so experts see different data from the first step and split
apart, and the load-balancing loss trains the router from there (the task loss gives it no
gradient while the experts are identical).

Attention is kept as it is, so the layout follows the source: a Qwen3 source becomes Qwen3-MoE,
a Llama source Mixtral (Llama attention with a softmax top-k MoE, which transformers and
vLLM both load).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from etude.model.checkpoint import load_model, save_checkpoint
from etude.model.model import Transformer


def upcycle(dense: Transformer, num_experts: int, top_k: int, *, seed: int = 0) -> Transformer:
    """An MoE copy of `dense` with `num_experts` experts per layer, `top_k` per token; the
    dense model is left unchanged."""
    source = dense.config
    if source.is_moe:
        raise ValueError("the model is already an MoE; upcycle a dense checkpoint")
    if num_experts < 2:
        raise ValueError("upcycling needs at least 2 experts")
    config = dataclasses.replace(
        source,
        num_experts=num_experts,
        num_experts_per_tok=top_k,
        moe_intermediate_size=source.intermediate_size,
        norm_topk_prob=True,  # what makes the step-0 output exactly the dense one
        decoder_sparse_step=1,
        mlp_only_layers=(),
        shared_expert_intermediate_size=0,
        extra=dict(source.extra),
    )
    dtype = next(dense.parameters()).dtype
    moe = Transformer(config).to(dtype)
    missing, unexpected = moe.load_state_dict(dense.state_dict(), strict=False)
    stray = [name for name in (*missing, *unexpected) if ".mlp." not in name]
    if stray:
        raise RuntimeError(f"the dense and MoE models differ outside the MLPs: {stray[:5]}")
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for layer, dense_layer in zip(moe.model.layers, dense.model.layers, strict=True):
            block, mlp = layer.mlp, dense_layer.mlp
            for proj in ("gate_proj", "up_proj", "down_proj"):
                weight = getattr(mlp, proj).weight
                getattr(block.experts, proj).copy_(weight.expand(num_experts, *weight.shape))
            router = torch.randn(block.gate.weight.shape, generator=generator)
            block.gate.weight.copy_(router * config.initializer_range)
    return moe


def upcycle_checkpoint(
    source: Path, out: Path, *, num_experts: int, top_k: int, seed: int = 0
) -> Transformer:
    """Upcycle the checkpoint directory `source` into `out` (its tokenizer copied along)."""
    from etude.model.tokenizer import load_tokenizer  # transformers is slow to import

    if (out / "config.json").exists():
        raise FileExistsError(f"{out} already holds a checkpoint")
    moe = upcycle(load_model(source), num_experts, top_k, seed=seed)
    has_tokenizer = (source / "tokenizer_config.json").is_file()
    save_checkpoint(moe, out, load_tokenizer(source) if has_tokenizer else None)
    return moe
