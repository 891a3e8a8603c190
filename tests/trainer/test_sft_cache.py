"""The warm-start cache's key: whatever shapes the SFT policy changes it, the task records
included, so a run never warm-starts from a policy trained on tasks it no longer has."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

from etude.common.run_config import RunConfig
from etude.rollout.agent import EpisodeRunner
from etude.rollout.demonstrations import collect_demonstrations
from etude.rollout.prompt import system_prompt
from etude.rollout.samplers import ScriptedSampler
from etude.rollout.scripted import ScriptedSolver
from etude.rollout.types import Demonstrations
from etude.tasks.hints import at_tier
from etude.tasks.materialize import LOCATE_TASKS_FILE
from etude.tasks.task import read_jsonl
from etude.trainer import sft_cache
from etude.trainer.sft import sft_train
from etude.trainer.sft_cache import cache_key

TASKS = list(read_jsonl(LOCATE_TASKS_FILE))[:4]


def test_the_key_follows_the_task_records_not_only_the_task_set_name():
    config = RunConfig.model_validate({"name": "k", "tasks": {"taskset": "etude-locate"}})
    key = cache_key(config, TASKS)
    assert cache_key(config, list(TASKS)) == key
    edited = [dataclasses.replace(TASKS[0], instruction=TASKS[0].instruction + " "), *TASKS[1:]]
    assert cache_key(config, edited) != key
    assert cache_key(config, TASKS[:3]) != key


def test_the_key_follows_the_sft_settings():
    config = RunConfig.model_validate({"name": "k", "tasks": {"taskset": "etude-locate"}})
    longer = config.model_copy(update={"sft": config.sft.model_copy(update={"steps": 999})})
    assert cache_key(longer, TASKS) != cache_key(config, TASKS)


def test_the_key_digests_the_code_that_writes_and_trains_on_the_demonstrations():
    """A module that moves without its path moving in the list would silently stop
    invalidating the cache: every listed path exists, and the modules of the code that
    writes and trains on demonstrations are listed."""
    listed = set(sft_cache._SOURCES)
    assert all((sft_cache._SERVICES / p).exists() for p in listed), listed
    for code in (collect_demonstrations, Demonstrations, EpisodeRunner, system_prompt,
                 ScriptedSampler, ScriptedSolver, at_tier, sft_train):  # fmt: skip
        source = Path(inspect.getsourcefile(code)).resolve()
        assert source.relative_to(sft_cache._SERVICES).as_posix() in listed, code
