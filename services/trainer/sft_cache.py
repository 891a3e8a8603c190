"""A warm start built once and reused: the SFT policy of a run config, cached under a key of
everything that shapes it (the starting policy, the SFT settings, the tasks and tiers it
demonstrates, the episode limits, and the source of the code that writes and trains on the
demonstrations). `make run` builds it on first use; a later run with the same key loads it
instead of spending minutes on SFT again. Delete the directory to rebuild it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

from etude.common.run_config import RunConfig
from etude.tasks.task import Task

_SERVICES = Path(__file__).resolve().parents[1]
# The code whose change makes a cached policy stale: the scripted solvers, the agent loop and
# its prompt, the collection of demonstrations (rollout/demonstrations.py, what it returns in
# rollout/types.py), the hints, the tools whose descriptions and result text the episodes
# show (environment/tools, common/tool_text.py, the XML codec), and the SFT training.
_SOURCES = (
    "rollout/scripted.py",
    "rollout/scripted_honesty.py",
    "rollout/scripted_locate.py",
    "rollout/scripted_patch.py",
    "rollout/scripted_search.py",
    "rollout/scripted_sight.py",
    "rollout/scripted_styles.py",
    "rollout/samplers.py",
    "rollout/prompt.py",
    "rollout/agent.py",
    "rollout/demonstrations.py",
    "rollout/types.py",
    "tasks/hints.py",
    "environment/tools",
    "common/tool_text.py",
    "common/toolcalls.py",
    "trainer/sft.py",
    "trainer/batch.py",
    "trainer/freezing.py",
    "model",
)
COMPLETE_MARK = "sft-complete.json"


def cache_key(config: RunConfig, tasks: list[Task]) -> str:
    """`tasks` are the run's training tasks: the records themselves, not only the task set's
    name, so a regenerated or edited task set never warm-starts from a stale policy."""
    t, r = config.tasks, config.rollout
    records = hashlib.sha256()
    for task in tasks:
        records.update(json.dumps(task.to_swe(), sort_keys=True).encode())
    shaping = {
        "records": records.hexdigest(),
        # How the policy is served or its activations kept changes nothing SFT learns.
        "policy": config.policy.model_dump(
            mode="json", exclude={"serve_with", "activation_checkpointing"}
        ),
        "sft": config.sft.model_dump(mode="json", exclude={"cache_dir"}),
        "tasks": {"taskset": t.taskset, "train_limit": t.train_limit, "seed": t.seed,
                  "hint_tier": t.hint_tier, "curriculum": t.curriculum.model_dump(mode="json")},
        "limits": [r.max_turns, r.max_new_tokens, r.max_episode_tokens, r.max_tool_output_chars,
                   list(r.short_prompt_tools)],
        "code": _code_digest(),
    }  # fmt: skip
    text = json.dumps(shaping, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _code_digest() -> str:
    digest = hashlib.sha256()
    for relative in _SOURCES:
        path = _SERVICES / relative
        files = sorted(path.rglob("*.py")) if path.is_dir() else [path] if path.exists() else []
        for file in files:
            digest.update(str(file.relative_to(_SERVICES)).encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()


def cached_policy(cache_dir: Path, key: str) -> Path | None:
    """The cached checkpoint directory for `key`, if one was written completely."""
    directory = cache_dir / f"sft-{key}"
    return directory if (directory / COMPLETE_MARK).is_file() else None


def store_policy(cache_dir: Path, key: str, write, summary: dict) -> Path:
    """Write a checkpoint through `write(directory)` into the cache, atomically: a reader
    sees the whole checkpoint or none."""
    cache_dir.mkdir(parents=True, exist_ok=True)
    final = cache_dir / f"sft-{key}"
    staging = Path(tempfile.mkdtemp(prefix=f".sft-{key}-", dir=cache_dir))
    try:
        write(staging)
        (staging / COMPLETE_MARK).write_text(json.dumps(summary, indent=2) + "\n")
        if final.exists():
            shutil.rmtree(final)
        os.replace(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def cached_summary(directory: Path) -> dict:
    return json.loads((directory / COMPLETE_MARK).read_text())
