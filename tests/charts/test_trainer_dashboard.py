"""The trainer dashboard's "Agent behaviour" row, as the chart ships it: a panel for every
key of the behaviour summary, each querying a gauge the trainer registers and sets."""

from __future__ import annotations

import json

import prometheus_client

from etude.common.payloads import Trajectory
from etude.rollout.types import FINISH_PREFIX, behaviour_summary
from etude.trainer import metrics
from tests.charts.chart import of_kind
from tests.charts.test_wiring import _metric_names

ROW = "Agent behaviour"


def _trainer_dashboard(rendered) -> dict:
    for config_map in of_kind(rendered["defaults"], "ConfigMap"):
        if config_map["metadata"]["labels"].get("grafana_dashboard") == "1":
            for text in config_map["data"].values():
                dashboard = json.loads(text)
                if dashboard["uid"] == "etude-trainer":
                    return dashboard
    raise AssertionError("the chart ships no etude-trainer dashboard")


def _row_panels(dashboard: dict, title: str) -> list[dict]:
    """The panels under a (not collapsed) row: those after it, up to the next row."""
    panels = dashboard["panels"]
    [start] = [i for i, p in enumerate(panels) if p["type"] == "row" and p["title"] == title]
    assert not panels[start].get("collapsed"), "a collapsed row would hide its panels"
    below = []
    for panel in panels[start + 1 :]:
        if panel["type"] == "row":
            break
        below.append(panel)
    return below


def _queried(panels: list[dict]) -> set[str]:
    return {name for p in panels for t in p["targets"] for name in _metric_names(t["expr"])}


def _registered_by_the_trainer() -> set[str]:
    return {
        name
        for collector in (*metrics.BEHAVIOUR.values(), metrics.FINISH_SHARE)
        for name in prometheus_client.REGISTRY._collector_to_names[collector]
    }


def _every_summary_key() -> set[str]:
    """The keys of a summary where every ratio is defined."""

    def episode(reason: str) -> Trajectory:
        return Trajectory(
            run_id="r", task_id="t", group_id="g", sample_index=0, token_ids=[1, 2],
            logprobs=[0.0, -1.0], policy_versions=[-1, 0], loss_mask=[0, 1], reward=1.0,
            turns=2, calls_per_turn=[2, 1], finish_reason=reason, valid_calls=3,
            malformed_calls=1, edits=1, blind_edits=0, reads_before_first_edit=2,
        )  # fmt: skip

    return set(behaviour_summary([episode("submitted"), episode("max_turns")]))


def test_the_agent_behaviour_row_charts_every_summary_key_from_registered_gauges(rendered):
    panels = _row_panels(_trainer_dashboard(rendered), ROW)
    assert panels and all(p["targets"] for p in panels)
    queried = _queried(panels)
    # Every name the row queries is one the trainer's code registers ...
    assert queried <= _registered_by_the_trainer(), queried - _registered_by_the_trainer()
    # ... and every key of the summary has its gauge on the row.
    keys = _every_summary_key()
    gauges = {metrics.BEHAVIOUR[k]._name for k in keys if not k.startswith(FINISH_PREFIX)}
    assert keys - set(metrics.BEHAVIOUR) == {k for k in keys if k.startswith(FINISH_PREFIX)}
    assert gauges | {metrics.FINISH_SHARE._name} == queried
