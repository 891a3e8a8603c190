"""Contrastive fine-tuning: batches without false negatives, a model that learns, and a
saved directory the service loads by path."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from etude.search.embedders import load_embedder
from etude.search.finetune import (
    METADATA_FILE,
    Pair,
    TrainOptions,
    batches,
    read_pairs,
    save,
    train,
)
from tests.search.conftest import make_engine

PAIRS = [
    Pair("add two numbers", "def add(a, b):\n    return a + b"),
    Pair("subtract one number from another", "def sub(a, b):\n    return a - b"),
    Pair("open a file for reading", "def read(path):\n    return open(path).read()"),
    Pair("sort items by price", "def by_price(items):\n    return sorted(items, key=price)"),
    Pair("retry a request with backoff", "def retry(call):\n    sleep(2 ** attempt)"),
    Pair("parse a date string", "def parse_date(text):\n    return datetime.strptime(text)"),
]


def test_batches_never_hold_a_chunk_twice():
    pairs = [Pair(f"q{i}", f"chunk{i % 5}") for i in range(40)]
    made = batches(pairs, 4, random.Random(0))
    assert all(len({p.positive for p in batch}) == len(batch) for batch in made)
    assert Counter(p for batch in made for p in batch) == Counter(pairs)


def test_read_pairs_refuses_malformed_lines(tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_text('{"query": "q", "positive": "p"}\n\n')
    assert read_pairs(good) == [Pair("q", "p")]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "q"}\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:1"):
        read_pairs(bad)


def test_training_pulls_queries_to_their_chunks_and_saves_a_loadable_model(tmp_path):
    model = load_embedder("minilm")  # its own copy: training changes weights in place

    def margin() -> float:
        queries = model.embed([p.query for p in PAIRS])
        chunks = model.embed([p.positive for p in PAIRS])
        similarity = queries @ chunks.T
        return float(np.mean(np.diag(similarity)) - np.mean(similarity))

    before = margin()
    losses: list[float] = []
    options = TrainOptions(epochs=6, batch_size=6, learning_rate=1e-4, seed=0)
    steps = train(model, PAIRS, options, lambda _, loss: losses.append(loss))
    assert steps == 6 and losses[-1] < losses[0]
    assert margin() > before
    out = tmp_path / "model"
    save(model, out, {"steps": steps})
    assert json.loads((out / METADATA_FILE).read_text()) == {"steps": steps}
    loaded = load_embedder(str(out))
    assert loaded.pooling == "mean" and loaded.max_length == model.max_length
    assert loaded.fingerprint != load_embedder("minilm").fingerprint
    np.testing.assert_allclose(loaded.embed(["add two numbers"]), model.embed(["add two numbers"]),
                               atol=1e-5)  # fmt: skip
    engine = make_engine(loaded, tmp_path)
    engine.index_files("w", [("calc.py", PAIRS[0].positive + "\n\n\n" + PAIRS[1].positive)])
    assert engine.query("w", "add two numbers", 1, mode="vector")[0].symbol == "add"


def test_finetune_command_reports_held_out_before_and_after(tmp_path, cli_env):
    out, report = tmp_path / "model", tmp_path / "report.json"
    command = [
        sys.executable, "-m", "etude.cli", "search", "finetune", "--out", str(out),
        "--max-steps", "1", "--batch-size", "8", "--json", str(report),
    ]  # fmt: skip
    completed = subprocess.run(command, env=cli_env, capture_output=True, text=True, timeout=900)
    assert completed.returncode == 0, completed.stderr
    result = json.loads(report.read_text())
    assert result["steps"] == 1 and result["pairs"] > 300
    for key in ("heldout_before", "heldout_after"):
        assert set(result[key]) == {"hybrid", "vector", "lexical"}
    assert (out / "model.safetensors").is_file() and (out / "1_Pooling" / "config.json").is_file()
    assert load_embedder(str(out)).dimension == 384
