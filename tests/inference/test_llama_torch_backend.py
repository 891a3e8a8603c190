"""The torch backend serving a Llama checkpoint directory (tied embeddings, no q/k norm) and
an upcycled Mixtral one, with live weight updates: full, partial, and through the tied head."""

from __future__ import annotations

import pytest
import torch

from etude.inference.engine import EngineConfig
from etude.inference.torch_backend import TorchBackend
from etude.inference.types import GenerationRequest, InferenceError, SamplingParams
from etude.model.checkpoint import build_model, load_model, save_checkpoint
from etude.model.upcycling import upcycle
from tests.inference.completions import run_request
from tests.model.test_llama import llama_config

TOLERANCE = 1e-4
PROMPTS = ["def add(a, b):\n", "x = [1, 2"]


def _request(request_id: str, prompt, max_tokens: int = 10) -> GenerationRequest:
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    return GenerationRequest(request_id=request_id, prompt_token_ids=prompt, sampling=params)


@torch.no_grad()
def _expected(model, prompt, max_tokens: int = 10) -> tuple[list[int], torch.Tensor]:
    """Greedy tokens by full recompute, and their logprobs under `model`."""
    tokens = list(prompt)
    for _ in range(max_tokens):
        tokens.append(int(model(torch.tensor([tokens])).logits[0, -1].argmax()))
    logprobs = model(torch.tensor([tokens])).logits[0].log_softmax(-1)
    positions = torch.arange(len(prompt) - 1, len(tokens) - 1)
    return tokens[len(prompt) :], logprobs[positions, torch.tensor(tokens[len(prompt) :])]


async def _assert_serves(backend, model, tokenizer, tag: str) -> None:
    for i, text in enumerate(PROMPTS):
        prompt = tuple(tokenizer.encode(text))
        (c,) = (await run_request(backend, _request(f"{tag}-{i}", prompt))).values()
        tokens, logprobs = _expected(model, prompt)
        assert c["tokens"] == tokens
        assert (torch.tensor(c["logprobs"]) - logprobs).abs().max() <= TOLERANCE


@pytest.fixture
def llama_dir(tmp_path, tokenizer):
    config = llama_config(vocab_size=len(tokenizer), eos_token_id=tokenizer.eos_token_id)
    save_checkpoint(build_model(config, seed=0), tmp_path / "llama", tokenizer)
    return tmp_path / "llama"


async def test_a_llama_checkpoint_is_served_and_takes_full_and_partial_updates(
    llama_dir, tokenizer
):
    backend = TorchBackend.load(llama_dir, config=EngineConfig(max_num_seqs=4))
    try:
        assert backend.model_name == "llama"
        await _assert_serves(backend, load_model(llama_dir).eval(), tokenizer, "v0")

        # The trainer's full state dict: lm_head.weight is the tied embedding's second name.
        trained = build_model(load_model(llama_dir).config, seed=1).eval()
        full = list(trained.state_dict().items())
        assert "lm_head.weight" in dict(full)
        assert await backend.update_weights(1, full) == len(full)
        await _assert_serves(backend, trained, tokenizer, "v1")

        # A partial update: one layer's attention and the embedding; the rest stays v1.
        partial_source = build_model(trained.config, seed=2)
        names = ["model.layers.1.self_attn.q_proj.weight", "model.embed_tokens.weight"]
        partial = [(name, partial_source.state_dict()[name]) for name in names]
        assert await backend.update_weights(2, partial) == 2
        expected = build_model(trained.config, seed=1).eval()
        expected.load_state_dict(dict(partial), strict=False)
        assert torch.equal(expected.lm_head.weight, partial_source.lm_head.weight)  # tied
        await _assert_serves(backend, expected, tokenizer, "v2")

        # Through the tied head's name alone: the embedding changes with it.
        head = build_model(trained.config, seed=3).lm_head.weight.detach()
        await backend.update_weights(3, [("lm_head.weight", head)])
        served = backend.engine.model
        assert torch.equal(served.model.embed_tokens.weight, head)
        with pytest.raises(InferenceError, match="no tensor"):
            await backend.update_weights(4, [("model.layers.0.self_attn.q_norm.weight", head)])
        assert backend.policy_version == 3
    finally:
        await backend.close()


async def test_an_upcycled_llama_is_served_from_its_checkpoint(tmp_path, llama_dir, tokenizer):
    moe = upcycle(load_model(llama_dir), num_experts=4, top_k=2, seed=0)
    save_checkpoint(moe, tmp_path / "moe", tokenizer)
    backend = TorchBackend.load(tmp_path / "moe", config=EngineConfig(max_num_seqs=4))
    try:
        assert backend.engine.model.config.model_type == "mixtral"
        await _assert_serves(backend, load_model(llama_dir).eval(), tokenizer, "dense")
        # The trainer's stacked expert names update it in place.
        trained = build_model(moe.config, seed=5).eval()
        await backend.update_weights(1, trained.state_dict().items())
        await _assert_serves(backend, trained, tokenizer, "trained")
    finally:
        await backend.close()
