"""Adding a component to the chart is its template file and its values block.

A copy of the chart gets a fake component, `echo` (a template that calls etude.component,
a values block with `wiring`, and that block's schema). Rendered with the real Helm
engine, the component must get its NetworkPolicy and the rules of the peers it calls, a
ServiceMonitor and a probe in the `helm test` pod, with no list edited anywhere, and
every other object must come out as it did without it.
"""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path
from typing import Any

import helm_python
import pytest
import yaml

from tests.charts.chart import CHART_DIR, render

FAKE = "echo"

# What a developer adds: the component's template file ...
TEMPLATE = """\
{{- define "etude.echo.env" -}}
- name: ETUDE_ECHO__GREETING
  value: "hello"
{{- end }}

{{- define "etude.echo.securityContext" -}}
{{ include "etude.defaultSecurityContext" . }}
{{- end }}

{{- if .Values.echo.enabled }}
{{ include "etude.component" (dict "ctx" $ "component" "echo") }}
{{- end }}
"""

# ... and its values block. Keys of `wiring` left out (sharedTasks, advertise,
# grpcLatencyAlert) are off.
VALUES_BLOCK = """
# A fake component (tests/charts/test_components.py).
echo:
  enabled: true
  wiring:
    calls: [environment, inference]
    roles: []
    redis: true
  replicas: 1
  resources:
    requests:
      cpu: 100m
  podDisruptionBudget:
    enabled: false
    maxUnavailable: 1
"""


def _add_component(chart_dir: Path, values_block: str = VALUES_BLOCK) -> None:
    (chart_dir / "templates" / f"{FAKE}.yaml").write_text(TEMPLATE)
    values = chart_dir / "values.yaml"
    values.write_text(values.read_text() + values_block)
    # The schema rejects unknown blocks: the new one is described like search's.
    schema_path = chart_dir / "values.schema.json"
    schema = json.loads(schema_path.read_text())
    schema["properties"][FAKE] = copy.deepcopy(schema["properties"]["search"])
    schema_path.write_text(json.dumps(schema, indent=2))


@pytest.fixture(scope="module")
def with_fake(tmp_path_factory) -> Path:
    chart_dir = tmp_path_factory.mktemp("chart") / "etude"
    shutil.copytree(CHART_DIR, chart_dir)
    _add_component(chart_dir)
    return chart_dir


@pytest.fixture(scope="module")
def objects(with_fake) -> dict[tuple[str, str], dict[str, Any]]:
    return _by_name(render(chart_dir=with_fake))


