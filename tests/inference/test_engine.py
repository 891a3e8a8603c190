"""The torch engine against plain forward passes of the same model."""

from __future__ import annotations

import asyncio

import pytest
import torch

from etude.inference.types import GenerationRequest, InferenceError, SamplingParams
from etude.model.checkpoint import build_model
from tests.inference.completions import run_request

TOLERANCE = 1e-4


def _prompt(tokenizer, text: str) -> tuple[int, ...]:
    return tuple(tokenizer.encode(text))


PROMPTS = ["def add(a, b):\n", "import os\nclass Cache:\n    def get(self, key", "x = [1, 2"]


def _greedy(request_id, prompt, max_tokens=12, **sampling) -> GenerationRequest:
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, **sampling)
    return GenerationRequest(request_id=request_id, prompt_token_ids=prompt, sampling=params)


@torch.no_grad()
def _naive_greedy(model, prompt, max_tokens, eos) -> list[int]:
    """Full recompute of the whole sequence for every token: no cache, no batching."""
    tokens = list(prompt)
    for _ in range(max_tokens):
        token = int(model(torch.tensor([tokens])).logits[0, -1].argmax())
        tokens.append(token)
        if token == eos:
            break
    return tokens[len(prompt) :]


@torch.no_grad()
def _forward_logprobs(model, prompt, completion) -> torch.Tensor:
    sequence = torch.tensor([list(prompt) + list(completion)])
    logprobs = model(sequence).logits[0].log_softmax(-1)
    positions = torch.arange(len(prompt) - 1, sequence.shape[1] - 1)
    return logprobs[positions, sequence[0, len(prompt) :]]


async def test_concurrent_greedy_equals_a_full_recompute_loop(backend, model, tokenizer):
    prompts = [_prompt(tokenizer, p) for p in PROMPTS]
    results = await asyncio.gather(
        *(run_request(backend, _greedy(f"r{i}", p)) for i, p in enumerate(prompts))
    )
    for prompt, result in zip(prompts, results, strict=True):
        expected = _naive_greedy(model, prompt, 12, tokenizer.eos_token_id)
        assert result[0]["tokens"] == expected
        assert result[0]["reason"] == (
            "stop" if expected[-1] == tokenizer.eos_token_id else "length"
        )
        assert result[0]["text"] == tokenizer.decode(expected)


async def test_logprobs_equal_the_models_forward_on_the_generated_sequence(
    backend, model, tokenizer
):
    prompt = _prompt(tokenizer, PROMPTS[1])
    params = SamplingParams(temperature=1.0, top_k=50, top_p=0.9, max_tokens=16, seed=7)
    result = await run_request(
        backend, GenerationRequest(request_id="lp", prompt_token_ids=prompt, sampling=params)
    )
    completion = result[0]["tokens"]
    expected = _forward_logprobs(model, prompt, completion)
    # Logprobs are the model's own (before temperature and filtering), as a trainer computes.
    assert torch.allclose(torch.tensor(result[0]["logprobs"]), expected, atol=TOLERANCE, rtol=0)


async def test_seeded_output_does_not_depend_on_batching_or_n(backend, tokenizer):
    prompt = _prompt(tokenizer, PROMPTS[0])

    def seeded(request_id, n):
        params = SamplingParams(temperature=0.8, max_tokens=10, seed=123, n=n)
        return GenerationRequest(request_id=request_id, prompt_token_ids=prompt, sampling=params)

    alone = await run_request(backend, seeded("alone", 1))
    busy = [
        run_request(backend, _greedy(f"other{i}", _prompt(tokenizer, p), 20))
        for i, p in enumerate(PROMPTS)
    ]
    together, *_ = await asyncio.gather(run_request(backend, seeded("with-n", 3)), *busy)
    assert together[0]["tokens"] == alone[0]["tokens"]
    assert len(together) == 3 and all(len(c["tokens"]) == 10 for c in together.values())
    # The n completions are distinct samples, not copies.
    assert len({tuple(c["tokens"]) for c in together.values()}) > 1
    again = await run_request(backend, seeded("again", 3))
    assert [again[i]["tokens"] for i in range(3)] == [together[i]["tokens"] for i in range(3)]


async def test_stop_string_ends_the_completion_and_is_cut_from_the_text(backend, tokenizer):
    prompt = _prompt(tokenizer, PROMPTS[0])
    free = (await run_request(backend, _greedy("free", prompt, 16)))[0]
    assert len(free["text"]) >= 6
    stop = free["text"][3:6]
    cut = (await run_request(backend, _greedy("cut", prompt, 16, stop=(stop,))))[0]
    assert cut["reason"] == "stop"
    assert cut["text"] == free["text"][: free["text"].index(stop)]
    assert len(cut["tokens"]) < len(free["tokens"])


async def test_a_stop_token_ends_the_completion_and_is_kept(backend, tokenizer):
    prompt = _prompt(tokenizer, PROMPTS[0])
    free = (await run_request(backend, _greedy("free-ids", prompt, 16)))[0]
    stop_token = free["tokens"][4]
    cut = await run_request(backend, _greedy("cut-ids", prompt, 16, stop_token_ids=(stop_token,)))
    first = free["tokens"].index(stop_token)
    assert cut[0]["tokens"] == free["tokens"][: first + 1]
    assert cut[0]["reason"] == "stop"


