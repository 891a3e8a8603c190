"""The chat template a checkpoint is saved with when its tokenizer has none: ChatML, the
format the rollout writes episodes in (etude.rollout.prompt: `<|im_start|>role\\n…<|im_end|>`,
tool results handed back as a user turn). So `vllm serve CHECKPOINT`, transformers'
`apply_chat_template` and the gateway-free chat clients render a conversation exactly as
the policy was trained on it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

IM_START, IM_END = "<|im_start|>", "<|im_end|>"

CHATML = (  # no whitespace control: the newlines are part of the format
    "{% for message in messages %}"
    "{% set role = 'user' if message['role'] == 'tool' else message['role'] %}"
    + IM_START
    + "{{ role }}\n{{ message['content'] }}"
    + IM_END
    + "\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}" + IM_START + "assistant\n{% endif %}"
)


def complete_tokenizer_files(directory: Path, tokenizer: Any) -> list[int]:
    """After `tokenizer.save_pretrained(directory)`: the ChatML template in its
    tokenizer_config.json when the tokenizer has none (the tokenizer object is left as it
    is). Returns the ids that end a generation: EOS, and `<|im_end|>` when it is a token of
    its own (a chat turn's end)."""
    ends = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    turn_end = tokenizer.convert_tokens_to_ids(IM_END)
    if isinstance(turn_end, int) and turn_end != tokenizer.unk_token_id and turn_end not in ends:
        ends.append(turn_end)
    if tokenizer.chat_template or not ends[1:]:
        return ends  # its own template, or no ChatML tokens to write one with
    path = directory / "tokenizer_config.json"
    config = json.loads(path.read_text()) if path.exists() else {}
    config["chat_template"] = CHATML
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    return ends