def _by_name(objects: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    found = {}
    for obj in objects:
        if obj["kind"] == "Secret":
            obj.pop("data")  # tokens are generated anew on every render
        found[(obj["kind"], obj["metadata"]["name"])] = obj
    return found


def _named(peers: list[dict[str, Any]]) -> list[str]:
    """The components that peers select by their component label (others: namespaces,
    every Ray pod)."""
    labels = [p.get("podSelector", {}).get("matchLabels", {}) for p in peers]
    return [m["app.kubernetes.io/component"] for m in labels if "app.kubernetes.io/component" in m]


def _grpc_callers(policy: dict[str, Any]) -> list[str]:
    """Components allowed to reach the gRPC port of the policy's pods."""
    (rule,) = [
        r
        for r in policy["spec"]["ingress"]
        if "from" in r and r.get("ports") == [{"port": 50051, "protocol": "TCP"}]
    ]
    return _named(rule["from"])


def test_the_component_is_deployed_with_grpc_probes(objects) -> None:
    deployment = objects[("Deployment", f"etude-{FAKE}")]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["python", "-m", f"etude.{FAKE}"]
    assert {"name": "ETUDE_ECHO__GREETING", "value": "hello"} in container["env"]
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert container[probe]["grpc"] == {"port": 50051}
    service = objects[("Service", f"etude-{FAKE}")]
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == FAKE
    # Left-out wiring keys are off: no shared task volume, no address handed to peers.
    assert "tasks" not in {v["name"] for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert not [e for e in container["env"] if e["name"] == "ETUDE_SERVICES__ECHO"]


def test_the_component_gets_its_network_policy(objects) -> None:
    policy = objects[("NetworkPolicy", f"etude-{FAKE}")]["spec"]
    assert policy["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == FAKE
    assert policy["policyTypes"] == ["Ingress", "Egress"]
    # Nothing calls it but the helm test pod; Prometheus scrapes its metrics port.
    assert _grpc_callers(objects[("NetworkPolicy", f"etude-{FAKE}")]) == ["test"]
    assert {"port": 9090, "protocol": "TCP"} in [p for r in policy["ingress"] for p in r["ports"]]
    # It reaches exactly what its wiring names: environment, inference, Redis.
    targets = [
        (name, rule["ports"][0]["port"]) for rule in policy["egress"] for name in _named(rule["to"])
    ]
    assert targets == [("environment", 50051), ("inference", 50051), ("redis", 6379)]


def test_the_peers_it_calls_let_it_in(objects) -> None:
    assert FAKE in _grpc_callers(objects[("NetworkPolicy", "etude-environment")])
    assert FAKE in _grpc_callers(objects[("NetworkPolicy", "etude-ray")])
    (redis,) = objects[("NetworkPolicy", "etude-redis")]["spec"]["ingress"]
    assert FAKE in _named(redis["from"])
    # A peer it does not call does not admit it.
    assert FAKE not in _grpc_callers(objects[("NetworkPolicy", "etude-search")])


def test_the_component_is_monitored_and_probed_by_helm_test(objects) -> None:
    monitor = objects[("ServiceMonitor", f"etude-{FAKE}")]
    service = objects[("Service", f"etude-{FAKE}")]
    labels = service["metadata"]["labels"]
    assert all(labels[k] == v for k, v in monitor["spec"]["selector"]["matchLabels"].items())
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    (endpoint,) = monitor["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in service["spec"]["ports"]}
    (pod,) = [o for (kind, _), o in objects.items() if kind == "Pod"]
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    assert f"etude-{FAKE}:50051" in pod["spec"]["containers"][0]["command"]


def test_nothing_else_changes(objects) -> None:
    """Every object of the chart without the component renders the same with it, but
    for the component's name added where its wiring says: its peers' ingress rules and
    the helm test pod's targets."""
    before = _by_name(render())
    added = {key for key in objects if key not in before}
    assert added == {
        ("Deployment", f"etude-{FAKE}"),
        ("Service", f"etude-{FAKE}"),
        ("NetworkPolicy", f"etude-{FAKE}"),
        ("ServiceMonitor", f"etude-{FAKE}"),
    }
    assert set(before) <= set(objects)
    expected = copy.deepcopy(objects)
    for name in ("etude-environment", "etude-ray", "etude-redis"):
        for rule in expected[("NetworkPolicy", name)]["spec"]["ingress"]:
            if "from" in rule:
                rule["from"] = [p for p in rule["from"] if _named([p]) != [FAKE]]
    (pod,) = [o for (kind, _), o in expected.items() if kind == "Pod"]
    pod["spec"]["containers"][0]["command"].remove(f"etude-{FAKE}:50051")
    changed = [key for key in before if before[key] != expected[key]]
    assert not changed, changed


def test_a_misspelt_peer_fails_the_render(tmp_path) -> None:
    chart_dir = tmp_path / "etude"
    shutil.copytree(CHART_DIR, chart_dir)
    _add_component(chart_dir, VALUES_BLOCK.replace("[environment, inference]", "[enviroment]"))
    with pytest.raises(helm_python.HelmRenderError, match=r'echo\.wiring\.calls: "enviroment"'):
        render(chart_dir=chart_dir)


def test_the_shipped_values_wire_the_five_services() -> None:
    """The chart's components are exactly the values blocks with `wiring`."""
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    wired = sorted(
        k for k, block in values.items() if isinstance(block, dict) and "wiring" in block
    )
    assert wired == ["environment", "gateway", "reward", "rollout", "search"]
