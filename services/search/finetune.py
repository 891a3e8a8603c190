"""Contrastive fine-tuning of the embedder on (query, chunk) pairs.

Each batch holds distinct chunks; every query's own chunk is its positive and the batch's
other chunks are its negatives (in-batch negatives, as sentence-transformers'
MultipleNegativesRankingLoss): cross-entropy over scaled cosine similarities. Pairs come from
the retrieval benchmark's train split, and from any JSONL of `{"query", "positive"}` lines —
e.g. the query of a `codebase_search` whose hit the agent went on to edit in a rewarded
rollout. The result is a sentence-transformers model directory: the search service loads it
with `ETUDE_SEARCH__EMBEDDER=<dir>`.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from etude.search.embedders import TransformerEmbedder
from etude.search.engine import SearchEngine
from etude.search.evaluation import Benchmark

# Files of a sentence-transformers directory that describe pooling and length, not weights.
SENTENCE_TRANSFORMERS_FILES = (
    "modules.json",
    "sentence_bert_config.json",
    "config_sentence_transformers.json",
    "1_Pooling/config.json",
)
METADATA_FILE = "etude_finetune.json"


@dataclass(frozen=True, slots=True)
class Pair:
    query: str
    positive: str


@dataclass(frozen=True, slots=True)
class TrainOptions:
    epochs: int = 1
    batch_size: int = 16
    learning_rate: float = 3e-5
    scale: float = 20.0
    """Inverse temperature of the softmax over cosine similarities."""
    seed: int = 0
    max_steps: int = 0
    """Stop after this many steps (0: no limit)."""


def benchmark_pairs(engine: SearchEngine, benchmark: Benchmark) -> list[Pair]:
    """(query, text of a relevant chunk) for every query of the benchmark, chunked exactly
    as the index chunks them."""
    texts: dict[tuple[str, str, str], str] = {}
    for project, files in benchmark.sources.items():
        for path, source in files.items():
            for chunk in engine.chunk(path, source):
                texts.setdefault((project, chunk.path, chunk.symbol), chunk.text)
    pairs = []
    for query in benchmark.queries:
        for path, symbol in sorted(query.relevant):
            text = texts.get((query.project, path, symbol))
            if text is not None:
                pairs.append(Pair(query.text, text))
    return pairs


def read_pairs(path: Path) -> list[Pair]:
    pairs = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        record = json.loads(line)
        if not isinstance(record.get("query"), str) or not isinstance(record.get("positive"), str):
            raise ValueError(f"{path}:{number}: each line needs string `query` and `positive`")
        pairs.append(Pair(record["query"], record["positive"]))
    return pairs


def batches(pairs: list[Pair], size: int, rng: random.Random) -> list[list[Pair]]:
    """Shuffled batches in which no chunk appears twice: a duplicate would be counted as a
    negative of its own query."""
    order = pairs[:]
    rng.shuffle(order)
    result: list[list[Pair]] = []
    open_batches: list[tuple[list[Pair], set[str]]] = []
    for pair in order:
        home = next((b for b in open_batches if pair.positive not in b[1]), None)
        if home is None:
            home = ([], set())
            open_batches.append(home)
        home[0].append(pair)
        home[1].add(pair.positive)
        if len(home[0]) == size:
            result.append(home[0])
            open_batches.remove(home)
    for batch, _ in open_batches:
        if len(batch) > 1:
            result.append(batch)
            continue
        # A batch of one has no negatives to learn from: the pair joins a batch that can take it.
        home_batch = next((b for b in result if batch[0].positive not in positives_of(b)), None)
        if home_batch is not None:
            home_batch.append(batch[0])
    return result


def positives_of(batch: list[Pair]) -> set[str]:
    return {p.positive for p in batch}


def train(
    embedder: TransformerEmbedder,
    pairs: list[Pair],
    options: TrainOptions,
    on_step: Callable[[int, float], None] | None = None,
) -> int:
    """Fine-tune the embedder's model in place; returns the number of steps taken."""
    import torch

    if len(pairs) < 2:
        raise ValueError("fine-tuning needs at least two (query, chunk) pairs")
    torch.manual_seed(options.seed)
    rng = random.Random(options.seed)
    model = embedder.model
    optimizer = torch.optim.AdamW(model.parameters(), lr=options.learning_rate)
    model.train()
    steps = 0
    try:
        for _ in range(options.epochs):
            for batch in batches(pairs, options.batch_size, rng):
                queries = embedder.encode([p.query for p in batch], grad=True)
                positives = embedder.encode([p.positive for p in batch], grad=True)
                logits = options.scale * queries @ positives.T
                loss = torch.nn.functional.cross_entropy(logits, torch.arange(len(batch)))
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                steps += 1
                if on_step:
                    on_step(steps, float(loss.detach()))
                if steps == options.max_steps:
                    return steps
    finally:
        model.eval()
    return steps


def save(embedder: TransformerEmbedder, out: Path, metadata: dict) -> None:
    """A sentence-transformers directory: weights, tokenizer, and the base's pooling files."""
    out.mkdir(parents=True, exist_ok=True)
    embedder.model.save_pretrained(out)
    embedder.tokenizer.save_pretrained(out)
    for name in SENTENCE_TRANSFORMERS_FILES:
        source = embedder.directory / name
        if source.is_file():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, out / name)
    (out / METADATA_FILE).write_text(json.dumps(metadata, indent=2) + "\n")
