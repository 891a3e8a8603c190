"""A machine without the memory a run needs is told so before anything starts, with what to
change; the estimate follows what make run measured."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from etude.cli.memory_budget import GIB, MemoryNeed, NotEnoughMemoryError, check, run_need
from etude.common.run_config import load_run_config
from etude.inference.config import InferenceConfig
from etude.trainer.driver import serving_sizes
from tests.cli.test_cli_integration import ETUDE, REPO_ROOT

# SmolLM2-135M-Instruct's config.json, as `make run` imports it (the weights are not read).
SMOLLM2 = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 576,
    "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
    "num_key_value_heads": 3, "head_dim": 64, "vocab_size": 49152,
    "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 100000.0,
    "tie_word_embeddings": True, "torch_dtype": "float32",
}  # fmt: skip


def test_make_runs_estimate_is_what_it_measured_within_the_12_gib_budget(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2))
    run = load_run_config(REPO_ROOT / "configs" / "locate-smollm2.yaml")
    inference = InferenceConfig(backend="vllm", model=str(tmp_path), **serving_sizes(run))
    need = dict(run_need(run, inference).parts)
    # Measured: vLLM's service and engine 4.6 GiB at rest with this KV cache; an SFT step
    # of the trainer 2.5-2.9 GiB with activation checkpointing.
    assert 4.5 * GIB < need["inference"] < 5.5 * GIB
    assert 2.5 * GIB < need["trainer"] < 3.5 * GIB
    assert sum(need.values()) < 12 * GIB
    without = load_run_config(REPO_ROOT / "configs" / "locate-smollm2.yaml")
    without = without.model_copy(update={"policy": without.policy.model_copy(
        update={"activation_checkpointing": False})})  # fmt: skip
    assert dict(run_need(without, inference).parts)["trainer"] > need["trainer"] + 2 * GIB


def test_too_little_memory_names_each_part_and_what_to_change():
    need = MemoryNeed((("inference", 6 * GIB), ("trainer", 3 * GIB)))
    check(need, 10 * GIB, "this run")  # enough: silent
    with pytest.raises(NotEnoughMemoryError) as refused:
        check(need, 4 * GIB, "this run")
    message = str(refused.value)
    assert "this run needs about 9.0 GiB" in message and "4.0 GiB available" in message
    assert "inference 6.0 GiB, trainer 3.0 GiB" in message
    assert "rollout.concurrency" in message and "ETUDE_STACK__MEMORY_CHECK=false" in message


@pytest.mark.integration
def test_etude_train_refuses_a_run_the_machine_cannot_hold_before_starting_anything(tmp_path):
    config = tmp_path / "huge.yaml"  # a KV cache for 4,000 episodes of 64k tokens
    config.write_text(yaml.safe_dump({
        "name": "huge", "output_dir": str(tmp_path / "out"),
        "policy": {"max_model_len": 65536},
        "rollout": {"concurrency": 4000, "max_episode_tokens": 65536},
    }))  # fmt: skip
    run_dir = tmp_path / "stack"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ETUDE_INFERENCE__")}
    started = time.monotonic()
    result = subprocess.run(
        [*ETUDE, "train", str(config), "--run-dir", str(run_dir)],
        capture_output=True, text=True, timeout=120, cwd=REPO_ROOT, env=env,
    )  # fmt: skip
    output = " ".join((result.stdout + result.stderr).split())
    assert result.returncode == 2, output
    assert "this run needs about" in output and "GiB available" in output, output
    assert time.monotonic() - started < 60
    assert not (run_dir / "logs").exists()  # no service was started
    assert not list(Path(run_dir).glob("**/*.pid"))
