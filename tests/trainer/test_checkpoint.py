"""Trainer checkpoints: an exact resume, atomic writes, keeping the newest K."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from etude.model.checkpoint import build_model, load_model
from etude.model.config import tiny
from etude.trainer.checkpoint import TrainerState, latest_checkpoint, load, save

CONFIG = dataclasses.replace(tiny(256), num_hidden_layers=2, hidden_size=64,
                             num_attention_heads=2, num_key_value_heads=1, head_dim=32,
                             moe_intermediate_size=64, intermediate_size=128)  # fmt: skip


def _step(model, optimizer) -> float:
    # Random data drawn from torch's RNG: an exact resume must restore the generator too.
    tokens = torch.randint(0, 256, (2, 17))
    out = model(tokens[:, :-1])
    loss = F.cross_entropy(out.logits.flatten(0, 1), tokens[:, 1:].flatten()) + 0.01 * (
        out.aux_loss
    )
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return float(loss.detach())


def _fresh():
    model = build_model(CONFIG, seed=0).train()
    return model, torch.optim.AdamW(model.parameters(), lr=1e-3)


def test_resume_gives_the_identical_next_step(tmp_path):
    torch.manual_seed(0)
    model, optimizer = _fresh()
    for _ in range(3):
        _step(model, optimizer)
    save(tmp_path, model, optimizer, TrainerState(step=3, policy_version=3, extra={"cursor": 6}))
    expected = [_step(model, optimizer) for _ in range(2)]

    torch.manual_seed(1234)  # whatever happened since, the checkpoint restores it
    resumed, resumed_optimizer = _fresh()
    state = load(latest_checkpoint(tmp_path), resumed, resumed_optimizer)
    assert (state.step, state.policy_version, state.extra) == (3, 3, {"cursor": 6})
    assert [_step(resumed, resumed_optimizer) for _ in range(2)] == expected


def test_checkpoints_are_servable_atomic_and_only_the_newest_are_kept(tmp_path):
    model, optimizer = _fresh()
    for step in range(1, 6):
        save(tmp_path, model, optimizer, TrainerState(step, step), keep=2)
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == ["step-00000004", "step-00000005"]
    # A write that died half way (a temporary directory) is never taken for the latest.
    (tmp_path / ".step-00000009.tmp-1").mkdir()
    (tmp_path / "step-00000007").mkdir()  # no trainer state: incomplete
    assert latest_checkpoint(tmp_path).name == "step-00000005"
    # The weights are a Hugging Face checkpoint the inference service loads as is.
    served = load_model(latest_checkpoint(tmp_path))
    tokens = torch.randint(0, 256, (1, 8))
    with torch.no_grad():
        assert torch.equal(served(tokens).logits, model.eval()(tokens).logits)
