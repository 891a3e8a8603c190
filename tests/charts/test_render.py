"""The chart renders with a real Helm engine, lints clean, and its values are checked."""

from __future__ import annotations

import json

import helm_python
import pytest
import yaml
from helm_python import Chart

from etude.common.run_config import RunConfig
from tests.charts.chart import CHART_DIR, of_kind, render
from tests.charts.conftest import SCENARIOS

COMPONENTS = ("environment", "search", "reward", "rollout", "gateway")


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_lint_strict_is_clean(scenario: str) -> None:
    report = helm_python.lint(CHART_DIR, SCENARIOS[scenario], strict=True, quiet=False)
    problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
    assert not problems, problems


def test_defaults_render_every_component(rendered) -> None:
    objects = rendered["defaults"]
    names = {(o["kind"], o["metadata"]["name"]) for o in objects}
    for component in COMPONENTS:
        assert ("Deployment", f"etude-{component}") in names
        assert ("Service", f"etude-{component}") in names
    assert ("StatefulSet", "etude-redis") in names
    assert ("RayJob", "etude-train") in names
    assert len(of_kind(objects, "ScaledObject")) == 2
    assert of_kind(objects, "PrometheusRule")
    assert all(o["metadata"]["namespace"] == "etude" for o in objects)


def test_every_object_name_is_a_dns_label() -> None:
    long = "a-release-name-that-is-far-too-long-for-kubernetes-object-names-x"
    for obj in render(name=long):
        name = obj["metadata"]["name"]
        assert len(name) <= 63 and not name.endswith("-"), name
        for value in obj["metadata"].get("labels", {}).values():
            assert len(value) <= 63, value


def test_services_are_configured_for_a_cluster(rendered) -> None:
    for deployment in of_kind(rendered["defaults"], "Deployment"):
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        component = container["name"]
        assert container["command"] == ["python", "-m", f"etude.{component}"]
        assert env["ETUDE_GRPC__HOST"] == "0.0.0.0"
        assert env["ETUDE_GRPC__PORT"] == "50051"
        # The password comes from the Secret, expanded from the variable defined before.
        assert env["ETUDE_REDIS__URL"] == "redis://:$(ETUDE_REDIS_PASSWORD)@etude-redis:6379/0"
        names = [e["name"] for e in container["env"]]
        assert names.index("ETUDE_REDIS_PASSWORD") < names.index("ETUDE_REDIS__URL")
        assert env["ETUDE_SERVICES__SEARCH"] == "etude-search:50051"
        assert env["ETUDE_SERVICES__INFERENCE"] == "etude-inference:50051"
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            assert container[probe]["grpc"]["port"] == 50051
        if component == "gateway":
            assert env["ETUDE_GATEWAY__LAUNCHER"] == "none"
            assert env["ETUDE_GATEWAY__HTTP_PORT"] == "8080"
        if component == "rollout":
            assert env["ETUDE_ROLLOUT__RUN_ID"] == "etude-run"
            assert deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= 300


def test_grpc_services_are_headless(rendered) -> None:
    for service in of_kind(rendered["defaults"], "Service"):
        component = service["metadata"]["labels"]["app.kubernetes.io/component"]
        if component != "gateway":
            assert service["spec"]["clusterIP"] == "None", service["metadata"]["name"]


