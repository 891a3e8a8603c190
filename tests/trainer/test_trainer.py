"""One GRPO step on a real (tiny) policy: micro-batching, advantages, precision."""

from __future__ import annotations

import copy
import dataclasses
import zlib

import pytest
import torch

from etude.common.payloads import Trajectory
from etude.common.run_config import LossSettings, TrainerConfig
from etude.model.checkpoint import build_model
from etude.model.config import preset
from etude.trainer.trainer import PolicyTrainer


def _model():
    return build_model(dataclasses.replace(preset("tiny"), num_hidden_layers=2), seed=3)


def _trajectory(group: str, index: int, reward: float, length: int = 24) -> Trajectory:
    generator = torch.Generator().manual_seed(zlib.crc32(f"{group}{index}".encode()))
    tokens = torch.randint(3, 8000, (length,), generator=generator).tolist()
    mask = [0] * 8 + [1] * 6 + [0] * 4 + [1] * (length - 18)  # prompt, turn, tool result, turn
    return Trajectory(
        run_id="r", task_id="t", group_id=group, sample_index=index, token_ids=tokens,
        logprobs=[-2.0 if m else 0.0 for m in mask], policy_versions=[0 if m else -1 for m in mask],
        loss_mask=mask, reward=reward,
    )  # fmt: skip


GROUPS = [
    [_trajectory("a", 0, 1.0), _trajectory("a", 1, 0.0, 30)],
    [_trajectory("b", 0, 0.0, 20), _trajectory("b", 1, 1.0)],
]


def _params(model) -> torch.Tensor:
    return torch.cat([p.detach().flatten() for p in model.parameters()])


@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean", "dr_grpo"])
def test_micro_batches_accumulate_to_one_pass_over_the_batch(aggregation):
    base = _model()
    results = []
    for micro_batch in (1, 4):
        model = copy.deepcopy(base)
        # Without the MoE load-balancing term: it is a statistic of each forward's routing,
        # not a sum over sequences, so it legitimately differs between micro-batchings.
        loss = LossSettings(aggregation=aggregation, aux_loss_coef=0.0)
        config = TrainerConfig(lr=1e-3, micro_batch=micro_batch, loss=loss)
        stats = PolicyTrainer(model, config).step(GROUPS)
        results.append((stats, _params(model)))
    (one, after_one), (four, after_four) = results
    assert one.loss == pytest.approx(four.loss, rel=1e-4, abs=1e-6)
    assert one.grad_norm == pytest.approx(four.grad_norm, rel=1e-4)
    assert torch.allclose(after_one, after_four, atol=1e-6)
    assert one.tokens == sum(sum(t.loss_mask[1:]) for g in GROUPS for t in g)
    assert (one.reward_mean, one.pass_rate, one.sequences) == (0.5, 0.5, 4)


def test_groups_with_equal_rewards_give_no_policy_gradient():
    model = _model()
    equal = [[_trajectory("a", 0, 1.0), _trajectory("a", 1, 1.0)]]
    config = TrainerConfig(lr=1e-3, loss=LossSettings(aux_loss_coef=0.0))
    before = _params(model)
    stats = PolicyTrainer(model, config).step(equal)
    assert stats.policy_loss == 0.0 and stats.grad_norm == 0.0
    assert torch.equal(before, _params(model))


def test_a_step_on_mxfp8_matches_the_unquantized_loss_closely():
    from etude.kernels.mx_training import set_precision

    losses = {}
    for precision in ("bf16", "mxfp8"):
        model = set_precision(_model(), precision)
        config = TrainerConfig(lr=1e-3, precision=precision)
        stats = PolicyTrainer(model, config).step(GROUPS)
        assert torch.isfinite(torch.tensor(stats.loss)) and stats.grad_norm > 0
        losses[precision] = stats
    # The behaviour logprobs (-2) are far from the model's, so the mismatch KL is large and
    # the same in both precisions up to quantization noise.
    assert losses["mxfp8"].mismatch_kl == pytest.approx(losses["bf16"].mismatch_kl, rel=0.05)


def test_policy_token_logits_give_the_same_step_as_full_logits():
    base = _model()
    after = []
    for only in (False, True):
        model = copy.deepcopy(base)
        config = TrainerConfig(lr=1e-3, policy_token_logits=only)
        stats = PolicyTrainer(model, config).step(GROUPS)
        after.append((stats, _params(model)))
    (full, full_params), (masked, masked_params) = after
    assert masked.loss == pytest.approx(full.loss, rel=1e-5, abs=1e-7)
    assert masked.entropy == pytest.approx(full.entropy, rel=1e-5)
    assert masked.grad_norm == pytest.approx(full.grad_norm, rel=1e-4)
    assert torch.allclose(full_params, masked_params, atol=1e-6)


def test_trainable_layers_move_only_the_last_layers_and_the_final_norm():
    model = build_model(dataclasses.replace(preset("tiny-dense"), num_hidden_layers=3), seed=1)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = PolicyTrainer(model, TrainerConfig(lr=1e-2, trainable_layers=1))
    assert trainer.trainable and all(
        n.startswith(("model.layers.2.", "model.norm.", "lm_head.")) for n in trainer.trainable
    )
    trainer.step(GROUPS)
    moved = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert moved == set(trainer.trainable)
    # The optimizer holds state only for what trains.
    assert len(trainer.optimizer.state) == len(trainer.trainable)


def test_pass_rate_counts_correctness_not_rewards_a_turn_cost_took_below_one():
    import msgspec

    from etude.rollout.trajectory import shaped_reward

    def costed(group: str, index: int, correctness: float, turns: int) -> Trajectory:
        reward, deductions = shaped_reward(correctness, {"turn_cost": 0.1 * turns})
        components = {"correctness": correctness, **deductions}
        return msgspec.structs.replace(
            _trajectory(group, index, reward), reward_components=components
        )

    groups = [[costed("a", 0, 1.0, 2), costed("a", 1, 0.0, 1)],
              [costed("b", 0, 1.0, 4), costed("b", 1, 0.0, 3)]]  # fmt: skip
    stats = PolicyTrainer(_model(), TrainerConfig(lr=1e-3)).step(groups)
    assert stats.pass_rate == 0.5  # no reward reaches 1, yet two episodes solved their task
    assert stats.reward_mean == pytest.approx((0.8 - 0.1 + 0.6 - 0.3) / 4)


def test_a_bf16_autocast_step_matches_the_fp32_step_closely():
    base = _model()
    results = []
    for mode in ("off", "bf16"):
        model = copy.deepcopy(base)
        stats = PolicyTrainer(model, TrainerConfig(lr=1e-3, autocast=mode)).step(GROUPS)
        results.append((stats, _params(model)))
    (fp32, after_fp32), (bf16, after_bf16) = results
    assert bf16.entropy == pytest.approx(fp32.entropy, rel=2e-2)
    assert bf16.grad_norm == pytest.approx(fp32.grad_norm, rel=5e-2)
    # The weights stay fp32 and move in nearly the direction the fp32 step moves them
    # (Adam's per-parameter scaling magnifies bf16 noise in tiny gradients, not the trend).
    assert next(model.parameters()).dtype == torch.float32
    start = _params(base)
    cosine = torch.nn.functional.cosine_similarity(after_fp32 - start, after_bf16 - start, 0)
    assert cosine > 0.95
