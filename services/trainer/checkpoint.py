"""Trainer checkpoints: what `--resume` needs to continue exactly where a run stopped.

A checkpoint is a directory `step-<N>/` holding the policy as a Hugging Face checkpoint
(config.json + model.safetensors + tokenizer: inference and transformers load it as is), the
optimizer state, and `trainer_state.pt` (step, policy version, RNG states, the caller's own
state such as a data cursor). It is written under a temporary name and renamed into place,
so a crash mid-write never leaves a directory that looks complete; only the newest `keep`
checkpoints are kept.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from etude.model.checkpoint import read_checkpoint_tensors, save_checkpoint
from etude.model.model import Transformer
from etude.model.state_dict_adapter import StateDictAdapter

_STEP_DIR = re.compile(r"^step-(\d{8})$")
OPTIMIZER_FILE = "optimizer.pt"
STATE_FILE = "trainer_state.pt"


@dataclass(slots=True)
class TrainerState:
    step: int
    policy_version: int
    extra: dict[str, Any] = field(default_factory=dict)
    """The caller's own resumable state (data cursor, metrics accumulators, ...)."""


def step_dir(root: Path, step: int) -> Path:
    return root / f"step-{step:08d}"


def latest_checkpoint(root: Path) -> Path | None:
    """The newest complete checkpoint under `root` (temporary directories are ignored)."""
    if not root.is_dir():
        return None
    steps = [p for p in root.iterdir() if _STEP_DIR.match(p.name) and (p / STATE_FILE).exists()]
    return max(steps, key=lambda p: p.name, default=None)


def save(
    root: Path,
    model: Transformer,
    optimizer: torch.optim.Optimizer,
    state: TrainerState,
    *,
    tokenizer=None,
    keep: int = 3,
) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    final = step_dir(root, state.step)
    scratch = root / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(scratch, ignore_errors=True)
    save_checkpoint(model, scratch, tokenizer)
    torch.save(optimizer.state_dict(), scratch / OPTIMIZER_FILE)
    rng = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        rng["cuda"] = torch.cuda.get_rng_state_all()
    torch.save({"step": state.step, "policy_version": state.policy_version,
                "extra": state.extra, "rng": rng}, scratch / STATE_FILE)  # fmt: skip
    _fsync_tree(scratch)
    shutil.rmtree(final, ignore_errors=True)  # a rerun of the same step replaces it
    os.replace(scratch, final)
    _fsync_dir(root)
    for old in sorted(p for p in root.iterdir() if _STEP_DIR.match(p.name))[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def load(
    directory: Path, model: Transformer, optimizer: torch.optim.Optimizer | None = None
) -> TrainerState:
    """Restore weights (in place, keeping the parameters' identity), optimizer and RNG
    state from a checkpoint directory written by `save`."""
    tensors = StateDictAdapter(model.config).from_hf(read_checkpoint_tensors(directory))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name in tensors:
                param.copy_(tensors[name])
    if optimizer is not None:
        optimizer.load_state_dict(torch.load(directory / OPTIMIZER_FILE, weights_only=True))
    saved = torch.load(directory / STATE_FILE, weights_only=False)
    torch.set_rng_state(saved["rng"]["torch"])
    if "cuda" in saved["rng"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(saved["rng"]["cuda"])
    return TrainerState(saved["step"], saved["policy_version"], saved["extra"])


def _fsync_tree(directory: Path) -> None:
    for path in directory.iterdir():
        with open(path, "rb") as handle:
            os.fsync(handle.fileno())
    _fsync_dir(directory)


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