def test_pods_that_run_sandboxes_may_make_namespaces_and_take_a_runtime_class(rendered) -> None:
    """The environment's sessions and the reward's grading both run bubblewrap, which needs
    unshare(CLONE_NEWUSER): runtimes' default seccomp profiles refuse it, so each of their
    containers carries the configured profile, and their pods the RuntimeClass where set."""
    expected = {
        "everything": {"type": "Localhost", "localhostProfile": "profiles/etude-bwrap.json"},
    }
    for scenario, objects in rendered.items():
        sandboxed = {
            d["metadata"]["name"]: d["spec"]["template"]["spec"]
            for d in of_kind(objects, "Deployment")
            if {"name": "ETUDE_SANDBOX__BACKEND", "value": "bwrap"}
            in d["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        assert set(sandboxed) == {"etude-environment", "etude-reward"}, scenario
        for name, pod in sandboxed.items():
            profile = pod["containers"][0]["securityContext"]["seccompProfile"]
            assert profile == expected.get(scenario, {"type": "Unconfined"}), (scenario, name)
            if scenario == "everything":
                assert pod["runtimeClassName"] == "gvisor", name
            else:
                assert "runtimeClassName" not in pod, (scenario, name)


def test_a_localhost_seccomp_profile_must_name_its_file() -> None:
    values = {"environment": {"sandbox": {"seccompProfile": "Localhost"}}}
    with pytest.raises(helm_python.HelmRenderError, match="seccompLocalhostProfile"):
        render(values)


def test_external_redis_replaces_the_statefulset(rendered) -> None:
    objects = rendered["external-redis"]
    assert not of_kind(objects, "StatefulSet")
    for deployment in of_kind(objects, "Deployment"):
        env = {
            e["name"]: e.get("value")
            for e in deployment["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        assert env["ETUDE_REDIS__URL"] == "redis://:secret@redis.example.com:6380/2"
    for scaled in of_kind(objects, "ScaledObject"):
        for trigger in scaled["spec"]["triggers"]:
            assert trigger["metadata"]["address"] == "redis.example.com:6380"
            assert trigger["metadata"]["databaseIndex"] == "2"


def test_redis_is_persistent(rendered) -> None:
    (redis,) = of_kind(rendered["defaults"], "StatefulSet")
    (container,) = redis["spec"]["template"]["spec"]["containers"]
    assert container["image"].startswith("redis:")
    assert container["args"][container["args"].index("--appendonly") + 1] == "yes"
    assert redis["spec"]["volumeClaimTemplates"][0]["metadata"]["name"] == "data"


def test_modes_render_rayjob_or_raycluster(rendered) -> None:
    assert of_kind(rendered["defaults"], "RayJob") and not of_kind(
        rendered["defaults"], "RayCluster"
    )
    assert of_kind(rendered["raycluster"], "RayCluster") and not of_kind(
        rendered["raycluster"], "RayJob"
    )
    (job,) = of_kind(rendered["defaults"], "RayJob")
    spec = job["spec"]
    assert spec["entrypoint"].startswith("etude train /config/run.yaml --ray")
    assert spec["submissionMode"] == "K8sJobMode"
    assert spec["shutdownAfterJobFinishes"] is True
    assert spec["ttlSecondsAfterFinished"] > 0
    cluster = spec["rayClusterSpec"]
    assert cluster["enableInTreeAutoscaling"] is True
    assert cluster["autoscalerOptions"]["version"] == "v2"
    assert [g["groupName"] for g in cluster["workerGroupSpecs"]] == ["trainer-gpu", "inference-gpu"]


def test_run_config_is_a_valid_run_config(rendered) -> None:
    (config_map,) = [
        c for c in of_kind(rendered["defaults"], "ConfigMap") if "run.yaml" in c["data"]
    ]
    RunConfig.model_validate(yaml.safe_load(config_map["data"]["run.yaml"]))


def test_schema_of_run_config_mirrors_run_config() -> None:
    schema = json.loads((CHART_DIR / "values.schema.json").read_text())
    node = schema["properties"]["run"]["properties"]["config"]

    def check(model, node, path):
        assert set(node["properties"]) == set(model.model_fields), path
        for name, field in model.model_fields.items():
            if hasattr(field.annotation, "model_fields"):
                check(field.annotation, node["properties"][name], f"{path}.{name}")

    check(RunConfig, node, "run.config")


def test_monitoring_off_renders_no_monitoring_objects(rendered) -> None:
    kinds = {o["kind"] for o in rendered["monitoring-off"]}
    assert not kinds & {"ServiceMonitor", "PodMonitor", "PrometheusRule"}
    assert not [
        c
        for c in of_kind(rendered["monitoring-off"], "ConfigMap")
        if "grafana_dashboard" in c["metadata"]["labels"]
    ]


def test_dashboards_are_labelled_configmaps(rendered) -> None:
    dashboards = [
        c
        for c in of_kind(rendered["defaults"], "ConfigMap")
        if c["metadata"]["labels"].get("grafana_dashboard") == "1"
    ]
    files = sorted(p.name for p in (CHART_DIR / "dashboards").glob("*.json"))
    assert sorted(k for c in dashboards for k in c["data"]) == files
    for config_map in dashboards:
        for text in config_map["data"].values():
            assert json.loads(text)["panels"]


def test_monitors_carry_the_release_label(rendered) -> None:
    for kind in ("ServiceMonitor", "PodMonitor", "PrometheusRule"):
        for obj in of_kind(rendered["defaults"], kind):
            assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    custom = render({"monitoring": {"labels": {"prometheus": "main"}}})
    for obj in of_kind(custom, "ServiceMonitor"):
        assert obj["metadata"]["labels"]["prometheus"] == "main"


def test_helm_test_pod_probes_every_service(rendered) -> None:
    (pod,) = of_kind(rendered["defaults"], "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    args = pod["spec"]["containers"][0]["command"]
    assert {f"etude-{c}:50051" for c in COMPONENTS} <= set(args)


def test_notes_print_next_commands() -> None:
    notes = Chart.load(CHART_DIR).render({}, name="etude", namespace="etude", is_install=True)
    text = next(v for k, v in notes.items() if k.endswith("NOTES.txt"))
    assert "helm test etude -n etude" in text
    assert "kubectl -n etude get rayjob etude-train" in text


@pytest.mark.parametrize(
    ("values", "fragment"),
    [
        ({"rollout": {"replicaz": 2}}, "'replicaz' not allowed"),
        ({"rollout": {"replicas": "two"}}, "/rollout/replicas"),
        ({"trainer": {"mode": "kubernetes"}}, "/trainer/mode"),
        ({"global": {"logLevel": "LOUD"}}, "/global/logLevel"),
        ({"run": {"config": {"rollout": {"group_sise": 4}}}}, "'group_sise' not allowed"),
        ({"run": {"config": {"trainer": {"precision": "fp4"}}}}, "/run/config/trainer/precision"),
        ({"monitoring": {"labels": {"release": 1}}}, "/monitoring/labels/release"),
        ({"externalRedis": {"url": "localhost:6379"}}, "/externalRedis/url"),
    ],
)
def test_bad_values_are_rejected_naming_the_key(values, fragment: str) -> None:
    with pytest.raises(helm_python.HelmValuesError) as error:
        render(values)
    assert fragment in str(error.value)
