"""Freed memory goes back to the machine after a step (glibc's `malloc_trim`)."""

from __future__ import annotations

import ctypes.util
from pathlib import Path

import pytest
import torch

from etude.common.allocator import release_free_memory


def resident_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.skipif(ctypes.util.find_library("c") is None, reason="needs a C library")
def test_memory_a_step_freed_in_the_middle_of_the_heap_is_returned():
    # As a step's activations do: blocks of varying sizes, every other one freed, so the
    # free memory lies between live blocks where the heap cannot simply shrink. (A large
    # block freed first raises glibc's mmap threshold, as a step's first tensors do, so
    # these come from the heap rather than from mappings of their own.)
    large = torch.empty(16 << 20, dtype=torch.uint8).fill_(1)
    del large
    blocks = [torch.ones(256 * 1024 + 4096 * (i % 7)) for i in range(600)]  # ~600 MiB
    kept = blocks[1::2]
    del blocks
    before = resident_bytes()
    assert release_free_memory()
    after = resident_bytes()
    assert before - after > 200 * 2**20, (before, after)
    assert all(float(b[0]) == 1.0 for b in kept)  # what lives is untouched
