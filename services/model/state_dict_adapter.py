"""Hugging Face tensor names ↔ this model's parameters.

Every name is Hugging Face's except the routed experts: a checkpoint holds one tensor per
expert (`mlp.experts.{e}.gate_proj.weight`, [F, D]); the model stacks them into
`mlp.experts.gate_proj` ([E, F, D]) for the grouped GEMM. transformers 5 keeps experts fused
in memory (`mlp.experts.gate_up_proj`, [E, 2F, D]); those names are accepted on load too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import torch

from etude.model.config import ModelConfig

_EXPERT = re.compile(r"^(?P<prefix>.*\.mlp\.experts)\.(?P<e>\d+)\.(?P<proj>\w+_proj)\.weight$")
_FUSED = re.compile(r"^(?P<prefix>.*\.mlp\.experts)\.(?P<proj>gate_up_proj|down_proj)$")
_STACKED = re.compile(r"^(?P<prefix>.*\.mlp\.experts)\.(?P<proj>gate_proj|up_proj|down_proj)$")


def split_stacked_experts(
    tensors: Iterable[tuple[str, torch.Tensor]],
) -> Iterator[tuple[str, torch.Tensor]]:
    """Our stacked expert tensors as the checkpoint's one-per-expert tensors; every other
    tensor unchanged."""
    for name, tensor in tensors:
        match = _STACKED.match(name)
        if match is None:
            yield name, tensor
            continue
        for e in range(tensor.shape[0]):
            yield f"{match['prefix']}.{e}.{match['proj']}.weight", tensor[e]


class StateDictAdapter:
    def __init__(self, config: ModelConfig) -> None:
        self.config = config

    def to_hf(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Our state dict → checkpoint tensors (what save_pretrained writes)."""
        tied = self.config.tie_word_embeddings
        return {
            name: tensor
            for name, tensor in split_stacked_experts(state.items())
            if not (tied and name == "lm_head.weight")
        }

    def iter_from_hf(
        self, tensors: Iterable[tuple[str, torch.Tensor]]
    ) -> Iterator[tuple[str, torch.Tensor, int | None]]:
        """Checkpoint tensors → (our parameter name, tensor, expert index or None). An
        expert index means the tensor fills one row of a stacked parameter; this lets a live
        update stream experts one at a time without assembling the stack first."""
        for name, tensor in tensors:
            if match := _EXPERT.match(name):
                yield f"{match['prefix']}.{match['proj']}", tensor, int(match["e"])
            elif match := _FUSED.match(name):
                if match["proj"] == "down_proj":
                    yield f"{match['prefix']}.down_proj", tensor, None
                else:
                    gate, up = tensor.chunk(2, dim=1)
                    yield f"{match['prefix']}.gate_proj", gate, None
                    yield f"{match['prefix']}.up_proj", up, None
            else:
                yield name, tensor, None

    def from_hf(self, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Checkpoint tensors → our state dict, experts stacked."""
        out: dict[str, torch.Tensor] = {}
        rows: dict[str, dict[int, torch.Tensor]] = {}
        for name, tensor, expert in self.iter_from_hf(tensors.items()):
            if expert is None:
                out[name] = tensor
            else:
                rows.setdefault(name, {})[expert] = tensor
        for name, by_expert in rows.items():
            missing = set(range(self.config.num_experts)) - set(by_expert)
            if missing:
                raise ValueError(f"{name}: no tensors for experts {sorted(missing)}")
            out[name] = torch.stack([by_expert[e] for e in range(self.config.num_experts)])
        if self.config.tie_word_embeddings:
            out.pop("lm_head.weight", None)
        return out
