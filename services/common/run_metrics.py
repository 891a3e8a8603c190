"""A run's `metrics.jsonl` (etude.trainer.report writes it): one JSON object per SFT step, RL
step and evaluation, read back by the trainer (the reward curve) and the gateway (the run
page)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """Every record so far; a line still being written (the run is live) is left for later."""
    path = run_dir / METRICS_FILE
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            break
    return records


def by_phase(records: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """{"sft", "rl", "eval"} for a page: SFT steps (and held-out losses), RL steps, the
    evaluations (`phase` `eval_before/tier3`, …). A value the step could not measure (NaN)
    becomes null, which JSON can carry."""
    grouped: dict[str, list[dict[str, Any]]] = {"sft": [], "rl": [], "eval": []}
    for record in records:
        phase = record.get("phase", "")
        key = "rl" if phase == "rl" else "eval" if phase.startswith("eval_") else "sft"
        grouped[key].append({k: _finite(v) for k, v in record.items()})
    return grouped


def _finite(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else value
