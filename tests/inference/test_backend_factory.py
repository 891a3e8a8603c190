"""How the configured backend is started: torch's CPU threads leave the event loop a core."""

from __future__ import annotations

import os

import torch

from etude.inference.backend_factory import cpu_threads, start_backend
from etude.inference.config import InferenceConfig


def test_torch_threads_leave_one_cpu_to_the_event_loop_unless_set():
    available = len(os.sched_getaffinity(0))
    assert cpu_threads(InferenceConfig()) == max(1, available - 1)
    assert cpu_threads(InferenceConfig(cpu_threads=3)) == 3


async def test_the_torch_backend_starts_with_the_configured_threads(tmp_path):
    before = torch.get_num_threads()
    try:
        backend = await start_backend(InferenceConfig(cpu_threads=1), tmp_path)
        await backend.close()
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
