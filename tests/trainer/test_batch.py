"""A multi-turn trajectory sampled by the inference engine, collated for the trainer: the
trainer's logprobs on the same weights equal the behaviour logprobs (no mismatch), the mask
covers exactly the sampled tokens, and the loss runs on it."""

from __future__ import annotations

import torch

from etude.common.payloads import PayloadCodec, RolloutRequest, Trajectory, encode, schema_of
from etude.inference.engine import EngineConfig
from etude.inference.torch_backend import TorchBackend
from etude.inference.types import GenerationRequest, SamplingParams
from etude.model.checkpoint import build_model
from etude.model.tokenizer import load_tokenizer
from etude.rollout.trajectory import TrajectoryBuilder
from etude.trainer.batch import (
    collate,
    shared_prefix_length,
    token_logprobs,
    token_logprobs_and_entropy,
)
from etude.trainer.loss import group_advantages, policy_loss
from tests.inference.completions import run_request
from tests.inference.conftest import small_moe_config


async def _episode(backend, tokenizer, request: RolloutRequest, seed: int) -> Trajectory:
    """Two policy turns with a (fixed) tool result between them, sampled for real."""
    builder = TrajectoryBuilder(request)
    builder.add_context(tokenizer.encode("<|im_start|>user\nFix the bug.<|im_end|>\n"))
    for turn in range(2):
        params = SamplingParams(temperature=1.0, max_tokens=6, seed=seed + turn)
        generation = GenerationRequest(request_id=f"{request.group_id}-{seed}-{turn}",
                                       prompt_token_ids=tuple(builder.token_ids),
                                       sampling=params)  # fmt: skip
        completion = (await run_request(backend, generation))[0]
        builder.add_sampled(completion["tokens"], completion["logprobs"], completion["versions"])
        builder.end_turn(["read_file"], seconds=0.01)
        builder.add_context(tokenizer.encode("<tool_result>def f(): pass</tool_result>\n"))
    return builder.finish(reward=float(seed % 2), components={"tests": 1.0}, reason="submitted")


async def test_trainer_logprobs_match_the_behaviour_logprobs_on_the_same_weights():
    tokenizer = load_tokenizer()
    model = build_model(small_moe_config(len(tokenizer)), seed=0).eval()
    backend = TorchBackend(model, tokenizer, EngineConfig(max_num_seqs=4, max_model_len=256))
    request = RolloutRequest(run_id="r", task_id="t", group_id="g", sample_index=0,
                             min_policy_version=0)  # fmt: skip
    try:
        trajectories = [await _episode(backend, tokenizer, request, seed) for seed in (1, 2)]
    finally:
        await backend.close()
    # Through the queue's codec and back, as the trainer receives them.
    codec = PayloadCodec([Trajectory])
    trajectories = [codec.decode(schema_of(Trajectory), encode(t)) for t in trajectories]
    assert trajectories[0].turns == 2 and trajectories[0].tool_counts == {"read_file": 2}

    batch = collate(trajectories)
    sampled = [sum(t.loss_mask) for t in trajectories]
    assert batch.mask_BT.sum(-1).tolist() == sampled and sampled[0] > 0
    with torch.no_grad():
        logprobs, _ = token_logprobs(model, batch)
    on = batch.mask_BT.bool()
    assert torch.allclose(logprobs[on], batch.behaviour_logprobs_BT[on], atol=1e-4, rtol=0)
    assert (batch.policy_versions_BT[on] == 0).all() and (batch.policy_versions_BT[~on] == -1).all()

    model.train()
    logprobs, aux = token_logprobs(model, batch)
    advantages = group_advantages(batch.rewards_B)
    loss, stats = policy_loss(logprobs, batch.behaviour_logprobs_BT, advantages, batch.mask_BT)
    (loss + 0.001 * aux).backward()
    assert stats.mismatch_kl < 1e-6  # same weights, same numerics
    assert model.lm_head.weight.grad is not None


def _group(prompt: list[int], completions: list[list[int]]) -> list[Trajectory]:
    """A GRPO group: one prompt, several sampled completions of different lengths."""
    request = RolloutRequest(run_id="r", task_id="t", group_id="g", sample_index=0,
                             min_policy_version=0)  # fmt: skip
    group = []
    for i, completion in enumerate(completions):
        builder = TrajectoryBuilder(request)
        builder.add_context(prompt)
        builder.add_sampled(completion, [-1.0] * len(completion), [0] * len(completion))
        builder.end_turn([], seconds=0.0)
        builder.add_context([5, 6])  # a tool result, then the policy again
        builder.add_sampled(completion[:2], [-1.0, -1.0], [0, 0])
        group.append(builder.finish(reward=float(i % 2), components={}, reason="submitted"))
    return group


