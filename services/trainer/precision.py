"""Mixed precision for the trainer's forward and backward: matmuls in bfloat16 over fp32
weights, gradients and optimizer state (torch.autocast), where the hardware has bf16 units
(AVX512-BF16 or AMX on a CPU, every recent GPU)."""

from __future__ import annotations

import contextlib

import torch


def autocast(mode: str, device: str = "cpu") -> contextlib.AbstractContextManager:
    """A context for forward passes: `bf16` autocasts, `off` changes nothing."""
    if mode == "off":
        return contextlib.nullcontext()
    if mode != "bf16":
        raise ValueError(f"autocast is off or bf16, not {mode!r}")
    return torch.autocast(device, dtype=torch.bfloat16)
