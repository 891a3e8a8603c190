"""Trajectories into padded training tensors, and the policy's logprobs of their tokens.

Everything is aligned to *targets*: column t describes token t + 1 of the episode, predicted
from tokens 0..t. A padded column has mask 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.utils.checkpoint import checkpoint

from etude.common.payloads import Trajectory
from etude.model.model import Transformer


@dataclass(frozen=True, slots=True)
class Batch:
    inputs_BT: torch.Tensor
    """Token ids fed to the model (each episode without its last token), right-padded."""
    targets_BT: torch.Tensor
    behaviour_logprobs_BT: torch.Tensor
    policy_versions_BT: torch.Tensor
    mask_BT: torch.Tensor
    """1 where the target was sampled by the policy."""
    rewards_B: torch.Tensor


def collate(trajectories: list[Trajectory], pad_id: int = 0) -> Batch:
    width = max(len(t.token_ids) for t in trajectories) - 1
    B = len(trajectories)
    inputs = torch.full((B, width), pad_id, dtype=torch.long)
    targets = torch.full((B, width), pad_id, dtype=torch.long)
    behaviour = torch.zeros(B, width)
    versions = torch.full((B, width), -1, dtype=torch.long)
    mask = torch.zeros(B, width)
    for row, t in enumerate(trajectories):
        n = len(t.token_ids) - 1
        tokens = torch.tensor(t.token_ids)
        inputs[row, :n], targets[row, :n] = tokens[:-1], tokens[1:]
        behaviour[row, :n] = torch.tensor(t.logprobs[1:])
        versions[row, :n] = torch.tensor(t.policy_versions[1:])
        mask[row, :n] = torch.tensor(t.loss_mask[1:], dtype=torch.float32)
    rewards = torch.tensor([t.reward for t in trajectories])
    return Batch(inputs, targets, behaviour, versions, mask, rewards)


def token_logprobs(
    model: Transformer, batch: Batch, *, policy_tokens_only: bool = False,
    shared_prefix: bool = False,
) -> tuple[torch.Tensor, torch.Tensor | None]:  # fmt: skip
    """log π(target | prefix) for every column, differentiable, and the model's MoE
    load-balancing loss (when training). Computed in fp32 whatever the model's dtype.

    `policy_tokens_only`: the output layer runs only where the mask is 1 and other columns
    hold 0. The prompt and tool results need no logits, and with a 49k vocabulary the full
    [B, T, V] logits (and their log-softmax) are most of a step's memory.

    `shared_prefix`: the leading columns every row has in common and that hold no policy
    token (a GRPO group's prompt) run once, not once per row (`shared_prefix_length`);
    their columns hold 0 (`policy_tokens_only` is implied)."""
    if policy_tokens_only or shared_prefix:
        logprobs_N, _, aux = _masked_logprobs(model, batch, entropy=False, shared=shared_prefix)
        return _scatter(logprobs_N, batch), aux
    logprobs_BTV, aux = _vocab_logprobs(model, batch)
    return _gather(logprobs_BTV, batch), aux


def token_logprobs_and_entropy(
    model: Transformer, batch: Batch, *, policy_tokens_only: bool = False,
    shared_prefix: bool = False,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:  # fmt: skip
    """`token_logprobs` plus the entropy of the policy's distribution at every column, from
    the same forward pass (0 at the columns `policy_tokens_only` leaves out)."""
    if policy_tokens_only or shared_prefix:
        logprobs_N, entropy_N, aux = _masked_logprobs(
            model, batch, entropy=True, shared=shared_prefix
        )
        return _scatter(logprobs_N, batch), _scatter(entropy_N, batch), aux
    logprobs_BTV, aux = _vocab_logprobs(model, batch)
    entropy_BT = -(logprobs_BTV.exp() * logprobs_BTV).sum(-1)
    return _gather(logprobs_BTV, batch), entropy_BT, aux


# Below this many shared columns a separate prefix pass costs more than it saves.
MIN_SHARED_PREFIX = 16


def shared_prefix_length(batch: Batch) -> int:
    """How many leading columns every row has in common with no policy token among their
    targets: those inputs can run once for the whole batch. 0 for a single row."""
    B, T = batch.inputs_BT.shape
    if B < 2:
        return 0
    differs_T = (batch.inputs_BT != batch.inputs_BT[:1]).any(0)
    trained_T = batch.mask_BT.bool().any(0)
    stops = (differs_T | trained_T).nonzero()
    return int(stops[0]) if len(stops) else T - 1  # keep a column to run


def _vocab_logprobs(model: Transformer, batch: Batch) -> tuple[torch.Tensor, torch.Tensor | None]:
    out = model(batch.inputs_BT)
    return out.logits.float().log_softmax(-1), out.aux_loss


def _masked_logprobs(model: Transformer, batch: Batch, *, entropy: bool, shared: bool = False):
    """Logprobs of the targets (and entropies) at the N columns with mask 1, as [N]."""
    at_N = batch.mask_BT.reshape(-1).nonzero().squeeze(-1)
    P = shared_prefix_length(batch) if shared else 0
    if P >= MIN_SHARED_PREFIX:
        T = batch.inputs_BT.shape[1]
        prefix = model.forward_prefix(batch.inputs_BT[:1, :P])
        rows, columns = at_N // T, at_N % T  # every trained column lies beyond the prefix
        at_suffix_N = rows * (T - P) + columns - P
        h_ND, aux = model.hidden(batch.inputs_BT[:, P:], at=at_suffix_N, prefix=prefix)
    else:
        h_ND, aux = model.hidden(batch.inputs_BT, at=at_N)
    targets_N = batch.targets_BT.reshape(-1)[at_N]
    rows = head_piece_rows(model.lm_head.out_features)
    pieces = [
        _head_piece(
            model.lm_head, h_ND[start : start + rows], targets_N[start : start + rows], entropy
        )
        for start in range(0, len(targets_N), rows)
    ]
    chosen_N = torch.cat([chosen for chosen, _ in pieces])
    entropy_N = torch.cat([e for _, e in pieces]) if entropy else None
    return chosen_N, entropy_N, aux


# The output layer's fp32 logits computed at once. Over a 49k vocabulary they are 196 KB a
# row, and the log-softmax, its exponent and their gradients hold several copies: for a
# micro-batch of 3,000 trained tokens, 2-3 GiB at once. A piece at a time, and recomputed
# for the backward pass rather than kept (activation checkpointing), they are ~4 x 128 MiB;
# the cost is one more output-layer product per piece in the backward. Pieces are sized in
# bytes, not rows: where the whole micro-batch's logits fit one piece (a small vocabulary,
# a short completion) it runs as one, with the same sums, to the bit, as an unbounded step
# (rows summed in another order change the output layer's gradient in its last bits, and
# over hundreds of SFT steps that is another policy).
HEAD_PIECE_BYTES = 128 << 20


def head_piece_rows(vocab_size: int) -> int:
    return max(1, HEAD_PIECE_BYTES // (4 * vocab_size))


def _head_piece(
    head: torch.nn.Module, h_ND: torch.Tensor, targets_N: torch.Tensor, entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    if torch.is_grad_enabled() and (h_ND.requires_grad or head.weight.requires_grad):
        return checkpoint(_head_logprobs, head, h_ND, targets_N, entropy, use_reentrant=False)
    return _head_logprobs(head, h_ND, targets_N, entropy)


def _head_logprobs(
    head: torch.nn.Module, h_ND: torch.Tensor, targets_N: torch.Tensor, entropy: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Logprobs of the targets (and entropies) of N rows, computed in fp32."""
    logprobs_NV = head(h_ND).float().log_softmax(-1)
    chosen_N = logprobs_NV.gather(-1, targets_N.unsqueeze(-1)).squeeze(-1)
    entropy_N = -(logprobs_NV.exp() * logprobs_NV).sum(-1) if entropy else None
    return chosen_N, entropy_N


def _scatter(values_N: torch.Tensor, batch: Batch) -> torch.Tensor:
    """[N] values at the mask's columns back into a [B, T] tensor of zeros."""
    at_N = batch.mask_BT.reshape(-1).nonzero().squeeze(-1)
    full = values_N.new_zeros(batch.mask_BT.numel())
    return full.index_put((at_N,), values_N).reshape(batch.mask_BT.shape)


def _gather(logprobs_BTV: torch.Tensor, batch: Batch) -> torch.Tensor:
    return logprobs_BTV.gather(-1, batch.targets_BT.unsqueeze(-1)).squeeze(-1)
