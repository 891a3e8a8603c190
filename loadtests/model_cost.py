"""What upcycling costs: a training step and generation of the dense SmolLM2-135M-Instruct
against its sparse upcycle (every MLP → E experts, top-k), on this machine's CPU.

- Models: `smollm2-135m` imported into `--cache` (once; a temporary directory by default),
  fp32; the MoE is `upcycle(dense, E, k)` in memory (its logits equal the dense model's).
- `train_step_s_*`: one forward and backward (cross-entropy, plus the load-balancing loss for
  the MoE) over 2 × 512 tokens of the etude-mini projects' code, no optimizer step; the
  median over the repetitions after one warm-up step.
- `generate_tokens_per_s_*_cN`: N clients, each with one greedy request of `max_tokens` new
  tokens in flight against the torch engine in this process (`TorchBackend.generate`, no
  gRPC), new tokens of all requests / wall time, after a warm-up request.
- `parameters_m_*`: parameters in millions (for the MoE also those active per token).

Torch uses every core; any other load on the machine shows in these figures.

    python loadtests/model_cost.py --quick --json out.json
"""

from __future__ import annotations

import asyncio
import os
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from benchlib import argument_parser, metric, print_metrics, write_json

from etude.inference.engine import EngineConfig
from etude.inference.torch_backend import TorchBackend
from etude.inference.types import GenerationRequest, SamplingParams
from etude.model.checkpoint import load_model
from etude.model.model import Transformer
from etude.model.pretrained import resolve_init
from etude.model.tokenizer import load_tokenizer
from etude.model.upcycling import upcycle
from etude.tasks.materialize import PROJECTS_DIR

BATCH, SEQUENCE = 2, 512
PROMPT_TOKENS = 64


@dataclass(frozen=True)
class Plan:
    train_repeats: int
    max_tokens: int
    clients: tuple[int, ...]


QUICK = Plan(train_repeats=1, max_tokens=32, clients=(1, 4))
FULL = Plan(train_repeats=3, max_tokens=128, clients=(1, 4, 16))


def code_tokens(tokenizer, count: int) -> list[int]:
    """`count` tokens of the bundled projects' code, files concatenated in sorted order."""
    ids: list[int] = []
    for path in sorted(PROJECTS_DIR.rglob("*.py")):
        ids += tokenizer.encode(path.read_text(), add_special_tokens=False)
        if len(ids) >= count:
            return ids[:count]
    raise RuntimeError("the bundled projects hold too little code")


def train_step_seconds(model: Transformer, tokens: torch.Tensor, repeats: int) -> float:
    model.train()
    seconds = []
    for _ in range(repeats + 1):  # the first is a warm-up
        started = time.perf_counter()
        out = model(tokens[:, :-1])
        loss = F.cross_entropy(out.logits.flatten(0, 1), tokens[:, 1:].flatten())
        if out.aux_loss is not None:
            loss = loss + model.config.router_aux_loss_coef * out.aux_loss
        loss.backward()
        seconds.append(time.perf_counter() - started)
        model.zero_grad(set_to_none=True)
    model.eval()
    return statistics.median(seconds[1:])


async def tokens_per_s(backend: TorchBackend, prompts: list[list[int]], max_tokens: int) -> float:
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)

    async def one(index: int, prompt: list[int]) -> int:
        request = GenerationRequest(
            request_id=f"r{index}-{time.perf_counter_ns()}",
            prompt_token_ids=tuple(prompt),
            sampling=params,
        )
        return sum([len(delta.token_ids) async for delta in backend.generate(request)])

    started = time.perf_counter()
    counts = await asyncio.gather(*(one(i, p) for i, p in enumerate(prompts)))
    return sum(counts) / (time.perf_counter() - started)


async def generation(model: Transformer, tokenizer, plan: Plan, prompts) -> dict[int, float]:
    backend = TorchBackend(model, tokenizer, EngineConfig(max_num_seqs=max(plan.clients)))
    try:
        await tokens_per_s(backend, prompts[:1], 8)  # warm-up
        return {n: await tokens_per_s(backend, prompts[:n], plan.max_tokens) for n in plan.clients}
    finally:
        await backend.close()


def active_parameters(model: Transformer) -> int:
    """Parameters one token goes through: all but the experts it is not routed to."""
    config = model.config
    inactive = 0
    if config.is_moe:
        per_expert = 3 * config.hidden_size * config.moe_intermediate_size
        idle = config.num_experts - config.num_experts_per_tok
        moe_layers = sum(config.is_moe_layer(i) for i in range(config.num_hidden_layers))
        inactive = moe_layers * idle * per_expert
    return model.num_parameters - inactive


async def run(plan: Plan, cache: Path, experts: int, top_k: int) -> dict:
    directory = Path(resolve_init("smollm2-135m", cache))
    tokenizer = load_tokenizer(directory)
    dense = load_model(directory).eval()
    ids = code_tokens(tokenizer, BATCH * (SEQUENCE + 1) + max(plan.clients) * PROMPT_TOKENS)
    tokens = torch.tensor(ids[: BATCH * (SEQUENCE + 1)]).view(BATCH, SEQUENCE + 1)
    rest = ids[BATCH * (SEQUENCE + 1) :]
    prompts = [rest[i * PROMPT_TOKENS : (i + 1) * PROMPT_TOKENS] for i in range(max(plan.clients))]
    metrics = {}
    models = {"dense": dense}
    models["moe"] = upcycle(dense, experts, top_k, seed=0).eval()
    for name, model in models.items():
        metrics[f"parameters_m_{name}"] = metric(model.num_parameters / 1e6, "M")
        if name == "moe":
            metrics["active_parameters_m_moe"] = metric(active_parameters(model) / 1e6, "M")
        seconds = train_step_seconds(model, tokens, plan.train_repeats)
        metrics[f"train_step_s_{name}"] = metric(seconds, "s")
        for clients, rate in (await generation(model, tokenizer, plan, prompts)).items():
            metrics[f"generate_tokens_per_s_{name}_c{clients}"] = metric(rate, "tokens/s")
    dense_step, moe_step = metrics["train_step_s_dense"], metrics["train_step_s_moe"]
    metrics["train_step_ratio_moe_vs_dense"] = metric(moe_step["value"] / dense_step["value"], "x")
    return metrics


def main() -> None:
    parser = argument_parser(__doc__)
    parser.add_argument("--cache", type=Path, help="where smollm2-135m is imported (reused)")
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--top-k", type=int, default=2)
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    with tempfile.TemporaryDirectory() as scratch:
        cache = args.cache or Path(scratch)
        metrics = asyncio.run(run(plan, cache, args.experts, args.top_k))
    print_metrics(
        f"SmolLM2-135M dense vs upcycled ({args.experts} experts, top-{args.top_k})", metrics
    )
    write_json(
        args.json,
        "model_cost",
        metrics,
        quick=args.quick,
        cores=os.cpu_count(),
        experts=args.experts,
        top_k=args.top_k,
        tokens_per_train_step=BATCH * SEQUENCE,
        max_tokens=plan.max_tokens,
        prompt_tokens=PROMPT_TOKENS,
    )


if __name__ == "__main__":
    main()
