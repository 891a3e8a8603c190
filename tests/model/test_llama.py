"""The Llama family against Hugging Face's LlamaForCausalLM on the same weights, both ways:
no q/k norm, tied embeddings, RoPE θ from the config (and Llama 3's scaling), the KV-cache
path, and what is refused."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from etude.model.checkpoint import build_model, load_model, save_checkpoint
from etude.model.config import ModelConfig
from etude.model.kv_cache import CacheBatch, KVCache

TOLERANCE = 1e-4  # fp32 logits
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500_000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 16,  # short, so that 24 tokens cross every band
}


def llama_config(**changes) -> ModelConfig:
    """A small Llama: GQA 4/2, head 32, tied embeddings, θ 10⁵ like SmolLM2."""
    values = dict(
        vocab_size=512,
        hidden_size=64,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        intermediate_size=96,
        qk_norm=False,
        tie_word_embeddings=True,
        rope_theta=100_000.0,
        rms_norm_eps=1e-5,
        max_position_embeddings=128,
    )
    return ModelConfig(**(values | changes))


def _hf_llama(**changes) -> LlamaConfig:
    values = dict(
        vocab_size=300,
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        rms_norm_eps=1e-5,
        rope_parameters={"rope_type": "default", "rope_theta": 100_000.0},
        max_position_embeddings=128,
    )
    return LlamaConfig(**(values | changes))


def _tokens(vocab: int, shape=(2, 24), seed=0) -> torch.Tensor:
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("rope", ["default", "llama3"])
def test_transformers_llama_loads_with_equal_logits(tmp_path, rope):
    changes = {"rope_parameters": LLAMA3_ROPE} if rope == "llama3" else {}
    torch.manual_seed(0)
    reference = LlamaForCausalLM(_hf_llama(**changes)).eval()
    reference.save_pretrained(tmp_path)

    ours = load_model(tmp_path).eval()
    assert (ours.config.model_type, ours.config.qk_norm) == ("llama", False)
    assert ours.config.tie_word_embeddings and ours.lm_head.weight is ours.model.embed_tokens.weight
    assert (ours.config.rope_scaling is None) == (rope == "default")
    tokens = _tokens(300)
    with torch.no_grad():
        expected, actual = reference(tokens).logits, ours(tokens).logits
    assert (expected - actual).abs().max() <= TOLERANCE


@pytest.mark.parametrize("rope", ["default", "llama3"])
def test_our_llama_checkpoint_loads_in_transformers_with_equal_logits(tmp_path, rope):
    scaling = {k: v for k, v in LLAMA3_ROPE.items() if k not in {"rope_type", "rope_theta"}}
    config = llama_config(rope_scaling=scaling if rope == "llama3" else None)
    ours = build_model(config, seed=3).eval()
    save_checkpoint(ours, tmp_path)

    written = json.loads((tmp_path / "config.json").read_text())
    assert written["model_type"] == "llama" and written["architectures"] == ["LlamaForCausalLM"]
    reference = AutoModelForCausalLM.from_pretrained(tmp_path, dtype=torch.float32).eval()
    assert isinstance(reference, LlamaForCausalLM)
    # The same tensor names both ways: the file holds Hugging Face's (tied: no lm_head).
    file_names = set(load_file(tmp_path / "model.safetensors"))
    assert file_names == set(reference.state_dict()) - {"lm_head.weight"}
    assert set(ours.state_dict()) == set(reference.state_dict())
    assert not any("q_norm" in name or "k_norm" in name for name in file_names)
    tokens = _tokens(512)
    with torch.no_grad():
        expected, actual = reference(tokens).logits, ours(tokens).logits
        assert (expected - actual).abs().max() <= TOLERANCE
        assert torch.equal(load_model(tmp_path)(tokens).logits, actual)


def test_cached_generation_equals_full_forward_for_llama():
    """Prefill two prompts of different lengths, then decode greedily: every step's logits
    equal a full causal forward over the sequence so far."""
    model = build_model(llama_config(), seed=1).eval()
    cache = KVCache(model.config, num_slots=3, max_len=64)
    tokens = _tokens(512, (2, 10))
    slots = torch.tensor([1, 2])
    sequences = [tokens[0, :6].tolist(), tokens[1].tolist()]
    with torch.no_grad():
        last = torch.tensor([5, 10 + 9])
        batch = CacheBatch(cache, slots, torch.tensor([0, 0]), 10)
        logits = model(tokens, cache=batch, logits_at=last).logits
        for step in range(6):
            for b, seq in enumerate(sequences):
                full = model(torch.tensor([seq])).logits[0, -1]
                assert (full - logits[b]).abs().max() <= TOLERANCE, (step, b)
            new = logits.argmax(-1)
            for seq, token in zip(sequences, new.tolist(), strict=True):
                seq.append(token)
            starts = torch.tensor([len(s) - 1 for s in sequences])
            logits = model(new[:, None], cache=CacheBatch(cache, slots, starts, 1)).logits[:, 0]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"attention_bias": True}, "biases"),
        ({"mlp_bias": True}, "biases"),
        ({"hidden_act": "gelu"}, "hidden_act"),
        ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4.0}}, "yarn"),
        ({"rope_parameters": {"rope_type": "llama3", "rope_theta": 1e4}}, "lacks factor"),
        ({"model_type": "gpt2"}, "unsupported model_type"),
    ],
)
def test_llama_features_the_model_lacks_are_refused(change, message):
    raw = _hf_llama().to_dict() | change
    with pytest.raises(ValueError, match=message):
        ModelConfig.from_hf_dict(raw)


def test_llama_config_round_trips_through_config_json():
    scaling = {k: v for k, v in LLAMA3_ROPE.items() if k not in {"rope_type", "rope_theta"}}
    config = llama_config(rope_scaling=scaling, eos_token_id=2, pad_token_id=2)
    again = ModelConfig.from_hf_dict(json.loads(json.dumps(config.to_hf_dict())))
    assert again == config
