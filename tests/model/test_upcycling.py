"""Sparse upcycling: the MoE equals the dense model at step 0, keeps the source's attention
(Llama → Mixtral, Qwen3 → Qwen3-MoE, both loaded by transformers), and trains apart."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForCausalLM, MixtralForCausalLM, Qwen3MoeForCausalLM
from typer.testing import CliRunner

from etude.cli.app import app
from etude.model.checkpoint import build_model, init_checkpoint, load_model, save_checkpoint
from etude.model.config import ModelConfig, tiny_dense
from etude.model.tokenizer import load_tokenizer
from etude.model.upcycling import upcycle
from tests.model.test_llama import llama_config

STEP0_TOLERANCE = 1e-5  # fp32 logits, upcycled vs dense
HF_TOLERANCE = 1e-4


def _qwen3_dense_config() -> ModelConfig:
    return dataclasses.replace(
        tiny_dense(512), hidden_size=64, head_dim=32, num_hidden_layers=2, intermediate_size=96
    )


def _tokens(vocab: int, shape=(2, 32), seed=0) -> torch.Tensor:
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(
    ("family", "layout", "hf_class"),
    [("llama", "mixtral", MixtralForCausalLM), ("qwen3", "qwen3_moe", Qwen3MoeForCausalLM)],
)
def test_upcycled_model_equals_the_dense_one_and_transformers_loads_it(
    tmp_path, family, layout, hf_class
):
    config = llama_config() if family == "llama" else _qwen3_dense_config()
    dense = build_model(config, seed=2).eval()
    moe = upcycle(dense, num_experts=4, top_k=2, seed=0).eval()
    assert moe.config.model_type == layout and moe.config.qk_norm == config.qk_norm
    assert moe.config.moe_intermediate_size == config.intermediate_size
    tokens = _tokens(512)
    with torch.no_grad():
        expected, actual = dense(tokens).logits, moe(tokens).logits
    assert (expected - actual).abs().max() <= STEP0_TOLERANCE
    # The router is not degenerate: tokens reach every expert from step 0.
    with torch.no_grad():
        hidden = moe.model.embed_tokens(tokens).reshape(-1, config.hidden_size)
        _, _, experts = moe.model.layers[0].mlp.gate(hidden)
    assert set(experts.flatten().tolist()) == {0, 1, 2, 3}

    save_checkpoint(moe, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["model_type"] == layout
    reference = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    assert isinstance(reference, hf_class)
    with torch.no_grad():
        assert (reference(tokens).logits - actual).abs().max() <= HF_TOLERANCE
        assert torch.equal(load_model(tmp_path)(tokens).logits, actual)


def test_upcycled_model_trains_and_its_experts_diverge():
    dense = build_model(llama_config(), seed=2)
    dense_gate = dense.model.layers[0].mlp.gate_proj.weight.detach().clone()
    moe = upcycle(dense, num_experts=4, top_k=2, seed=0).train()
    optimizer = torch.optim.AdamW(moe.parameters(), lr=1e-3)
    tokens = _tokens(512, (2, 64), seed=1)

    def loss() -> torch.Tensor:
        out = moe(tokens[:, :-1])
        task = F.cross_entropy(out.logits.flatten(0, 1), tokens[:, 1:].flatten())
        return task + moe.config.router_aux_loss_coef * out.aux_loss

    router_before = moe.model.layers[0].mlp.gate.weight.detach().clone()
    first = loss()
    first.backward()
    optimizer.step()
    optimizer.zero_grad()
    with torch.no_grad():
        second = loss()
    assert second.item() < first.item()
    experts = moe.model.layers[0].mlp.experts.gate_proj.detach()
    assert (experts[0] - experts[1]).abs().max() > 0  # different tokens, different updates
    assert not torch.equal(moe.model.layers[0].mlp.gate.weight, router_before)
    # The experts are copies, not views: the dense model it came from is untouched.
    assert torch.equal(dense.model.layers[0].mlp.gate_proj.weight, dense_gate)


def test_upcycling_refuses_an_moe_and_too_few_experts():
    dense = build_model(llama_config(), seed=0)
    moe = upcycle(dense, num_experts=2, top_k=1)
    with pytest.raises(ValueError, match="already an MoE"):
        upcycle(moe, num_experts=4, top_k=2)
    with pytest.raises(ValueError, match="at least 2"):
        upcycle(dense, num_experts=1, top_k=1)
    with pytest.raises(ValueError, match="num_experts_per_tok"):
        upcycle(dense, num_experts=4, top_k=5)


def test_cli_upcycles_a_checkpoint_with_its_tokenizer(tmp_path):
    source, out = tmp_path / "dense", tmp_path / "moe"
    init_checkpoint("tiny-dense", source, seed=1)
    result = CliRunner().invoke(
        app,
        ["model", "upcycle", str(source), "--experts", "4", "--top-k", "2", "--out", str(out)],
    )
    assert result.exit_code == 0, result.output
    assert "4 experts" in result.output
    moe, dense = load_model(out).eval(), load_model(source).eval()
    assert (moe.config.num_experts, moe.config.num_experts_per_tok) == (4, 2)
    assert load_tokenizer(out).encode("x = 1") == load_tokenizer(source).encode("x = 1")
    tokens = _tokens(dense.config.vocab_size)
    with torch.no_grad():
        assert (moe(tokens).logits - dense(tokens).logits).abs().max() <= STEP0_TOLERANCE

    again = CliRunner().invoke(
        app,
        ["model", "upcycle", str(source), "--experts", "4", "--top-k", "2", "--out", str(out)],
    )
    assert again.exit_code == 1 and "already holds a checkpoint" in again.output


def test_an_moe_with_llama_attention_must_fit_the_mixtral_layout():
    with pytest.raises(ValueError, match="Mixtral"):
        dataclasses.replace(
            llama_config(), num_experts=4, moe_intermediate_size=32, mlp_only_layers=(1,)
        )
    with pytest.raises(ValueError, match="Mixtral"):
        dataclasses.replace(
            llama_config(), num_experts=4, moe_intermediate_size=32, norm_topk_prob=False
        )
