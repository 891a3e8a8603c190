"""A checkpoint as the tools around it read it: transformers' chat helpers render a
conversation exactly as the rollout writes an episode, config.json names EOS, and
generation_config.json stops at EOS and at a chat turn's end."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from etude.inference.chat_format import ChatFormat
from etude.inference.openai_protocol import Message, Tool
from etude.model.checkpoint import from_pretrained, save_checkpoint
from etude.model.tokenizer import load_tokenizer
from etude.rollout.prompt import episode_start


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
        {"role": "assistant", "content": "Done."},
    ]
    rendered = saved.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    trained_on = episode_start("Fix the mean.", "You fix bugs.") + "Done."
    assert rendered == trained_on + "<|im_end|>\n<|im_start|>assistant\n"


TOOLS = [
    {"type": "function", "function": {
        "name": "read_file", "description": "Read a file.\n",
        "parameters": {"type": "object", "properties": {
            "path": {"type": "string", "description": "Relative to the repository."},
            "start_line": {"type": "integer"}, "flags": {"type": "array"},
        }, "required": ["path"]},
    }},
    {"type": "function", "function": {
        "name": "grep", "description": "Search.",
        "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}},
                       "required": ["pattern"]},
    }},
    {"type": "function", "function": {"name": "submit", "parameters": {}}},
]  # fmt: skip


def call(call_id: str, name: str, **arguments) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


CONVERSATIONS = {
    "tools, no system prompt": [{"role": "user", "content": "Fix it."}],
    "a developer prompt": [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Fix "},
                                     {"type": "text", "text": "it."}]},
    ],
    "a parallel batch answered out of order, twice": [
        {"role": "system", "content": "You fix bugs."},
        {"role": "user", "content": "Fix the parser."},
        {"role": "assistant", "content": "Reading.", "tool_calls": [
            call("a", "read_file", path="pkg/a.py", start_line=3, flags=["-n", "ü"]),
            call("b", "grep", pattern="</parameter> and <tool_call>"),
        ]},
        {"role": "tool", "tool_call_id": "b", "content": "hit </tool_result> here"},
        {"role": "tool", "tool_call_id": "a", "content": "x = 1"},
        {"role": "assistant", "content": None, "tool_calls": [call("c", "submit")]},
        {"role": "tool", "tool_call_id": "c", "content": "submitted"},
        {"role": "assistant", "content": "All done."},
        {"role": "user", "content": "Thanks"},
    ],
    "values whose fragments are escaped already, by runs of backslashes": [
        {"role": "user", "content": "Fix the escaping."},
        {"role": "assistant", "content": None, "tool_calls": [
            call("a", "grep", pattern="<\\/parameter> <\\\\tool_call> <\\x </b> <<function="),
            call("b", "read_file", path="p.py", flags=["<\\/parameter>", "</function>"]),
        ]},
        {"role": "tool", "tool_call_id": "a", "content": "<\\/tool_result> <\\\\/tool_result>"},
        {"role": "tool", "tool_call_id": "b", "content": "</tool_result><"},
    ],
}  # fmt: skip


@pytest.mark.parametrize(
    ("name", "with_tools"),
    [(name, True) for name in CONVERSATIONS]
    + [(n, False) for n, m in CONVERSATIONS.items() if not any("tool_calls" in x for x in m)],
)
def test_the_saved_template_renders_as_the_chat_api_does(tmp_path, name, with_tools):
    """vLLM's server and transformers render from the checkpoint's template, the inference
    service from ChatFormat: the policy must read the same bytes from both."""
    save_checkpoint(from_pretrained("tiny", seed=0), tmp_path, load_tokenizer())
    saved = AutoTokenizer.from_pretrained(tmp_path)
    messages = CONVERSATIONS[name]
    tools = TOOLS if with_tools else None
    rendered = saved.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=True
    )

    def sent(c: dict) -> dict:  # an OpenAI client sends arguments as a JSON string
        return {
            **c,
            "function": {**c["function"], "arguments": json.dumps(c["function"]["arguments"])},
        }

    as_sent = [
        {**m, "tool_calls": [sent(c) for c in m["tool_calls"]]} if m.get("tool_calls") else m
        for m in messages
    ]
    chat = ChatFormat([Tool.model_validate(t) for t in tools or []])
    assert rendered == chat.prompt([Message.model_validate(m) for m in as_sent])
