"""A slot-based key/value cache: each running sequence owns one slot of `max_len` positions.

A forward over B sequences of T new tokens each writes their keys and values at
`start[b] .. start[b] + T` of slot `slot[b]` and attends to everything before them. Sequences
of different lengths share one forward: a shorter prompt is right-padded, and the padding's
entries are never read (masked) before being overwritten by the sequence's next token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from etude.model.config import ModelConfig


class KVCache:
    def __init__(
        self,
        config: ModelConfig,
        num_slots: int,
        max_len: int,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        shape = (num_slots, max_len, config.num_key_value_heads, config.head_dim)
        self.keys = [
            torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.num_hidden_layers)
        ]
        self.values = [torch.zeros_like(k) for k in self.keys]
        self.num_slots = num_slots
        self.max_len = max_len

    @property
    def bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))

    def copy_prefix(self, source: int, targets: list[int], length: int) -> None:
        """Give `targets` the first `length` positions of `source` (n samples that share a
        prompt are prefilled once)."""
        if not targets:
            return
        index = torch.tensor(targets, device=self.keys[0].device)
        for cache in (*self.keys, *self.values):
            cache[index, :length] = cache[source, :length]


@dataclass(slots=True)
class CacheBatch:
    """Where one forward reads and writes: slots [B], starts [B] (position of each
    sequence's first new token), for T new tokens per sequence."""

    cache: KVCache
    slots: torch.Tensor
    starts: torch.Tensor
    num_new: int
    positions: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    span: int = 0

    def __post_init__(self) -> None:
        device = self.slots.device
        steps = torch.arange(self.num_new, device=device)
        self.positions = self.starts[:, None] + steps  # [B, T]
        self.span = int(self.starts.max()) + self.num_new  # keys any query may see
        keys = torch.arange(self.span, device=device)
        # [B, 1, T, S]: query t of sequence b sees keys 0 .. start[b] + t.
        self.mask = (keys[None, None, :] <= self.positions[:, :, None]).unsqueeze(1)

    def write_and_read(self, layer: int, k_BTHD: torch.Tensor, v_BTHD: torch.Tensor):
        """Store the new keys/values; return all keys/values up to `span` as [B, S, H, D]."""
        keys, values = self.cache.keys[layer], self.cache.values[layer]
        slots = self.slots[:, None]
        keys[slots, self.positions] = k_BTHD.to(keys.dtype)
        values[slots, self.positions] = v_BTHD.to(values.dtype)
        # index_select on a view copies only the span, and is ~2x faster than fancy indexing.
        return (
            keys[:, : self.span].index_select(0, self.slots),
            values[:, : self.span].index_select(0, self.slots),
        )
