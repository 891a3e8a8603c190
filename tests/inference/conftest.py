"""Shared fixtures: a small MoE policy with the bundled tokenizer, a torch backend on it, and
the OpenAI-compatible HTTP API over that backend (a real uvicorn server on loopback)."""

from __future__ import annotations

import asyncio
import dataclasses

import httpx
import pytest
import uvicorn

from etude.common.auth import bearer_header
from etude.common.net import free_port
from etude.common.settings import get_settings
from etude.inference.engine import EngineConfig
from etude.inference.openai_api import create_app
from etude.inference.serving import Serving
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


@pytest.fixture
async def http(backend):
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(Serving(backend)),
            host="127.0.0.1",
            port=free_port("127.0.0.1"),
            log_level="warning",
            lifespan="off",
        )
    )
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    port = server.servers[0].sockets[0].getsockname()[1]
    headers = bearer_header(get_settings().auth, "rollout")
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", timeout=30, headers=headers
    ) as client:
        yield client
    server.should_exit = True
    await task
