"""MXFP8 against bf16 training on the `tiny` MoE preset: the same initial weights and the
same fixed data stream, only the GEMM precision differs.

The stream is the bundled tokenizer's encoding of the etude-mini projects' sources, cut into
windows in file order, `batch` windows per step. Both runs keep fp32 master weights and use
AdamW; "bf16" rounds every converted GEMM's operands to bf16 with fp32 accumulation (what a
bf16 GEMM computes), "mxfp8" quantizes them to MXFP8 (see `mx_training`). The final loss is
the mean cross-entropy of each trained model, in its own precision, on a held-out set of
windows from the end of the stream.

    python -m etude.kernels.train_compare --steps 200
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from etude.kernels.mx_training import set_precision
from etude.model.checkpoint import build_model
from etude.model.config import preset
from etude.model.tokenizer import load_tokenizer
from etude.tasks.materialize import PROJECTS_DIR

EVAL_WINDOWS = 16


@dataclass(frozen=True, slots=True)
class Run:
    precision: str
    losses: list[float]
    """Training cross-entropy per step."""
    eval_loss: float
    seconds: float


def token_windows(tokenizer, length: int) -> torch.Tensor:
    """[N, length] windows of the bundled projects' sources, in file order."""
    ids: list[int] = []
    for path in sorted(PROJECTS_DIR.rglob("*.py")):
        ids += [*tokenizer.encode(path.read_text()), tokenizer.eos_token_id]
    count = len(ids) // length
    return torch.tensor(ids[: count * length]).reshape(count, length)


def train(precision: str, *, steps: int, batch: int = 2, seq_len: int = 64, seed: int = 0,
          lr: float = 2e-3) -> Run:  # fmt: skip
    tokenizer = load_tokenizer()
    windows = token_windows(tokenizer, seq_len + 1)
    train_windows, held_out = windows[:-EVAL_WINDOWS], windows[-EVAL_WINDOWS:]
    model = build_model(preset("tiny", len(tokenizer)), seed=seed).train()
    set_precision(model, precision)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    losses = []
    started = time.perf_counter()
    for step in range(steps):
        rows = torch.arange(step * batch, (step + 1) * batch) % len(train_windows)
        tokens = train_windows[rows]
        out = model(tokens[:, :-1])
        loss = F.cross_entropy(out.logits.flatten(0, 1), tokens[:, 1:].flatten())
        (loss + model.config.router_aux_loss_coef * out.aux_loss).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    seconds = time.perf_counter() - started
    model.eval()
    with torch.no_grad():
        logits = model(held_out[:, :-1]).logits
        eval_loss = float(F.cross_entropy(logits.flatten(0, 1), held_out[:, 1:].flatten()))
    return Run(precision, losses, eval_loss, seconds)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    args = parser.parse_args()
    for seed in args.seeds:
        for precision in ("bf16", "mxfp8"):
            run = train(precision, steps=args.steps, seed=seed)
            print(
                f"seed {seed} {precision:>5}: first {run.losses[0]:.3f}  "
                f"last-20 mean {sum(run.losses[-20:]) / 20:.3f}  held-out {run.eval_loss:.4f}  "
                f"({run.seconds:.0f} s)"
            )


if __name__ == "__main__":
    main()
