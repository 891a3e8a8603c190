"""Generation throughput of the torch engine against Hugging Face `generate`, and the time a
weight update takes.

- Checkpoint: the `tiny` preset (fresh weights, seed 0, fp32) with the bundled tokenizer,
  written to a temporary directory; both sides load that same directory.
- Prompts: the first ~96 tokens of files of the bundled etude-mini projects (a different file
  per request). Every request is greedy and generates exactly `max_tokens` (EOS ignored on
  both sides), so both sides produce the same amount of text.
- Baseline, `hf_generate_tokens_per_s`: `model.generate(do_sample=False)` on one request at
  a time (how a server without continuous batching serves), new tokens / wall time.
- `tokens_per_s_cN`: N clients each with one request in flight against the engine in this
  process (`TorchBackend.generate`, no gRPC), new tokens of all requests / wall time.
- `update_weights_s_<preset>`: one UpdateWeights call through a real gRPC server on
  loopback: every tensor of the model, streamed in 2 MiB chunks, until the engine serves
  the new version; each call's reply and the policy served afterwards are checked. The
  median of 3 calls, in quick mode too: the first call on a fresh server and channel also
  pays one-time costs that a trainer's later updates do not (the connection's flow-control
  window growing, the first touch of every buffer's pages), about a third more than a
  later call of the tiny preset.

Torch uses every core; any other load on the machine shows in these figures.

    python loadtests/inference_throughput.py --quick --json out.json
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
from benchlib import argument_parser, ensure_credentials, metric, print_metrics, write_json
from transformers import AutoModelForCausalLM

from etude.common.grpc_server import ServiceRuntime
from etude.common.settings import GrpcSettings
from etude.inference.backend_factory import cpu_threads
from etude.inference.client import GrpcInference
from etude.inference.config import InferenceConfig
from etude.inference.engine import EngineConfig
from etude.inference.server import InferenceServicer, registration
from etude.inference.serving import Serving
from etude.inference.torch_backend import TorchBackend
from etude.inference.types import GenerationRequest, SamplingParams
from etude.model.checkpoint import build_model, load_model, save_checkpoint
from etude.model.config import preset
from etude.model.tokenizer import load_tokenizer
from etude.tasks.materialize import PROJECTS_DIR

PROMPT_TOKENS = 96


@dataclass(frozen=True)
class Plan:
    max_tokens: int
    hf_requests: int
    requests_per_client: int
    update_repeats: int


QUICK = Plan(max_tokens=32, hf_requests=3, requests_per_client=1, update_repeats=3)
FULL = Plan(max_tokens=128, hf_requests=8, requests_per_client=3, update_repeats=3)


def prompts(tokenizer, count: int) -> list[list[int]]:
    files = sorted(PROJECTS_DIR.rglob("*.py"))
    encoded = [tokenizer.encode(f.read_text())[:PROMPT_TOKENS] for f in files]
    encoded = [p for p in encoded if len(p) == PROMPT_TOKENS]
    return [encoded[i % len(encoded)] for i in range(count)]


def hf_tokens_per_s(checkpoint: Path, plan: Plan, tokenizer) -> float:
    model = AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32).eval()
    generated, elapsed = 0, 0.0
    for index, prompt in enumerate(prompts(tokenizer, plan.hf_requests + 1)):
        ids = torch.tensor([prompt])
        started = time.perf_counter()
        with torch.no_grad():
            out = model.generate(
                ids,
                attention_mask=torch.ones_like(ids),
                do_sample=False,
                max_new_tokens=plan.max_tokens,
                min_new_tokens=plan.max_tokens,
                pad_token_id=tokenizer.eos_token_id,
            )
        if index > 0:  # the first request warms up
            elapsed += time.perf_counter() - started
            generated += out.shape[1] - ids.shape[1]
    return generated / elapsed


async def engine_tokens_per_s(backend: TorchBackend, plan: Plan, clients: int, tokenizer):
    pool = prompts(tokenizer, clients * plan.requests_per_client)
    params = SamplingParams(temperature=0.0, max_tokens=plan.max_tokens, ignore_eos=True)

    async def client(index: int) -> int:
        count = 0
        for r in range(plan.requests_per_client):
            prompt = pool[index * plan.requests_per_client + r]
            request = GenerationRequest(
                request_id=f"c{clients}-{index}-{r}",
                prompt_token_ids=tuple(prompt),
                sampling=params,
            )
            tokens, reason = 0, None
            async for delta in backend.generate(request):
                tokens += len(delta.token_ids)
                reason = delta.finish_reason or reason
            # Timing a cut-short or failed completion would report a rate nothing achieved.
            if reason != "length" or tokens != plan.max_tokens:
                raise RuntimeError(
                    f"{request.request_id} ended {reason!r} after {tokens} of "
                    f"{plan.max_tokens} tokens"
                )
            count += tokens
        return count

    started = time.perf_counter()
    counts = await asyncio.gather(*(client(i) for i in range(clients)))
    return sum(counts) / (time.perf_counter() - started)


async def update_weights_seconds(name: str, repeats: int, vocab_size: int, tokenizer) -> float:
    model = build_model(preset(name, vocab_size), seed=0)
    backend = TorchBackend(model, tokenizer, EngineConfig(max_num_seqs=1, max_model_len=64))
    runtime = ServiceRuntime(
        "inference",
        GrpcSettings(port=0, drain_seconds=0),
        [registration(InferenceServicer(Serving(backend), 1 << 40))],
    )
    await runtime.start()
    client = GrpcInference(runtime.address)
    tensors = list(build_model(preset(name, vocab_size), seed=1).state_dict().items())
    seconds = []
    try:
        for version in range(1, repeats + 1):
            started = time.perf_counter()
            update = await client.update_weights(version, tensors)
            seconds.append(time.perf_counter() - started)
            served = (await client.get_policy()).version
            if (update.version, update.tensors_updated, served) != (version, len(tensors), version):
                raise RuntimeError(
                    f"UpdateWeights to version {version} answered {update}; serving {served}"
                )
    finally:
        await client.close()
        await runtime.shutdown()
        await backend.close()
    return statistics.median(seconds)


async def run(plan: Plan) -> dict:
    tokenizer = load_tokenizer()
    metrics = {}
    with tempfile.TemporaryDirectory() as scratch:
        checkpoint = Path(scratch) / "tiny"
        model = build_model(preset("tiny", len(tokenizer)), seed=0)
        model.config.eos_token_id = tokenizer.eos_token_id
        save_checkpoint(model, checkpoint, tokenizer)
        baseline = hf_tokens_per_s(checkpoint, plan, tokenizer)
        # The engine with the CPU threads the service gives it (one CPU left to the event
        # loop that streams its tokens); the baseline keeps torch's default.
        torch.set_num_threads(cpu_threads(InferenceConfig()))
        backend = TorchBackend(load_model(checkpoint), tokenizer, EngineConfig(max_num_seqs=32))
        try:
            await engine_tokens_per_s(backend, plan, 1, tokenizer)  # warm-up
            for clients in (1, 8, 32):
                rate = await engine_tokens_per_s(backend, plan, clients, tokenizer)
                target = round(3 * baseline, 1) if clients >= 8 else None
                metrics[f"tokens_per_s_c{clients}"] = metric(
                    rate, "tokens/s", baseline=baseline, target=target
                )
        finally:
            await backend.close()
    metrics["hf_generate_tokens_per_s"] = metric(baseline, "tokens/s")
    speedup = metrics["tokens_per_s_c8"]["value"] / baseline
    metrics["speedup_vs_hf_c8"] = metric(speedup, "x", baseline=1.0, target=3)
    with tempfile.TemporaryDirectory() as scratch:
        ensure_credentials(Path(scratch))  # the gRPC server requires them
        for name in ("tiny", "small"):
            seconds = await update_weights_seconds(
                name, plan.update_repeats, len(tokenizer), tokenizer
            )
            target = 0.1 if name == "tiny" else None
            metrics[f"update_weights_s_{name}"] = metric(seconds, "s", target=target)
    return metrics


def main() -> None:
    parser = argument_parser(__doc__)
    args = parser.parse_args()
    plan = QUICK if args.quick else FULL
    metrics = asyncio.run(run(plan))
    print_metrics("inference throughput (torch engine vs Hugging Face generate)", metrics)
    write_json(
        args.json,
        "inference_throughput",
        metrics,
        quick=args.quick,
        cores=os.cpu_count(),
        max_tokens=plan.max_tokens,
        prompt_tokens=PROMPT_TOKENS,
    )


if __name__ == "__main__":
    main()
