"""The model against Hugging Face's Qwen3-MoE / Qwen3, in both directions, and the pieces
the trainer and the engine rely on (KV-cache forward, grouped-GEMM entry point, aux loss)."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from transformers import AutoModelForCausalLM, Qwen3Config, Qwen3MoeConfig

from etude.model import moe
from etude.model.checkpoint import build_model, load_model, save_checkpoint
from etude.model.config import ModelConfig, preset, tiny
from etude.model.kv_cache import CacheBatch, KVCache

TOLERANCE = 1e-4  # fp32 logits


def _small_moe_config(**changes) -> ModelConfig:
    config = dataclasses.replace(
        tiny(vocab_size=512),
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        num_hidden_layers=3,
        moe_intermediate_size=48,
        intermediate_size=96,
        num_experts=6,
        num_experts_per_tok=2,
        mlp_only_layers=(1,),
    )
    return dataclasses.replace(config, **changes)


def _tokens(vocab: int, shape=(2, 24), seed=0) -> torch.Tensor:
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("norm_topk_prob", [True, False])
def test_transformers_checkpoint_loads_with_equal_logits(tmp_path, norm_topk_prob):
    hf_config = Qwen3MoeConfig(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        num_experts=6,
        num_experts_per_tok=2,
        moe_intermediate_size=48,
        norm_topk_prob=norm_topk_prob,
        mlp_only_layers=[1],
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        max_position_embeddings=128,
    )
    torch.manual_seed(0)
    reference = AutoModelForCausalLM.from_config(hf_config, dtype=torch.float32).eval()
    reference.save_pretrained(tmp_path)

    ours = load_model(tmp_path).eval()
    assert ours.config.num_experts == 6 and ours.config.rope_theta == 10000.0
    tokens = _tokens(300)
    with torch.no_grad():
        expected, actual = reference(tokens).logits, ours(tokens).logits
    assert (expected - actual).abs().max() <= TOLERANCE


@pytest.mark.parametrize("dense", [False, True])
def test_our_checkpoint_loads_in_transformers_with_equal_logits(tmp_path, dense):
    config = _small_moe_config(num_experts=0) if dense else _small_moe_config()
    ours = build_model(config, seed=3).eval()
    save_checkpoint(ours, tmp_path)

    reference = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    assert isinstance(reference.config, Qwen3Config if dense else Qwen3MoeConfig)
    tokens = _tokens(512)
    with torch.no_grad():
        expected, actual = reference(tokens).logits, ours(tokens).logits
    assert (expected - actual).abs().max() <= TOLERANCE
    # And back: the round trip through our loader is exact.
    with torch.no_grad():
        assert torch.equal(load_model(tmp_path)(tokens).logits, actual)


def test_cached_forward_equals_full_forward():
    """Prefill a right-padded batch, then decode token by token: each step's logits equal a
    full causal forward over the sequence so far."""
    model = build_model(_small_moe_config(), seed=1).eval()
    cache = KVCache(model.config, num_slots=4, max_len=64)
    lengths = [7, 12]
    tokens = _tokens(512, (2, 12))
    slots = torch.tensor([2, 0])
    with torch.no_grad():
        last = torch.tensor([lengths[0] - 1, 12 + lengths[1] - 1])
        batch = CacheBatch(cache, slots, torch.tensor([0, 0]), 12)
        logits = model(tokens, cache=batch, logits_at=last).logits
        sequences = [tokens[0, :7].tolist(), tokens[1].tolist()]
        for step in range(5):
            for b, seq in enumerate(sequences):
                full = model(torch.tensor([seq])).logits[0, -1]
                assert (full - logits[b]).abs().max() <= TOLERANCE, (step, b)
            new = logits.argmax(-1)
            for seq, token in zip(sequences, new.tolist(), strict=True):
                seq.append(token)
            starts = torch.tensor([len(s) - 1 for s in sequences])
            logits = model(new[:, None], cache=CacheBatch(cache, slots, starts, 1)).logits[:, 0]


def test_expert_matmuls_go_through_the_grouped_mm_entry_point():
    model = build_model(_small_moe_config(), seed=0).eval()
    calls = []

    def counting(x, w, offsets):
        calls.append(int(offsets[-1]))
        return moe.torch_grouped_mm(x, w, offsets)

    previous = moe.use_grouped_mm(counting)
    try:
        with torch.no_grad():
            model(_tokens(512, (1, 10)))
    finally:
        moe.use_grouped_mm(previous)
    # 2 MoE layers (layer 1 is dense) × 3 matmuls, each over 10 tokens × top-2 rows.
    assert calls == [20] * 6


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_training_forward_returns_the_load_balancing_loss_and_gradients_reach_experts(dtype):
    model = build_model(_small_moe_config(), seed=0, dtype=dtype).train()
    out = model(_tokens(512, (2, 16)))
    assert out.aux_loss is not None
    # Switch loss is ≥ top_k (equality only for perfectly uniform routing); a fresh router
    # is close to uniform.
    assert 2.0 <= float(out.aux_loss.detach()) < 3.0
    loss = out.logits.float().logsumexp(-1).mean() + 0.01 * out.aux_loss
    loss.backward()
    experts = model.model.layers[0].mlp.experts
    assert experts.gate_proj.grad is not None and experts.gate_proj.grad.abs().sum() > 0
    assert model.model.layers[0].mlp.gate.weight.grad.abs().sum() > 0
    assert model.eval()(_tokens(512, (1, 4))).aux_loss is None


def test_shared_expert_changes_the_output_and_round_trips(tmp_path):
    model = build_model(_small_moe_config(shared_expert_intermediate_size=32), seed=0).eval()
    save_checkpoint(model, tmp_path)
    tokens = _tokens(512, (1, 8))
    with torch.no_grad():
        assert torch.equal(load_model(tmp_path)(tokens).logits, model(tokens).logits)


def test_presets_have_the_documented_sizes():
    assert 5e6 <= build_model(preset("tiny")).num_parameters <= 20e6
    assert preset("tiny-dense").num_experts == 0
    with pytest.raises(ValueError, match="unknown model preset"):
        preset("huge")
