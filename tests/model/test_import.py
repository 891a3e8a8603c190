"""`etude model import` on a small Hugging Face Llama checkpoint, source location errors, and
`resolve_init`'s names. The real SmolLM2 GGUF import is in test_smollm2.py."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import LlamaConfig, LlamaForCausalLM
from typer.testing import CliRunner

from etude.cli.app import app
from etude.model import pretrained
from etude.model.checkpoint import from_pretrained, init_checkpoint, load_model
from etude.model.importing import locate_source
from etude.model.pretrained import PRETRAINED, PretrainedModel, resolve_init
from etude.model.tokenizer import load_tokenizer

# SmolLM2's template: ChatML, every turn closed by <|im_end|>.
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
    "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


@pytest.fixture
def hf_llama_dir(tmp_path):
    """A small Llama saved by transformers, with the bundled tokenizer given a ChatML
    template (its EOS, <|endoftext|>, does not end a turn)."""
    tokenizer = load_tokenizer()
    tokenizer.chat_template = CHATML
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=64,
        intermediate_size=96,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
        rope_parameters={"rope_type": "default", "rope_theta": 100_000.0},
        max_position_embeddings=256,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    directory = tmp_path / "hf"
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory, model


def test_cli_imports_a_transformers_checkpoint(tmp_path, hf_llama_dir):
    source, reference = hf_llama_dir
    out = tmp_path / "imported"
    result = CliRunner().invoke(app, ["model", "import", str(source), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "llama" in result.output

    ours = load_model(out).eval()
    tokenizer = load_tokenizer(out)
    ids = torch.tensor([tokenizer.encode("def area(r):\n    return 3.14 * r * r\n")])
    with torch.no_grad():
        assert (reference(ids).logits - ours(ids).logits).abs().max() <= 1e-4
    # EOS is now the token that ends a turn; no token was added.
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tokenizer.eos_token == "<|im_end|>" and len(tokenizer) == ours.config.vocab_size
    assert ours.config.eos_token_id == im_end and tokenizer.pad_token_id is not None
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation == {"eos_token_id": im_end, "pad_token_id": tokenizer.pad_token_id}
    assert "<|im_end|>" in tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], tokenize=False
    )


def test_import_in_bfloat16_and_refusing_to_overwrite(tmp_path, hf_llama_dir):
    source, _ = hf_llama_dir
    out = tmp_path / "bf16"
    args = ["model", "import", str(source), "--out", str(out), "--dtype", "bfloat16"]
    assert CliRunner().invoke(app, args).exit_code == 0
    assert {t.dtype for t in load_file(out / "model.safetensors").values()} == {torch.bfloat16}
    assert json.loads((out / "config.json").read_text())["dtype"] == "bfloat16"
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 1 and "already holds a checkpoint" in again.output


def test_sources_that_are_not_models_are_refused_clearly(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    (tmp_path / "a.gguf").write_bytes(b"")
    (tmp_path / "b.gguf").write_bytes(b"")
    with pytest.raises(FileNotFoundError, match="no such file"):
        locate_source(tmp_path / "missing")
    with pytest.raises(ValueError, match=r"not a \.gguf"):
        locate_source(text)
    with pytest.raises(ValueError, match=r"a\.gguf, b\.gguf"):
        locate_source(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"no c\.gguf"):
        locate_source(tmp_path, "c.gguf")
    assert locate_source(tmp_path / "a.gguf").gguf_file == "a.gguf"
    result = CliRunner().invoke(app, ["model", "import", str(text), "--out", str(tmp_path / "o")])
    assert result.exit_code == 1 and "not a .gguf" in result.output


def test_resolve_init_passes_presets_and_directories_and_refuses_unknown_names(tmp_path):
    checkpoint = tmp_path / "ckpt"
    init_checkpoint("tiny-dense", checkpoint)
    assert resolve_init("tiny", tmp_path / "cache") == "tiny"
    assert resolve_init(str(checkpoint), tmp_path / "cache") == str(checkpoint)
    with pytest.raises(ValueError, match=r"tiny, tiny-dense, small.*smollm2-135m"):
        resolve_init("llama-70b", tmp_path / "cache")
    with pytest.raises(ValueError, match="import it first"):
        from_pretrained("smollm2-135m")


def test_a_failed_import_leaves_nothing_in_the_cache(tmp_path, monkeypatch):
    missing = PretrainedModel(
        summary="", package="etude_no_such_package", distribution="no-such", gguf_file="x.gguf"
    )
    monkeypatch.setitem(PRETRAINED, "absent", missing)
    cache = tmp_path / "cache"
    with pytest.raises(FileNotFoundError, match="install the no-such wheel"):
        resolve_init("absent", cache)
    assert list(cache.iterdir()) == []
    # A directory that is not a complete import is refused, not silently reused.
    (cache / "absent").mkdir()
    with pytest.raises(ValueError, match="not a complete import"):
        pretrained.resolve_init("absent", cache)
