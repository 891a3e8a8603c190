"""Hugging Face tensor names ↔ this model's parameters.

Every name is Hugging Face's except the routed experts: a checkpoint holds one tensor per
expert (`mlp.experts.{e}.gate_proj.weight`, [F, D]); the model stacks them into
`mlp.experts.gate_proj` ([E, F, D]) for the grouped GEMM. transformers 5 keeps experts fused
in memory (`mlp.experts.gate_up_proj`, [E, 2F, D]); those names are accepted on load too.

A Mixtral checkpoint (an MoE with Llama attention) names its MoE block `block_sparse_moe` and
its experts' projections `w1` (gate), `w3` (up) and `w2` (down), as vLLM and transformers
read them: `model.layers.0.block_sparse_moe.experts.5.w1.weight`. Those names are read always
and written for a Mixtral config.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator

import torch

from etude.model.config import ModelConfig

_EXPERT = re.compile(r"^(?P<prefix>.*\.mlp\.experts)\.(?P<e>\d+)\.(?P<proj>\w+_proj)\.weight$")
_FUSED = re.compile(r"^(?P<prefix>.*\.mlp\.experts)\.(?P<proj>gate_up_proj|down_proj)$")
_STACKED = re.compile(r"^(?P<prefix>.*\.mlp\.experts)\.(?P<proj>gate_proj|up_proj|down_proj)$")
_MIXTRAL_BLOCK = re.compile(r"^(?P<layer>.*)\.block_sparse_moe\.(?P<rest>.*)$")
_MIXTRAL_EXPERT = re.compile(r"^experts\.(?P<e>\d+)\.(?P<proj>w[123])\.weight$")
_OUR_BLOCK = re.compile(
    r"^(?P<layer>.*)\.mlp\.(?P<rest>gate\.weight|experts\.\d+\.\w+_proj\.weight)$"
)
_MIXTRAL_PROJ = {"w1": "gate_proj", "w3": "up_proj", "w2": "down_proj"}
_PROJ_MIXTRAL = {ours: theirs for theirs, ours in _MIXTRAL_PROJ.items()}


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


def _from_mixtral(name: str) -> str:
    """A Mixtral checkpoint name as the Qwen3-MoE one; any other name unchanged."""
    match = _MIXTRAL_BLOCK.match(name)
    if match is None:
        return name
    rest = match["rest"]
    if expert := _MIXTRAL_EXPERT.match(rest):
        rest = f"experts.{expert['e']}.{_MIXTRAL_PROJ[expert['proj']]}.weight"
    return f"{match['layer']}.mlp.{rest}"


def _to_mixtral(name: str) -> str:
    match = _OUR_BLOCK.match(name)
    if match is None:
        return name
    rest = match["rest"]
    if expert := _EXPERT.match(name):
        rest = f"experts.{expert['e']}.{_PROJ_MIXTRAL[expert['proj']]}.weight"
    return f"{match['layer']}.block_sparse_moe.{rest}"


class StateDictAdapter:
    def __init__(self, config: ModelConfig) -> None:
        self.config = config

    def iter_to_hf(
        self, tensors: Iterable[tuple[str, torch.Tensor]]
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """Our tensors → checkpoint names and tensors (stacked experts split, Mixtral names
        for a Mixtral config, a tied `lm_head.weight` left out: the embedding carries it).
        Names already in checkpoint form pass unchanged."""
        tied = self.config.tie_word_embeddings
        mixtral = self.config.model_type == "mixtral"
        for name, tensor in split_stacked_experts(tensors):
            if tied and name == "lm_head.weight":
                continue
            yield (_to_mixtral(name) if mixtral else name), tensor

    def to_hf(self, state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Our state dict → checkpoint tensors (what save_pretrained writes)."""
        return dict(self.iter_to_hf(state.items()))

    def iter_from_hf(
        self, tensors: Iterable[tuple[str, torch.Tensor]]
    ) -> Iterator[tuple[str, torch.Tensor, int | None]]:
        """Checkpoint tensors → (our parameter name, tensor, expert index or None). An
        expert index means the tensor fills one row of a stacked parameter; this lets a live
        update stream experts one at a time without assembling the stack first."""
        for name, tensor in tensors:
            name = _from_mixtral(name)
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
