"""Shared fixtures: a small MoE policy with the bundled tokenizer, and a torch backend on it."""

from __future__ import annotations

import dataclasses

import pytest

from etude.inference.engine import EngineConfig
from etude.inference.torch_backend import TorchBackend
from etude.model.checkpoint import build_model
from etude.model.config import tiny
from etude.model.tokenizer import load_tokenizer


def small_moe_config(vocab_size: int):
    return dataclasses.replace(
        tiny(vocab_size),
        hidden_size=64,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        num_hidden_layers=2,
        moe_intermediate_size=64,
        num_experts=4,
        max_position_embeddings=256,
    )


@pytest.fixture(scope="session")
def tokenizer():
    return load_tokenizer()


@pytest.fixture
def model(tokenizer):
    return build_model(small_moe_config(len(tokenizer)), seed=0).eval()


@pytest.fixture
async def backend(model, tokenizer):
    backend = TorchBackend(model, tokenizer, EngineConfig(max_num_seqs=8, max_model_len=256))
    yield backend
    await backend.close()
