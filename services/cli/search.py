"""`etude search eval | finetune`: measure retrieval on etude-mini, train the embedder."""

from __future__ import annotations

import json
import time
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from etude.search.config import SearchConfig, SearchSettings
from etude.search.evaluation import (
    SPLITS,
    Scores,
    build_benchmark,
    evaluate_benchmark,
    evaluation_engine,
)

app = typer.Typer(help="Code search: evaluate retrieval, fine-tune the embedder.")
console = Console(stderr=True)

Embedder = Annotated[
    str | None,
    typer.Option(help="`minilm` or a model directory; default ETUDE_SEARCH__EMBEDDER."),
]
JsonOut = Annotated[Path | None, typer.Option("--json", help="Also write the scores here.")]


def _config() -> SearchConfig:
    return SearchSettings().resolved()


def _scores_json(scores: dict[str, Scores]) -> dict:
    return {mode: {"mrr10": s.mrr10, "recall10": s.recall10, "queries": s.queries}
            for mode, s in scores.items()}  # fmt: skip


def _print_scores(title: str, columns: dict[str, dict[str, Scores]]) -> None:
    table = Table(title=title)
    table.add_column("mode")
    for name in columns:
        table.add_column(f"MRR@10 {name}", justify="right")
        table.add_column(f"recall@10 {name}", justify="right")
    for mode in next(iter(columns.values())):
        cells = [
            f"{getattr(c[mode], m):.3f}" for c in columns.values() for m in ("mrr10", "recall10")
        ]
        table.add_row(mode, *cells)
    Console().print(table)


@app.command("eval")
def evaluate(
    split: Annotated[str, typer.Option(help=f"One of {', '.join(SPLITS)}.")] = "heldout",
    embedder: Embedder = None,
    json_out: JsonOut = None,
) -> None:
    """Retrieval on the etude-mini benchmark: MRR@10 and recall@10, lexical, vector, hybrid."""
    if split not in SPLITS:
        raise typer.BadParameter(f"split must be one of {', '.join(SPLITS)}")
    config = _config()
    engine = evaluation_engine(config, embedder)
    benchmark = build_benchmark(split)
    started = time.perf_counter()
    scores = evaluate_benchmark(engine, benchmark)
    console.print(
        f"{len(benchmark.queries)} queries over {len(benchmark.sources)} projects ({split}), "
        f"embedder {engine.embedder.embedder.fingerprint}, {time.perf_counter() - started:.1f} s"
    )
    _print_scores(f"etude search eval ({split})", {split: scores})
    if json_out:
        json_out.write_text(json.dumps({"split": split, "scores": _scores_json(scores)}, indent=2))


@app.command()
def finetune(
    out: Annotated[Path, typer.Option(help="Directory to write the fine-tuned model to.")],
    embedder: Embedder = None,
    pairs: Annotated[
        list[Path], typer.Option(help='Extra JSONL of {"query", "positive"} pairs.')
    ] = [],  # noqa: B006
    epochs: int = 1,
    batch_size: int = 16,
    learning_rate: float = 3e-5,
    seed: int = 0,
    max_steps: Annotated[int, typer.Option(help="Stop after this many steps (0: none).")] = 0,
    json_out: JsonOut = None,
) -> None:
    """Train the embedder contrastively on the train split (plus --pairs); report held-out
    MRR before and after, and save a model directory the service loads by path."""
    from etude.search.finetune import (
        TrainOptions,
        benchmark_pairs,
        read_pairs,
        save,
        train,
    )

    config = _config()
    engine = evaluation_engine(config, embedder)
    model = engine.embedder.embedder
    training = benchmark_pairs(engine, build_benchmark("train"))
    for path in pairs:
        training += read_pairs(path)
    heldout = build_benchmark("heldout")
    before = evaluate_benchmark(engine, heldout)
    options = TrainOptions(epochs, batch_size, learning_rate, seed=seed, max_steps=max_steps)
    console.print(f"training on {len(training)} pairs from {model.fingerprint}")
    started = time.perf_counter()
    steps = train(model, training, options, lambda s, loss: console.print(f"step {s} {loss:.4f}"))
    seconds = time.perf_counter() - started
    engine.embedder.cache = None  # cached vectors belong to the model before training
    after = evaluate_benchmark(engine, heldout)
    report = {
        "base": str(model.directory), "pairs": len(training), "steps": steps,
        "seconds": round(seconds, 1), "options": asdict(options),
        "heldout_before": _scores_json(before), "heldout_after": _scores_json(after),
    }  # fmt: skip
    save(model, out, report)
    _print_scores("held-out retrieval", {"before": before, "after": after})
    console.print(f"{steps} steps in {seconds:.0f} s; model saved to {out}")
    if json_out:
        json_out.write_text(json.dumps(report, indent=2))
