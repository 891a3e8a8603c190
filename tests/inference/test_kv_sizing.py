"""The KV cache a vLLM service gets: sized in tokens from the run, not as a fraction of the
machine's memory."""

from __future__ import annotations

import json

import pytest
import torch
from pydantic import ValidationError

from etude.common.run_config import RunConfig
from etude.inference.backend_factory import vllm_kv_cache_bytes
from etude.inference.config import InferenceConfig
from etude.inference.kv_sizing import kv_bytes_per_token
from etude.trainer.driver import serving_env, serving_sizes

SMOLLM2_135M = {  # the figures of its config.json that size a KV cache
    "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
    "hidden_size": 576,
}  # fmt: skip


@pytest.fixture
def smollm2(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2_135M))
    return tmp_path


def test_a_token_costs_keys_and_values_of_every_layer_and_kv_head(smollm2, tmp_path):
    # 2 (K, V) × 30 layers × 3 KV heads × 64 (576 / 9) × 4 bytes
    assert kv_bytes_per_token(smollm2, "float32") == 46_080
    assert kv_bytes_per_token(smollm2, "bfloat16") == 23_040
    wrapped = tmp_path / "wrapped"
    wrapped.mkdir()
    explicit = {**SMOLLM2_135M, "head_dim": 128, "num_key_value_heads": None}
    (wrapped / "config.json").write_text(json.dumps({"text_config": explicit}))
    assert kv_bytes_per_token(wrapped, "float32") == 2 * 30 * 9 * 128 * 4  # MHA, own head_dim


def test_the_make_run_policy_gets_a_cache_for_its_episodes_not_a_fifth_of_the_machine(smollm2):
    run = RunConfig.model_validate({
        "policy": {"max_model_len": 4096},
        "rollout": {"workers": 1, "concurrency": 16, "max_episode_tokens": 3072},
    })  # fmt: skip
    sizes = serving_sizes(run)
    assert sizes == {"max_model_len": 4096, "max_num_seqs": 16, "kv_cache_tokens": 16 * 3072}
    config = InferenceConfig(backend="vllm", **sizes)
    assert vllm_kv_cache_bytes(config, smollm2) == 16 * 3072 * 46_080  # 2.1 GiB, not 5.3


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU, unset leaves the cache to vLLM")
def test_unset_on_a_cpu_the_cache_holds_every_sequence_at_full_length(smollm2):
    config = InferenceConfig(backend="vllm", max_num_seqs=8, max_model_len=1024)
    assert vllm_kv_cache_bytes(config, smollm2) == 8 * 1024 * 46_080


def test_a_cache_smaller_than_one_sequence_is_refused_with_the_reason():
    with pytest.raises(ValidationError, match="must hold one sequence of max_model_len"):
        InferenceConfig(max_model_len=4096, kv_cache_tokens=1000)
    short = RunConfig.model_validate(
        {
            "policy": {"max_model_len": 8192},
            "rollout": {"concurrency": 1, "max_episode_tokens": 512},
        }
    )
    assert serving_sizes(short)["kv_cache_tokens"] == 8192  # never below one sequence


def test_sizes_set_by_the_user_are_kept(monkeypatch, tmp_path):
    monkeypatch.setenv("ETUDE_INFERENCE__KV_CACHE_TOKENS", "99999")
    run = RunConfig.model_validate({"policy": {"init": "tiny"}})
    env = serving_env(run, tmp_path)
    assert "ETUDE_INFERENCE__KV_CACHE_TOKENS" not in env
    assert env["ETUDE_INFERENCE__MAX_NUM_SEQS"] == str(run.rollout.concurrency)
