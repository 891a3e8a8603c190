"""A checkpoint as the tools around it read it: transformers' chat helpers render a
conversation exactly as the rollout writes an episode, config.json names EOS, and
generation_config.json stops at EOS and at a chat turn's end."""

from __future__ import annotations

import json

from transformers import AutoTokenizer

from etude.model.checkpoint import from_pretrained, save_checkpoint
from etude.model.tokenizer import load_tokenizer
from etude.rollout.prompt import episode_start, observation


def test_a_checkpoint_carries_the_rollout_s_chat_format_and_its_stop_tokens(tmp_path):
    tokenizer = load_tokenizer()
    assert not tokenizer.chat_template  # the bundled tokenizer has none of its own
    save_checkpoint(from_pretrained("tiny", seed=0), tmp_path, tokenizer)
    assert not tokenizer.chat_template  # the tokenizer object is left as it was

    config = json.loads((tmp_path / "config.json").read_text())
    assert config["eos_token_id"] == tokenizer.eos_token_id is not None
    turn_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    generation = json.loads((tmp_path / "generation_config.json").read_text())
    assert generation["eos_token_id"] == [tokenizer.eos_token_id, turn_end]

    saved = AutoTokenizer.from_pretrained(tmp_path)
    conversation = [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "Fix the mean."},
        {"role": "assistant", "content": "<tool_call>…</tool_call>"},
        {"role": "tool", "content": "def mean(xs): ..."},
    ]
    rendered = saved.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    trained_on = (
        episode_start("Fix the mean.", "You fix bugs.")
        + "<tool_call>…</tool_call>"
        + observation("def mean(xs): ...")
    )
    assert rendered == trained_on