async def test_update_weights_mid_stream_tags_later_tokens_with_the_new_version(backend, tokenizer):
    replacement = build_model(backend.engine.model.config, seed=99)
    prompt = _prompt(tokenizer, PROMPTS[2])
    request = _greedy("long", prompt, max_tokens=60)
    versions: list[int] = []
    swapped = False
    async for delta in backend.generate(request):
        versions += delta.policy_versions
        if len(versions) >= 5 and not swapped:
            swapped = True
            loaded = await backend.update_weights(3, replacement.state_dict().items())
            assert loaded == len(replacement.state_dict())
    assert len(versions) == 60 and versions[0] == 0 and versions[-1] == 3
    assert versions == sorted(versions)  # never goes back
    assert backend.policy_version == 3
    # After the update the engine samples the new weights.
    after = (await run_request(backend, _greedy("after", prompt, 8)))[0]["tokens"]
    assert after == _naive_greedy(replacement.eval(), prompt, 8, tokenizer.eos_token_id)


async def test_a_bad_weight_update_changes_nothing(backend, tokenizer):
    prompt = _prompt(tokenizer, PROMPTS[0])
    before = (await run_request(backend, _greedy("b", prompt, 6)))[0]["tokens"]
    good = torch.zeros_like(backend.engine.model.lm_head.weight)
    with pytest.raises(InferenceError, match="no tensor"):
        await backend.update_weights(1, [("lm_head.weight", good), ("nope.weight", good)])
    with pytest.raises(InferenceError, match="shape"):
        await backend.update_weights(1, [("lm_head.weight", good[:3])])
    assert backend.policy_version == 0
    assert (await run_request(backend, _greedy("a", prompt, 6)))[0]["tokens"] == before


async def test_closing_the_stream_cancels_and_frees_the_cache(backend, tokenizer):
    prompt = _prompt(tokenizer, PROMPTS[1])
    params = SamplingParams(temperature=0.0, max_tokens=200, n=4)
    stream = backend.generate(
        GenerationRequest(request_id="c", prompt_token_ids=prompt, sampling=params)
    )
    await anext(stream)
    assert backend.stats().kv_cache_usage == pytest.approx(4 / 8)
    await stream.aclose()
    for _ in range(100):
        if backend.stats().kv_cache_usage == 0:
            break
        await asyncio.sleep(0.01)
    idle = type(backend.stats())(running=0, waiting=0, kv_cache_usage=0.0, capacity=8)
    assert backend.stats() == idle


@pytest.mark.parametrize(
    ("prompt_len", "changes", "message"),
    [
        (0, {}, "prompt is empty"),
        (300, {}, "context holds 256"),
        (5, {"max_tokens": 0}, "max_tokens"),
        (5, {"top_p": 0.0}, "top_p"),
        (5, {"n": 9}, "n must be"),
    ],
)
async def test_bad_requests_are_refused_with_a_clear_error(backend, prompt_len, changes, message):
    params = SamplingParams(**{"max_tokens": 4, **changes})
    request = GenerationRequest(
        request_id="bad", prompt_token_ids=(5,) * prompt_len, sampling=params
    )
    with pytest.raises(InferenceError, match=message):
        await anext(backend.generate(request))
    assert backend.stats().running == 0


async def test_an_mxfp8_policy_samples_with_the_trainers_mxfp8_numerics(model, tokenizer):
    """MXFP8 quantizes activations per token row, so batching and the KV cache leave each
    token's numerics alone: the engine's logprobs equal the MXFP8 model's own forward."""
    from etude.inference.engine import EngineConfig
    from etude.inference.torch_backend import TorchBackend
    from etude.kernels.mx_training import set_precision

    set_precision(model, "mxfp8")
    backend = TorchBackend(model, tokenizer, EngineConfig(max_num_seqs=4, max_model_len=128))
    try:
        prompts = [_prompt(tokenizer, p) for p in PROMPTS]
        params = SamplingParams(temperature=1.0, max_tokens=8, seed=3)
        results = await asyncio.gather(*(
            run_request(backend, GenerationRequest(request_id=f"m{i}", prompt_token_ids=p,
                                                   sampling=params))
            for i, p in enumerate(prompts)
        ))  # fmt: skip
    finally:
        await backend.close()
    for prompt, result in zip(prompts, results, strict=True):
        completion = result[0]
        expected = _forward_logprobs(model, prompt, completion["tokens"])
        assert torch.allclose(torch.tensor(completion["logprobs"]), expected, atol=TOLERANCE,
                              rtol=0)  # fmt: skip


async def test_a_caller_that_falls_behind_gets_the_same_completions_in_fewer_messages(
    backend, tokenizer
):
    """The engine does not wait for its callers: what arrived meanwhile comes as one delta
    per completion, and nothing is lost, reordered or repeated."""
    params = SamplingParams(temperature=1.0, max_tokens=24, seed=5, n=2, ignore_eos=True)
    prompt = _prompt(tokenizer, PROMPTS[1])

    def request(request_id: str) -> GenerationRequest:
        return GenerationRequest(request_id=request_id, prompt_token_ids=prompt, sampling=params)

    fast = await run_request(backend, request("fast"))
    slow: dict[int, dict] = {}
    messages = 0
    async for delta in backend.generate(request("slow")):
        messages += 1
        c = slow.setdefault(delta.index, {"tokens": [], "logprobs": [], "text": "", "ends": 0})
        c["tokens"] += delta.token_ids
        c["logprobs"] += delta.logprobs
        c["text"] += delta.text
        c["ends"] += delta.finish_reason is not None
        await asyncio.sleep(0.05)  # a slow network or client
    for index in (0, 1):
        assert slow[index]["tokens"] == fast[index]["tokens"]
        assert slow[index]["logprobs"] == fast[index]["logprobs"]
        assert slow[index]["text"] == fast[index]["text"]
        assert slow[index]["ends"] == 1
    assert messages < 2 * 24
