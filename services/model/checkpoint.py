"""Checkpoint directories in Hugging Face layout: config.json, model.safetensors (Hugging
Face tensor names), and the tokenizer's files. transformers and vLLM load them as they are;
`load_model` loads those they write."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from etude.model.chat_template import complete_tokenizer_files
from etude.model.config import ModelConfig, preset
from etude.model.model import Transformer
from etude.model.state_dict_adapter import StateDictAdapter

WEIGHTS_FILE = "model.safetensors"
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def torch_dtype(name: str) -> torch.dtype:
    try:
        return _DTYPES[name.removeprefix("torch.")]
    except KeyError:
        raise ValueError(f"unsupported dtype {name!r} (one of {', '.join(_DTYPES)})") from None


def build_model(config: ModelConfig, seed: int = 0, dtype: str | None = None) -> Transformer:
    """A freshly initialised model."""
    model = Transformer(config)
    model.init_weights(seed)
    return model.to(torch_dtype(dtype or config.torch_dtype))


def save_checkpoint(model: Transformer, directory: Path, tokenizer=None) -> Path:
    """The model (and its tokenizer) as a directory transformers and vLLM load as it is: with
    the tokenizer, `config.json` names its EOS and pad tokens, the tokenizer carries a chat
    template (ChatML, as the rollout writes episodes, when it has none) and
    `generation_config.json` stops at EOS and at a chat turn's end."""
    directory.mkdir(parents=True, exist_ok=True)
    config = model.config
    if tokenizer is not None:
        if config.eos_token_id is None:
            config.eos_token_id = tokenizer.eos_token_id
        if config.pad_token_id is None:
            config.pad_token_id = tokenizer.pad_token_id
    tensors = StateDictAdapter(config).to_hf(model.state_dict())
    dtype = next(iter(tensors.values())).dtype
    config.torch_dtype = str(dtype).removeprefix("torch.")
    config.save(directory)
    contiguous = {name: t.detach().contiguous() for name, t in tensors.items()}
    save_file(contiguous, directory / WEIGHTS_FILE, metadata={"format": "pt"})
    ends = [config.eos_token_id] if config.eos_token_id is not None else []
    if tokenizer is not None:
        tokenizer.save_pretrained(directory)
        ends = complete_tokenizer_files(directory, tokenizer) or ends
    if ends:
        generation = {"eos_token_id": ends if len(ends) > 1 else ends[0],
                      "pad_token_id": config.pad_token_id}  # fmt: skip
        (directory / "generation_config.json").write_text(json.dumps(generation) + "\n")
    return directory


def read_checkpoint_tensors(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a checkpoint directory (one file or Hugging Face shards)."""
    single = directory / WEIGHTS_FILE
    if single.exists():
        return load_file(single)
    files = sorted(directory.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no *.safetensors in {directory}")
    tensors: dict[str, torch.Tensor] = {}
    for file in files:
        tensors.update(load_file(file))
    return tensors


def model_from_hf_tensors(
    config: ModelConfig, tensors: dict[str, torch.Tensor], where: str | Path
) -> Transformer:
    """A model holding exactly `tensors` (checkpoint names); refuses a tensor too many or
    too few (`where` names the source in the error)."""
    model = Transformer(config)
    state = StateDictAdapter(config).from_hf(tensors)
    missing, unexpected = model.load_state_dict(state, strict=False)
    if unexpected:
        raise ValueError(f"{where}: tensors the model does not have: {unexpected[:5]}")
    missing = [m for m in missing if not (config.tie_word_embeddings and m == "lm_head.weight")]
    if missing:
        raise ValueError(f"{where}: checkpoint lacks {missing[:5]}")
    return model


def load_model(directory: Path, dtype: str | None = None) -> Transformer:
    """`from_pretrained`: a checkpoint directory written here or by transformers (Qwen3-MoE,
    Qwen3, Llama, Mixtral)."""
    config = ModelConfig.load(directory)
    model = model_from_hf_tensors(config, read_checkpoint_tensors(directory), directory)
    return model.to(torch_dtype(dtype or config.torch_dtype))


def from_pretrained(
    source: str | Path, *, vocab_size: int | None = None, seed: int = 0, dtype: str | None = None
) -> Transformer:
    """A preset name (`tiny`, `tiny-dense`, `small`: fresh weights from `seed`) or a
    checkpoint directory. A pretrained name (`smollm2-135m`) must be imported first:
    `etude.model.pretrained.resolve_init` turns it into a directory."""
    path = Path(source)
    if path.is_dir():
        return load_model(path, dtype)
    from etude.model.pretrained import PRETRAINED

    if str(source) in PRETRAINED:
        raise ValueError(
            f"{source!r} is a pretrained model: import it first (`etude model import {source} "
            "--out DIR`, or etude.model.pretrained.resolve_init) and load the directory"
        )
    config = preset(str(source), vocab_size or 8192)
    return build_model(config, seed, dtype)


def init_checkpoint(
    preset_name: str,
    directory: Path,
    *,
    seed: int = 0,
    dtype: str = "float32",
    tokenizer_source: str | Path | None = None,
) -> Transformer:
    """Write a fresh preset with its tokenizer as a checkpoint directory."""
    from etude.model.tokenizer import load_tokenizer  # transformers is slow to import

    tokenizer = load_tokenizer(tokenizer_source)
    model = from_pretrained(preset_name, vocab_size=len(tokenizer), seed=seed, dtype=dtype)
    model.config.eos_token_id = model.config.pad_token_id = tokenizer.eos_token_id
    save_checkpoint(model, directory, tokenizer)
    return model
