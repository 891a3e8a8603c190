"""The warm-start cache's key: whatever shapes the SFT policy changes it, the task records
included, so a run never warm-starts from a policy trained on tasks it no longer has."""

from __future__ import annotations

import dataclasses

from etude.common.run_config import RunConfig
from etude.tasks.materialize import LOCATE_TASKS_FILE
from etude.tasks.task import read_jsonl
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
