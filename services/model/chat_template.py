"""The chat template a checkpoint is saved with: the policy's own format, ChatML as the
rollout writes episodes (etude.rollout.prompt) and the inference service's chat API renders
a conversation with tools (etude.inference.chat_format), written as a Jinja template
(assets/chat_template.jinja) so that `vllm serve CHECKPOINT` (with etude's tool parser,
etude.inference.vllm_tool_parser) and transformers' `apply_chat_template` render a
conversation exactly as the policy was trained on it. A test holds the template and
ChatFormat equal."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

IM_START, IM_END = "<|im_start|>", "<|im_end|>"

TEMPLATE_FILE = "chat_template.jinja"  # transformers' own name for a saved template
CHAT_TEMPLATE = (Path(__file__).parent / "assets" / TEMPLATE_FILE).read_text()


def complete_tokenizer_files(directory: Path, tokenizer: Any) -> list[int]:
    """After `tokenizer.save_pretrained(directory)`: the policy's template in the saved
    tokenizer's files whenever it has ChatML's tokens, in place of one of its own (the
    rollout writes ChatML episodes whatever template a pretrained tokenizer came with; the
    tokenizer object is left as it is). Returns the ids that end a generation: EOS, and
    `<|im_end|>` when it is a token of its own (a chat turn's end)."""
    ends = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    turn_end = tokenizer.convert_tokens_to_ids(IM_END)
    if isinstance(turn_end, int) and turn_end != tokenizer.unk_token_id and turn_end not in ends:
        ends.append(turn_end)
    if not ends[1:]:
        return ends  # no ChatML tokens to write the template with
    path = directory / "tokenizer_config.json"
    config = json.loads(path.read_text()) if path.exists() else {}
    config["chat_template"] = CHAT_TEMPLATE
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n")
    if (directory / TEMPLATE_FILE).exists():  # a saved template file wins over the config
        (directory / TEMPLATE_FILE).write_text(CHAT_TEMPLATE)
    return ends
