"""Objects that refer to each other agree: selectors, ports, scale targets, GPU limits,
and every metric a dashboard or rule queries is one the services register."""

from __future__ import annotations

import importlib
import json
import re

import prometheus_client
import pytest

from tests.charts.chart import of_kind
from tests.charts.conftest import SCENARIOS

# Metrics queried by the chart that Étude does not export, and where they come from.
NON_ETUDE_METRICS = {
    "kube_deployment_status_replicas": "kube-state-metrics (replicas next to queue depth)",
    "up": "Prometheus itself, per scrape target (Ray head metrics absent)",
}
METRICS_MODULES = [
    f"etude.{s}.metrics"
    for s in ("environment", "gateway", "inference", "reward", "rollout", "search", "trainer")
]
METRICS_MODULES += ["etude.common.metrics", "etude.common.queue_metrics"]


def _pod_templates(objects):
    """(labels, containers) of every pod the objects create."""
    for obj in objects:
        spec = obj.get("spec", {})
        if obj["kind"] in ("Deployment", "StatefulSet"):
            yield spec["template"]["metadata"]["labels"], spec["template"]["spec"]["containers"]
        elif obj["kind"] in ("RayJob", "RayCluster"):
            cluster = spec.get("rayClusterSpec", spec)
            for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
                template = group["template"]
                yield template["metadata"]["labels"], template["spec"]["containers"]


def _matches(selector: dict, labels: dict) -> bool:
    if not all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        assert expression["operator"] == "In"
        if labels.get(expression["key"]) not in expression["values"]:
            return False
    return True


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_service_selects_pods_with_its_target_ports(rendered, scenario: str) -> None:
    objects = rendered[scenario]
    pods = list(_pod_templates(objects))
    for service in of_kind(objects, "Service"):
        selected = [
            c
            for labels, c in pods
            if _matches({"matchLabels": service["spec"]["selector"]}, labels)
        ]
        name = service["metadata"]["name"]
        if name.endswith("-inference") and scenario == "minimal":
            continue
        assert selected, f"Service {name} selects no pod"
        for port in service["spec"]["ports"]:
            for containers in selected:
                names = {p.get("name") for c in containers for p in c.get("ports", [])}
                assert port["targetPort"] in names, (
                    f"{name}: no container port {port['targetPort']}"
                )


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_monitors_scrape_existing_ports(rendered, scenario: str) -> None:
    objects = rendered[scenario]
    services = of_kind(objects, "Service")
    for monitor in of_kind(objects, "ServiceMonitor"):
        selected = [
            s for s in services if _matches(monitor["spec"]["selector"], s["metadata"]["labels"])
        ]
        assert selected, monitor["metadata"]["name"]
        for endpoint in monitor["spec"]["endpoints"]:
            for service in selected:
                assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    pods = list(_pod_templates(objects))
    for monitor in of_kind(objects, "PodMonitor"):
        selected = [c for labels, c in pods if _matches(monitor["spec"]["selector"], labels)]
        assert selected, monitor["metadata"]["name"]
        for endpoint in monitor["spec"]["podMetricsEndpoints"]:
            for containers in selected:
                assert endpoint["port"] in {
                    p["name"] for c in containers for p in c.get("ports", [])
                }


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_scaled_objects_target_deployments_without_replicas(rendered, scenario: str) -> None:
    objects = rendered[scenario]
    deployments = {d["metadata"]["name"]: d for d in of_kind(objects, "Deployment")}
    scaled_names = set()
    for scaled in of_kind(objects, "ScaledObject"):
        target = scaled["spec"]["scaleTargetRef"]
        assert target["kind"] == "Deployment"
        assert target["name"] in deployments
        assert "replicas" not in deployments[target["name"]]["spec"]
        scaled_names.add(target["name"])
        assert {t["metadata"]["stream"] for t in scaled["spec"]["triggers"]} == {
            "etude:etude-run:rollouts"
        }
        assert {t["metadata"]["consumerGroup"] for t in scaled["spec"]["triggers"]} == {"rollout"}
        assert scaled["spec"]["advanced"]["scalingModifiers"]["formula"] == "lag + pending"
    for name, deployment in deployments.items():
        if name not in scaled_names:
            assert "replicas" in deployment["spec"], name
    if scenario == "no-keda":
        assert not scaled_names


@pytest.mark.parametrize("scenario", ["defaults", "raycluster", "everything"])
def test_gpu_groups_request_gpus_and_tolerate_their_taint(rendered, scenario: str) -> None:
    for obj in of_kind(rendered[scenario], "RayJob") + of_kind(rendered[scenario], "RayCluster"):
        cluster = obj["spec"].get("rayClusterSpec", obj["spec"])
        for group in cluster["workerGroupSpecs"]:
            pod = group["template"]["spec"]
            limits = pod["containers"][0]["resources"]["limits"]
            assert int(limits["nvidia.com/gpu"]) >= 1, group["groupName"]
            assert group["rayStartParams"]["num-gpus"] == str(limits["nvidia.com/gpu"])
            assert any(t["key"] == "nvidia.com/gpu" for t in pod["tolerations"])
            assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]


def test_network_policies_isolate_the_sandboxes(rendered) -> None:
    policies = {p["metadata"]["name"]: p for p in of_kind(rendered["defaults"], "NetworkPolicy")}
    deny = policies["etude-default-deny"]["spec"]
    assert (
        deny["policyTypes"] == ["Ingress", "Egress"]
        and "ingress" not in deny
        and "egress" not in deny
    )
    environment = policies["etude-environment"]["spec"]
    targets = [
        peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
        for rule in environment["egress"]
        for peer in rule["to"]
    ]
    assert targets == ["search"]
    callers = {
        peer["podSelector"]["matchLabels"]["app.kubernetes.io/component"]
        for peer in environment["ingress"][0]["from"]
    }
    assert callers == {"rollout", "reward", "gateway", "test"}
    assert "egress" not in policies["etude-search"]["spec"]


