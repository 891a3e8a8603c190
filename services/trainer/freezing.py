"""Which parameters a phase trains: the last N decoder layers (and the final norm), the rest
frozen. On 2 CPU cores a 135 M model's full backward is most of a step; training the top of
the network only stops the backward there, and the optimizer keeps no state for the rest.

With tied embeddings the embedding is the output layer too: it stays frozen unless every
layer trains, so a partial phase never moves the input side of the network."""

from __future__ import annotations

from torch import nn

from etude.model.model import Transformer


def train_last_layers(model: Transformer, layers: int | None) -> list[str]:
    """Mark the parameters to train (`requires_grad`) and return their names; `None` or at
    least every layer: all of them."""
    total = len(model.model.layers)
    if layers is None or layers >= total:
        for parameter in model.parameters():
            parameter.requires_grad_(True)
        return [name for name, _ in model.named_parameters()]
    if layers < 0:
        raise ValueError(f"trainable_layers must be ≥ 0, got {layers}")
    model.requires_grad_(False)
    trained: list[nn.Module] = [*model.model.layers[total - layers :]]
    if layers:
        trained.append(model.model.norm)
        if not model.config.tie_word_embeddings:
            trained.append(model.lm_head)
    for module in trained:
        module.requires_grad_(True)
    return trainable_names(model)


def trainable_names(model: nn.Module) -> list[str]:
    return [name for name, p in model.named_parameters() if p.requires_grad]


def trainable_parameters(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]
