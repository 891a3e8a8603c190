"""The chart's monitoring against a real Prometheus scraping a real training run.

A short `etude train` (the local stack, a rollout worker, the trainer's /metrics) runs while
Prometheus scrapes every component once a second and evaluates the chart's rules. Then the
chart's rules pass `promtool check rules`, and every PromQL expression of every dashboard
panel and every rule returns data: a renamed metric or a typo in a label fails here, not
on a cluster's empty Grafana panel.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

from etude.cli.stack import STATE_FILE, StackState
from etude.common.net import free_port
from tests.charts.chart import of_kind, render
from tests.charts.promql import (
    Expression,
    Prometheus,
    dashboard_expressions,
    rule_expressions,
    selectors,
    substitute,
    without_thresholds,
)

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "charts" / "etude"
needs_prometheus = pytest.mark.skipif(
    shutil.which("prometheus") is None or shutil.which("promtool") is None,
    reason="prometheus/promtool not on PATH (Debian: apt-get install -y prometheus)",
)

# Rules and panels a local run cannot feed, by Expression.where. Every entry must exist in
# the chart (the test says which do not), so the list shrinks with the chart.
NOT_LOCAL = {
    # kube-state-metrics (replica counts) exists only on a cluster.
    "dashboard etude-queue.json: Replicas (kube-state-metrics)",
    "rule etude.alerts/EtudeRolloutQueueLagRisingAtMaxReplicas",
    # `up` of the Ray head's own metrics port: Ray runs only on KubeRay here.
    "rule etude.alerts/EtudeRayHeadMetricsAbsent",
}

# The labels Prometheus Operator gives each target in the chart's namespace: a
# ServiceMonitor per CPU service (job = Service name), one PodMonitor for the Ray pods
# (job = <namespace>/<PodMonitor name>) where the trainer and the inference engines run.
NAMESPACE, RELEASE = "etude", "etude"
RAY_JOB = f"{NAMESPACE}/{RELEASE}-ray"


def target_labels(component: str) -> dict[str, str]:
    labels = {"namespace": NAMESPACE, "container": component, "pod": f"{component}-0"}
    if component in ("trainer", "inference"):
        return {**labels, "job": RAY_JOB, "endpoint": "etude-metrics"}
    service = f"{RELEASE}-{component}"
    return {**labels, "job": service, "service": service, "endpoint": "metrics"}


# A run long enough to outlast the checks: it is stopped as soon as they pass. The warm
# start stays on: the scripted solver's episodes are what makes tool calls (an untrained
# policy rarely writes a valid one), so the tool-call histograms exist.
RUN = {
    "name": "prom",
    "tasks": {"train_limit": 2, "eval_limit": 0, "hint_tier": 3},  # two-turn episodes
    "sft": {"steps": 1, "batch_size": 2},
    "rollout": {"group_size": 2, "groups_per_step": 1, "over_provision": 0, "max_turns": 2,
                "max_new_tokens": 32, "max_episode_tokens": 2048, "concurrency": 4},
    "trainer": {"steps": 100, "micro_batch": 2},
}  # fmt: skip
STEPS_BEFORE_CHECKING = 2
DEADLINE_SECONDS = 200


def chart_rules() -> dict | None:
    """`spec` of the chart's PrometheusRule(s) as one rules file; None without any."""
    groups = [g for r in of_kind(render(), "PrometheusRule") for g in r["spec"]["groups"]]
    return {"groups": groups} if groups else None


def expressions(rules: dict | None) -> list[Expression]:
    found = dashboard_expressions(CHART_DIR / "dashboards") + rule_expressions(rules or {})
    assert found, "the chart has no dashboard or rule expressions"
    return found


def local(expr: Expression) -> bool:
    return expr.where not in NOT_LOCAL