def test_a_groups_shared_prompt_runs_once_with_the_same_logprobs_and_gradients():
    """The trainer runs a group's prompt once and its completions after it: the logprobs and
    the gradients must be those of the full forward, for the MoE and the Llama layouts."""
    from tests.model.test_llama import llama_config

    generator = torch.Generator().manual_seed(0)
    prompt = torch.randint(10, 200, (40,), generator=generator).tolist()
    completions = [torch.randint(10, 200, (n,), generator=generator).tolist() for n in (7, 3, 11)]
    batch = collate(_group(prompt, completions))
    assert shared_prefix_length(batch) == len(prompt) - 1  # the prompt's inputs, no target
    for config in (small_moe_config(256), llama_config(vocab_size=256)):
        model = build_model(config, seed=3).train()
        grads = []
        for shared in (False, True):
            model.zero_grad()
            logprobs, _ = token_logprobs(
                model, batch, policy_tokens_only=True, shared_prefix=shared
            )
            (logprobs * batch.mask_BT).sum().backward()
            grads.append({n: p.grad.clone() for n, p in model.named_parameters()})
            if not shared:
                full = logprobs.detach()
        assert torch.allclose(logprobs.detach(), full, atol=1e-5, rtol=0)
        assert (logprobs.detach()[batch.mask_BT == 0] == 0).all()
        for name, grad in grads[0].items():
            assert torch.allclose(grads[1][name], grad, atol=1e-5, rtol=1e-4), name


def test_the_output_layer_in_pieces_and_recomputed_layers_change_no_logprob_or_gradient(
    monkeypatch,
):
    """What bounds a step's memory (the output layer a few rows at a time, recomputed in the
    backward pass; the trained layers' activations recomputed too) must give the logprobs,
    entropies and gradients of the plain full-vocabulary forward."""
    from etude.trainer import batch as batch_module
    from tests.model.test_llama import llama_config

    generator = torch.Generator().manual_seed(1)
    prompt = torch.randint(10, 200, (30,), generator=generator).tolist()
    completions = [torch.randint(10, 200, (n,), generator=generator).tolist() for n in (9, 4, 13)]
    batch = collate(_group(prompt, completions))
    # Five rows of a 256-token vocabulary a piece: 26 trained tokens in six pieces.
    monkeypatch.setattr(batch_module, "HEAD_PIECE_BYTES", 5 * 4 * 256)
    for config in (small_moe_config(256), llama_config(vocab_size=256)):
        model = build_model(config, seed=4).train()
        for p in model.model.layers[0].parameters():
            p.requires_grad_(False)  # a frozen layer runs plainly, the others recompute
        results = []
        for bounded in (False, True):
            model.checkpoint_layers = bounded
            model.zero_grad()
            logprobs, entropy, _ = token_logprobs_and_entropy(
                model, batch, policy_tokens_only=bounded, shared_prefix=bounded
            )
            ((logprobs + 0.1 * entropy) * batch.mask_BT).sum().backward()
            grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
            results.append((logprobs.detach() * batch.mask_BT, entropy.detach() * batch.mask_BT,
                            grads))  # fmt: skip
        (plain_lp, plain_ent, plain_grads), (lp, ent, grads) = results
        assert torch.allclose(lp, plain_lp, atol=1e-5, rtol=0)
        assert torch.allclose(ent, plain_ent, atol=1e-5, rtol=0)
        assert grads.keys() == plain_grads.keys()
        for name, grad in plain_grads.items():
            assert torch.allclose(grads[name], grad, atol=1e-5, rtol=1e-4), name


def test_a_micro_batch_within_one_output_layer_piece_trains_as_an_unbounded_step_to_the_bit(
    monkeypatch,
):
    """The guard's tiny policy (and every micro-batch whose logits fit one piece) must see
    the same sums as a step without pieces or recomputation: its SFT is hundreds of steps
    long, and gradients that differ in their last bits end in another policy."""
    from etude.trainer import batch as batch_module

    generator = torch.Generator().manual_seed(2)
    prompt = torch.randint(10, 200, (30,), generator=generator).tolist()
    # 640 trained tokens: more rows than a piece of a row-sized rule would hold.
    completions = [torch.randint(10, 200, (n,), generator=generator).tolist() for n in (300, 340)]
    batch = collate(_group(prompt, completions))
    model = build_model(small_moe_config(256), seed=4).train()

    def gradients() -> dict[str, torch.Tensor]:
        model.zero_grad()
        logprobs, entropy, _ = token_logprobs_and_entropy(
            model, batch, policy_tokens_only=True, shared_prefix=True
        )
        ((logprobs + 0.1 * entropy) * batch.mask_BT).sum().backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}

    with monkeypatch.context() as unbounded:  # one product over every row, kept as it is
        unbounded.setattr(batch_module, "HEAD_PIECE_BYTES", 1 << 40)
        unbounded.setattr(batch_module, "_head_piece", batch_module._head_logprobs)
        unbounded_grads = gradients()
    grads = gradients()
    assert grads.keys() == unbounded_grads.keys()
    for name, grad in unbounded_grads.items():
        assert torch.equal(grads[name], grad), name


def test_rows_with_nothing_in_common_run_whole():
    batch = collate(_group([1, 2, 3], [[7, 8, 9]]) + _group([4, 2, 3], [[7, 8]]))
    assert shared_prefix_length(batch) == 0
