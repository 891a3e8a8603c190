"""`etude model init`: a checkpoint directory that transformers loads as it is."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from typer.testing import CliRunner

from etude.cli.app import app
from etude.model.checkpoint import load_model


def test_init_writes_a_checkpoint_transformers_loads(tmp_path):
    out = tmp_path / "ckpt"
    result = CliRunner().invoke(app, ["model", "init", "--out", str(out), "--seed", "4"])
    assert result.exit_code == 0, result.output
    tokenizer = AutoTokenizer.from_pretrained(out)
    reference = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    ours = load_model(out).eval()
    ids = torch.tensor([tokenizer.encode("def area(r):\n    return 3.14 * r * r\n")])
    with torch.no_grad():
        assert (reference(ids).logits - ours(ids).logits).abs().max() <= 1e-4
    assert ours.config.eos_token_id == tokenizer.eos_token_id


def test_init_refuses_an_unknown_preset(tmp_path):
    result = CliRunner().invoke(app, ["model", "init", "--out", str(tmp_path), "--preset", "xl"])
    assert result.exit_code == 1 and "unknown model preset" in result.output
    assert not (tmp_path / "config.json").exists()