@needs_prometheus
def test_chart_rules_pass_promtool(tmp_path):
    rules = chart_rules()
    assert rules is not None, "the chart renders no PrometheusRule"
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(rules))
    done = subprocess.run(["promtool", "check", "rules", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def targets(run_dir: Path, trainer_url: str) -> dict[str, dict[str, str]]:
    """Every component of the run's stack with a /metrics endpoint, plus the trainer."""
    found = {trainer_url: target_labels("trainer")}
    try:
        state = StackState.read(run_dir / STATE_FILE)
    except (OSError, ValueError):
        return found  # not written yet, or being replaced
    for c in state.components:
        if c.metrics_url:  # rollout-<run id>-0 is a rollout worker
            found[c.metrics_url] = target_labels(c.name.split("-")[0])
        if c.name == "gateway" and c.http_url:
            call_gateway(c.http_url)
    return found


def call_gateway(url: str) -> None:
    """The one load a training run does not make: a user asking the gateway for runs."""
    with contextlib.suppress(OSError):  # still starting: the next round asks again
        urllib.request.urlopen(f"{url}/runs?limit=1", timeout=2).read()


def evaluate(prometheus: Prometheus, exprs: list[Expression]) -> list[str]:
    """What is wrong with each expression now: an error, or an empty result."""
    problems = []
    for e in exprs:
        expr = substitute(e.expr, {"namespace": NAMESPACE})
        if e.alert:
            expr = without_thresholds(expr)
        try:
            if not prometheus.query(expr):
                problems.append(f"{e.where}: no data for {expr!r} (reads {selectors(expr)})")
        except AssertionError as error:
            problems.append(f"{e.where}: {error}")
    return problems


@needs_prometheus
def test_every_dashboard_and_rule_expression_returns_data_during_a_run(tmp_path):
    rules = chart_rules()
    rule_files = []
    if rules is not None:  # recording rules the dashboards read must exist in Prometheus
        rule_files.append(tmp_path / "rules.yaml")
        rule_files[0].write_text(yaml.safe_dump(rules))
    every = expressions(rules)
    stale = NOT_LOCAL - {e.where for e in every}
    assert not stale, f"NOT_LOCAL names what the chart no longer has: {sorted(stale)}"
    exprs = [e for e in every if local(e)]
    (tmp_path / "prom").mkdir()
    prometheus = Prometheus(tmp_path / "prom", rule_files)
    prometheus.start()

    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump({**RUN, "output_dir": str(tmp_path / "out")}))
    trainer_port = free_port("127.0.0.1")
    run_dir, log = tmp_path / "stack", (tmp_path / "train.log").open("wb")
    train = subprocess.Popen(
        [sys.executable, "-m", "etude.cli", "train", str(config), "--run-dir", str(run_dir)],
        cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "ETUDE_GRPC__METRICS_PORT": str(trainer_port)},
    )  # fmt: skip
    trainer_url = f"http://127.0.0.1:{trainer_port}/metrics"
    problems: list[str] = [f"the trainer never reached step {STEPS_BEFORE_CHECKING}"]
    up: list[str] = []
    try:
        deadline = time.monotonic() + DEADLINE_SECONDS
        while problems and time.monotonic() < deadline:
            assert train.poll() is None, (tmp_path / "train.log").read_text()[-3000:]
            prometheus.set_targets(targets(run_dir, trainer_url))
            time.sleep(2)
            steps = prometheus.query("etude_trainer_step")
            if steps and float(steps[0]["value"][1]) >= STEPS_BEFORE_CHECKING:
                problems = evaluate(prometheus, exprs)
        up = sorted(prometheus.up_targets())
    finally:
        train.send_signal(signal.SIGTERM)
        try:
            train.wait(timeout=30)
        except subprocess.TimeoutExpired:
            train.kill()
            train.wait()
        prometheus.stop()
    summary = f"{len(problems)} of {len(exprs)} expressions fail (targets up: {up}):"
    assert not problems, "\n".join([summary, *problems])
