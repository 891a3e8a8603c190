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


def shape_logits(
    logits_V: torch.Tensor, params: SamplingParams, prompt: list[int], completion: list[int]
) -> torch.Tensor:
    """Logit bias, then repetition, frequency and presence penalties, as vLLM applies them:
    the repetition penalty looks at prompt and completion, the other two at the completion."""
    if params.logit_bias:
        ids, biases = zip(*params.logit_bias, strict=True)
        logits_V = logits_V.index_add(
            0, torch.tensor(ids, device=logits_V.device),
            torch.tensor(biases, device=logits_V.device, dtype=logits_V.dtype),
        )  # fmt: skip
    if not params.penalised:
        return logits_V
    vocab = logits_V.shape[-1]
    counts = torch.bincount(
        torch.tensor(completion, dtype=torch.long, device=logits_V.device), minlength=vocab
    ).to(logits_V.dtype)
    if params.repetition_penalty != 1.0:
        seen = counts > 0
        seen[torch.tensor(prompt, dtype=torch.long, device=logits_V.device)] = True
        penalised = torch.where(
            logits_V > 0, logits_V / params.repetition_penalty,
            logits_V * params.repetition_penalty,
        )  # fmt: skip
        logits_V = torch.where(seen, penalised, logits_V)
    return (
        logits_V
        - params.frequency_penalty * counts
        - params.presence_penalty * (counts > 0).to(logits_V.dtype)
    )


def top_logprobs(logprobs_V: torch.Tensor, k: int) -> dict[int, float]:
    """The `k` most likely tokens and their logprobs."""
    if k <= 0:
        return {}
    values, ids = logprobs_V.topk(k)
    return dict(zip(ids.tolist(), values.tolist(), strict=True))


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
    histories: list[tuple[list[int], list[int]] | None] | None = None,
) -> tuple[list[int], list[float], list[dict[int, float]]]:
    """One token per row, its log-probability under the model's own distribution
    (log-softmax of the raw logits, before biases, penalties, temperature and filtering: the
    quantity a policy gradient needs), and the row's top alternatives when asked for.
    `histories` holds each penalised row's (prompt, completion so far)."""
    logits_BV = logits_BV.float()
    logprobs_BV = logits_BV.log_softmax(-1)
    tokens: list[int] = []
    for row, (p, generator) in enumerate(zip(params, generators, strict=True)):
        logits_V = logits_BV[row]
        if p.logit_bias or p.penalised:
            prompt, completion = (histories[row] if histories else None) or ([], [])
            logits_V = shape_logits(logits_V, p, prompt, completion)
        if p.temperature < GREEDY_BELOW:
            tokens.append(int(logits_V.argmax()))
            continue
        probs = filter_logits(logits_V, p).softmax(-1)
        tokens.append(int(torch.multinomial(probs, 1, generator=generator)))
    index = torch.tensor(tokens, device=logits_BV.device)
    chosen = logprobs_BV.gather(1, index[:, None])[:, 0]
    alternatives = [top_logprobs(logprobs_BV[row], p.top_logprobs) for row, p in enumerate(params)]
    return tokens, chosen.tolist(), alternatives