def _registered_metric_names() -> set[str]:
    for module in METRICS_MODULES:
        importlib.import_module(module)
    # Every name a collector exposes, histogram/counter suffixes included.
    return set(prometheus_client.REGISTRY._names_to_collectors)


_SKIP = re.compile(
    r'"[^"]*"|\{[^}]*\}|\[[^\]]*\]|\$\w+|\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)'
)
_WORD = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")
_KEYWORDS = {"and", "or", "unless", "bool", "offset", "by", "without", "on", "ignoring"}


def _metric_names(expr: str) -> set[str]:
    """Metric names of a PromQL expression (label matchers, ranges, strings, grouping
    clauses, functions and numbers removed; recording-rule names start with `etude:`)."""
    text = _SKIP.sub(" ", expr)
    names = set()
    for match in _WORD.finditer(text):
        rest = text[match.end() :].lstrip()
        if rest.startswith("(") or match.group() in _KEYWORDS:
            continue
        names.add(match.group())
    return names


def _queries(objects):
    for rule in of_kind(objects, "PrometheusRule"):
        for group in rule["spec"]["groups"]:
            for entry in group["rules"]:
                yield entry.get("record") or entry.get("alert"), entry["expr"]
    for config_map in of_kind(objects, "ConfigMap"):
        if config_map["metadata"]["labels"].get("grafana_dashboard") == "1":
            for text in config_map["data"].values():
                dashboard = json.loads(text)
                for panel in dashboard["panels"]:
                    for target in panel.get("targets", []):  # a row has none
                        yield f"{dashboard['uid']}/{panel['title']}", target["expr"]
                for variable in dashboard["templating"]["list"]:
                    if variable["type"] == "query":
                        yield f"{dashboard['uid']}/${variable['name']}", variable["query"]


def test_metric_name_extraction() -> None:
    assert _metric_names(
        "histogram_quantile(0.99, sum by (le, tool) "
        '(rate(etude_rollout_seconds_bucket{a="b"}[5m])))'
        " > 3 and on() max(up) unless etude:x:p99"
    ) == {"etude_rollout_seconds_bucket", "up", "etude:x:p99"}


def test_dashboards_and_rules_query_only_registered_metrics(rendered) -> None:
    registered = _registered_metric_names()
    objects = rendered["everything"]
    recorded = {
        e["record"]
        for r in of_kind(objects, "PrometheusRule")
        for g in r["spec"]["groups"]
        for e in g["rules"]
        if "record" in e
    }
    queries = list(_queries(objects))
    assert len(queries) > 30
    unknown = []
    for where, expr in queries:
        # Grafana's label_values(metric, label): only the metric is a name.
        expr = re.sub(r"label_values\(([^,]+),[^)]*\)", r"\1", expr)
        for name in _metric_names(expr):
            if name not in registered and name not in recorded and name not in NON_ETUDE_METRICS:
                unknown.append(f"{where}: {name}")
    assert not unknown, unknown


def _deployment(objects, component: str) -> dict:
    [found] = [
        d for d in of_kind(objects, "Deployment") if d["metadata"]["name"].endswith(component)
    ]
    return found["spec"]["template"]["spec"]


@pytest.mark.parametrize("existing", ["", "nfs-tasks"])
def test_rollout_environment_search_and_reward_share_the_task_repositories(existing):
    """A worker hands the environment a repository path (and a Python environment's); the
    environment has search index it; a run's task sources lie there, and the reward service
    builds what it grades from them: the four pods must see the same files at the same path."""
    from tests.charts.chart import render

    objects = render({"sharedTasks": {"existingClaim": existing}})
    claims = set()
    for component in ("rollout", "environment", "search", "reward"):
        pod = _deployment(objects, component)
        [mount] = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "tasks"]
        assert mount["mountPath"] == "/shared/tasks"
        [volume] = [v for v in pod["volumes"] if v["name"] == "tasks"]
        claims.add(volume["persistentVolumeClaim"]["claimName"])
    created = [c["metadata"]["name"] for c in of_kind(objects, "PersistentVolumeClaim")
               if c["metadata"]["name"].endswith("-tasks")]  # fmt: skip
    assert claims == ({existing} if existing else set(created))
    shared = [
        c for c in of_kind(objects, "PersistentVolumeClaim") if c["metadata"]["name"] in claims
    ]
    assert all(c["spec"]["accessModes"] == ["ReadWriteMany"] for c in shared)
    env = {
        e["name"]: e.get("value") for e in _deployment(objects, "rollout")["containers"][0]["env"]
    }
    assert env["ETUDE_ROLLOUT__CACHE_DIR"].startswith("/shared/tasks")
    # The trainer's own episodes (SFT demonstrations, evaluation) hand the environment
    # repositories too: every Ray pod builds them on the same volume.
    [job] = of_kind(objects, "RayJob")
    cluster = job["spec"]["rayClusterSpec"]
    for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        pod = group["template"]["spec"]
        [mount] = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "tasks"]
        assert mount["mountPath"] == "/shared/tasks"
        [volume] = [v for v in pod["volumes"] if v["name"] == "tasks"]
        assert volume["persistentVolumeClaim"]["claimName"] in claims
        ray_env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
        assert ray_env["ETUDE_ROLLOUT__CACHE_DIR"] == "/shared/tasks"
