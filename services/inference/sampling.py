"""Choosing the next token: greedy, or temperature / top-k / top-p sampling from a
per-sequence random generator, so a seeded sequence draws the same tokens whatever else
shares its batch."""

from __future__ import annotations

import torch

from etude.inference.types import SamplingParams

GREEDY_BELOW = 1e-5
"""Temperatures under this sample greedily, as vLLM does: dividing logits by 1e-30 makes
them infinite, and softmax of infinities is NaN."""


def sequence_generator(
    seed: int | None, index: int, device: torch.device | str = "cpu"
) -> torch.Generator:
    """The random stream of completion `index` of a request (seeded, or from the OS), on the
    device the logits live on."""
    generator = torch.Generator(device=device)
    if seed is None:
        generator.seed()
    else:
        # Distinct, reproducible streams for the n completions of one seeded request.
        generator.manual_seed((seed * 1_000_003 + index) % (1 << 63))
    return generator


def filter_logits(logits_V: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """Temperature, then top-k, then top-p (nucleus), as vLLM applies them."""
    scaled = logits_V / params.temperature
    if 0 < params.top_k < scaled.shape[-1]:
        kth = scaled.topk(params.top_k).values[-1]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_logits, order = scaled.sort(descending=True)
        cumulative = sorted_logits.softmax(-1).cumsum(-1)
        # Drop a token once the tokens before it already cover top_p; the first always stays.
        drop_sorted = (cumulative - sorted_logits.softmax(-1)) >= params.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, order, drop_sorted)
        scaled = scaled.masked_fill(drop, float("-inf"))
    return scaled


def sample(
    logits_BV: torch.Tensor,
    params: list[SamplingParams],
    generators: list[torch.Generator],
) -> tuple[list[int], list[float]]:
    """One token per row, and its log-probability under the model's own distribution
    (log-softmax of the raw logits, before temperature and filtering: the quantity a policy
    gradient needs)."""
    logits_BV = logits_BV.float()
    logprobs_BV = logits_BV.log_softmax(-1)
    tokens: list[int] = []
    for row, (p, generator) in enumerate(zip(params, generators, strict=True)):
        if p.temperature < GREEDY_BELOW:
            tokens.append(int(logits_BV[row].argmax()))
            continue
        probs = filter_logits(logits_BV[row], p).softmax(-1)
        tokens.append(int(torch.multinomial(probs, 1, generator=generator)))
    index = torch.tensor(tokens, device=logits_BV.device)
    chosen = logprobs_BV.gather(1, index[:, None])[:, 0]
    return tokens, chosen.tolist()
