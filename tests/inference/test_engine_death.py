"""What a call waiting on a vLLM engine that died says (the death itself is caused for real
in tests/inference/test_service_integration.py; an out-of-memory kill cannot be, so the
kernel's record of one is given here)."""

from __future__ import annotations

import signal

from etude.common.process_deaths import OomKill
from etude.inference.vllm_backend import engine_death


def test_an_engine_the_kernel_killed_for_memory_says_out_of_memory():
    ended = [("VLLM::EngineCore (pid 41)", 41, -signal.SIGKILL)]
    kills = [OomKill(7, "python3", 90.0), OomKill(41, "VLLM::EngineCore", 3.2)]
    assert engine_death(ended, kills) == (
        "the inference engine died: out of memory (the kernel's OOM killer ended "
        "VLLM::EngineCore (pid 41) 3 s ago)"
    )


def test_any_other_death_says_how_the_engine_process_ended():
    ended = [("VLLM::EngineCore (pid 41)", 41, -signal.SIGKILL)]
    assert engine_death(ended, [OomKill(7, "python3", 1.0)]) == (
        "the inference engine died: VLLM::EngineCore (pid 41) was killed by SIGKILL"
    )
    assert engine_death([], []) == "the inference engine died: vLLM reports its engine core dead"
