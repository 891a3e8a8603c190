"""Importing a pretrained model: a GGUF file (dequantized) or a Hugging Face checkpoint
directory becomes an Étude checkpoint directory — config.json, model.safetensors in Hugging
Face names, the tokenizer's files with its chat template, generation_config.json.

transformers reads the source (its GGUF reader dequantizes and maps the names); the weights
then go through this package's own model, which must reproduce transformers' logits on a short
prompt before anything is written, so an architecture detail this model lacks fails the import
instead of yielding a subtly different policy. The tokenizer is kept as it is, without new
tokens (the embedding is pretrained): its EOS becomes the token that ends a chat turn.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from etude.model.checkpoint import model_from_hf_tensors, save_checkpoint, torch_dtype
from etude.model.config import MODELLED_HF_KEYS, ModelConfig
from etude.model.model import Transformer

# fp32 on both sides; measured differences are ~1e-5 on SmolLM2's logits.
IMPORT_TOLERANCE = 1e-3
_PROBE_TEXT = "def add(a, b):\n    return a + b\n"


@dataclass(frozen=True, slots=True)
class ImportSource:
    """Where transformers reads the model: a directory, and a GGUF file inside it or None
    (the directory is a Hugging Face checkpoint)."""

    directory: Path
    gguf_file: str | None = None


def locate_source(source: Path, gguf_file: str | None = None) -> ImportSource:
    """A `.gguf` file, a directory with `gguf_file` in it, or a checkpoint directory (its
    config.json; failing that, its only `.gguf` file)."""
    if source.is_file():
        if source.suffix != ".gguf":
            raise ValueError(f"{source} is a file but not a .gguf; pass a checkpoint directory")
        if gguf_file is not None:
            raise ValueError("gguf_file names a file inside a directory; the source is a file")
        return ImportSource(source.parent, source.name)
    if not source.is_dir():
        raise FileNotFoundError(f"no such file or directory: {source}")
    if gguf_file is not None:
        if not (source / gguf_file).is_file():
            raise FileNotFoundError(f"no {gguf_file} in {source}")
        return ImportSource(source, gguf_file)
    if (source / "config.json").is_file():
        return ImportSource(source)
    ggufs = sorted(p.name for p in source.glob("*.gguf"))
    if len(ggufs) == 1:
        return ImportSource(source, ggufs[0])
    hint = f"; name one of {', '.join(ggufs)} with gguf_file" if ggufs else ""
    raise ValueError(f"{source} has no config.json{hint}")


def import_checkpoint(
    source: Path, out: Path, *, gguf_file: str | None = None, dtype: str = "float32"
) -> Transformer:
    """Write `source` as a checkpoint directory `out` (which must not hold one already) in
    `dtype`; returns the model."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from etude.model.tokenizer import set_chat_stop_tokens

    if (out / "config.json").exists():
        raise FileExistsError(f"{out} already holds a checkpoint")
    located = locate_source(source, gguf_file)
    options = {"gguf_file": located.gguf_file} if located.gguf_file else {}
    tokenizer = AutoTokenizer.from_pretrained(located.directory, **options)
    reference = AutoModelForCausalLM.from_pretrained(
        located.directory, dtype=torch.float32, **options
    ).eval()
    config = ModelConfig.from_hf_dict(hf_config_dict(reference.config))
    if len(tokenizer) > config.vocab_size:
        raise ValueError(
            f"the tokenizer has {len(tokenizer)} ids, the embedding {config.vocab_size} rows"
        )
    model = model_from_hf_tensors(config, reference.state_dict(), source).eval()
    _check_same_logits(reference, model, tokenizer.encode(_PROBE_TEXT), source)
    del reference
    config.eos_token_id, config.pad_token_id = set_chat_stop_tokens(tokenizer)
    model = model.to(torch_dtype(dtype))
    save_checkpoint(model, out, tokenizer)
    return model


def hf_config_dict(hf_config: Any) -> dict[str, Any]:
    """A transformers config as the config.json `ModelConfig.from_hf_dict` reads: every key it
    models, plus the other keys that differ from transformers' defaults, less what describes
    the source file rather than the model (quantization, its name on disk)."""
    full, diff = hf_config.to_dict(), hf_config.to_diff_dict()
    wanted = {f.name for f in dataclasses.fields(ModelConfig)} | MODELLED_HF_KEYS | set(diff)
    dropped = {"quantization_config", "transformers_version", "architectures"}
    return {
        key: value
        for key, value in full.items()
        if key in wanted and key not in dropped and not key.startswith("_")
    }


@torch.no_grad()
def _check_same_logits(reference, model: Transformer, ids: list[int], source: Path) -> None:
    tokens = torch.tensor([ids])
    difference = (reference(tokens).logits - model(tokens).logits).abs().max().item()
    if difference > IMPORT_TOLERANCE:
        raise ValueError(
            f"{source}: this model's logits differ from transformers' by {difference:.2e} "
            f"(> {IMPORT_TOLERANCE}); the architecture has a feature etude.model lacks"
        )
