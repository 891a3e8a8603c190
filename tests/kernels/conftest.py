"""Triton kernels run under the Triton interpreter (TRITON_INTERPRET=1) where there is no GPU.

Pytest imports this file before it collects any module in tests/kernels, so the variable is
set before a kernel module is imported. That is early enough on triton 3.9: `triton.jit`
reads `triton.knobs.runtime.interpret` (which reads TRITON_INTERPRET from the environment
on every access) when it decorates a function and returns an `InterpretedFunction` then, so
what counts is the import of the kernel module, not of triton. `import torch` does not import
triton (torch 2.13), and importing triton earlier would not matter either.

The catch: a test module collected before tests/kernels that imports a kernel module (say
`etude.kernels.mx_quantize`) gets compiled kernels, and CPU tensors then fail with a clear
error from the launcher. Such a test sets the variable itself, or runs on a GPU.

`setdefault` leaves an explicit TRITON_INTERPRET alone; the variable stays set for the rest
of the session, which only affects kernels decorated later (all interpreted, as they must be
without a GPU).
"""

from __future__ import annotations

import os

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
