"""The policy's tokenizer: lossless, one id per format tag, deterministic, loadable by HF."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerFast
from typer.testing import CliRunner

from etude.cli.app import app
from etude.common.toolcalls import ToolCall, parse_tool_calls, render_tool_call
from etude.model.tokenizer import (
    BUNDLED_VOCAB_SIZE,
    CONTROL_TOKENS,
    EOS_TOKEN,
    FORMAT_TOKENS,
    SPECIAL_TOKENS,
    chars_per_token,
    load_tokenizer,
    train_tokenizer,
)
from etude.tasks.materialize import PROJECTS_DIR

PROJECT_FILE = PROJECTS_DIR / "calcparse" / "calcparse" / "evaluator.py"
# A handful of files trains a small vocabulary in a fraction of a second.
SMALL_CORPUS = sorted((PROJECTS_DIR / "calcparse" / "calcparse").glob("*.py"))
SMALL_VOCAB = 512

AWKWARD_CODE = (
    "def grüße(name: str) -> str:  \n"  # trailing spaces
    "\tif name == 'Ω':\t# tab-indented, a tab before the comment\n"
    '\t\treturn f"héllo {name} 🚀 — 你好"\r\n'  # CRLF, emoji, CJK
    "    return name.strip()   \n"
    "\n\n   \n"  # blank lines made of spaces
    "x = '\\u00e9' + \"\\x00\"\u00a0# a non-breaking space\n"
)


@pytest.fixture(scope="module")
def tokenizer() -> PreTrainedTokenizerFast:
    return load_tokenizer()


def test_round_trip_is_lossless_on_awkward_code(tokenizer: PreTrainedTokenizerFast) -> None:
    for text in (AWKWARD_CODE, PROJECT_FILE.read_text(), " leading space", "", "\n"):
        assert tokenizer.decode(tokenizer.encode(text)) == text


def test_every_special_token_is_one_id_even_inside_text(
    tokenizer: PreTrainedTokenizerFast,
) -> None:
    ids = [tokenizer.encode(token) for token in SPECIAL_TOKENS]
    assert all(len(one) == 1 for one in ids)
    assert len({one[0] for one in ids}) == len(SPECIAL_TOKENS)
    (call_id,) = tokenizer.encode("<tool_call>")
    pieces = tokenizer.convert_ids_to_tokens(tokenizer.encode("Let me look.<tool_call>\n<func"))
    assert "<tool_call>" in pieces
    assert call_id in tokenizer.encode("x<tool_call>y")


def test_decoded_tool_calls_still_parse_when_control_tokens_are_skipped(
    tokenizer: PreTrainedTokenizerFast,
) -> None:
    call = ToolCall("bash", {"command": "grep -n '</parameter>' *.py\n\tprint('ü')  "})
    turn = f"<|im_start|>assistant\nI will search.\n{render_tool_call(call)}<|im_end|>"
    ids = tokenizer.encode(turn)
    for tag in ("<tool_call>", "</tool_call>", "</function>", "</parameter>", "<|im_end|>"):
        assert tokenizer.convert_tokens_to_ids(tag) in ids
    # vLLM decodes with skip_special_tokens=True: the chat markers go, the format tags stay.
    decoded = tokenizer.decode(ids, skip_special_tokens=True)
    assert decoded == turn.removeprefix("<|im_start|>").removesuffix("<|im_end|>")
    parsed = parse_tool_calls(decoded)
    assert parsed.ok
    assert parsed.calls[0].arguments == call.arguments


def test_control_tokens_in_outside_text_can_be_spelled_out(
    tokenizer: PreTrainedTokenizerFast,
) -> None:
    text = "a file that mentions <|endoftext|> and <|im_end|>"
    ids = tokenizer.encode(text, split_special_tokens=True)
    assert not set(ids) & {tokenizer.convert_tokens_to_ids(t) for t in CONTROL_TOKENS}
    assert tokenizer.decode(ids, skip_special_tokens=True) == text


def test_bundled_tokenizer_shape_and_compression(tokenizer: PreTrainedTokenizerFast) -> None:
    assert len(tokenizer) == BUNDLED_VOCAB_SIZE
    assert tokenizer.eos_token == tokenizer.pad_token == EOS_TOKEN
    assert tokenizer.pad_token_id == tokenizer.eos_token_id == 0
    assert tokenizer.bos_token is None
    assert tokenizer.encode("x = 1") == tokenizer("x = 1")["input_ids"]  # no BOS/EOS added
    assert EOS_TOKEN not in tokenizer.convert_ids_to_tokens(tokenizer.encode("x = 1"))
    assert max(tokenizer.get_vocab().values()) == BUNDLED_VOCAB_SIZE - 1
    # Measured 3.85 characters per token on this file.
    assert chars_per_token(tokenizer, [PROJECT_FILE.read_text()]) >= 3.5


def test_training_is_deterministic_and_ignores_file_order() -> None:
    first = train_tokenizer(SMALL_CORPUS, SMALL_VOCAB)
    second = train_tokenizer(reversed(SMALL_CORPUS), SMALL_VOCAB)
    assert len(first) == SMALL_VOCAB
    assert first.backend_tokenizer.to_str() == second.backend_tokenizer.to_str()
    # Control tokens first, format tags last: the layout the module docstring promises.
    assert first.convert_tokens_to_ids(list(CONTROL_TOKENS)) == [0, 1, 2]
    tag_ids = first.convert_tokens_to_ids(list(FORMAT_TOKENS))
    assert tag_ids == list(range(SMALL_VOCAB - len(FORMAT_TOKENS), SMALL_VOCAB))


def test_a_vocabulary_the_corpus_cannot_fill_is_refused() -> None:
    with pytest.raises(ValueError, match="only fills"):
        train_tokenizer(SMALL_CORPUS[:1], 50_000)


def test_saved_tokenizer_loads_with_auto_tokenizer(tmp_path: Path) -> None:
    trained = train_tokenizer(SMALL_CORPUS, SMALL_VOCAB)
    trained.save_pretrained(tmp_path)
    text = AWKWARD_CODE + render_tool_call(ToolCall("view", {"path": "a.py"}))
    for loaded in (AutoTokenizer.from_pretrained(tmp_path), load_tokenizer(tmp_path)):
        assert loaded.encode(text) == trained.encode(text)
        assert loaded.eos_token == loaded.pad_token == EOS_TOKEN
        assert len(loaded) == SMALL_VOCAB
    with pytest.raises(FileNotFoundError):
        load_tokenizer(tmp_path / "missing")


def test_cli_writes_a_loadable_tokenizer(tmp_path: Path) -> None:
    extra = tmp_path / "extra.py"
    extra.write_text("def only_in_the_extra_file():\n    return 42\n" * 3)
    out = tmp_path / "tok"
    result = CliRunner().invoke(
        app, ["model", "train-tokenizer", "--vocab-size", "1024", "--out", str(out), str(extra)]
    )
    assert result.exit_code == 0, result.output
    assert "1024 tokens" in result.output
    loaded = load_tokenizer(out)
    assert len(loaded) == 1024
    assert loaded.decode(loaded.encode(AWKWARD_CODE)) == AWKWARD_CODE
