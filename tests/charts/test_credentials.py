"""The chart's credentials: the Secret of role tokens and the Redis password, each pod
mounting the digests of every role and the tokens of its own roles only, Redis requiring
the password, KEDA reading it through a TriggerAuthentication, and cert-manager
Certificates for mTLS."""

from __future__ import annotations

import base64
import hashlib
import json

import pytest
import yaml

from etude.common.auth import ROLES
from tests.charts.chart import CHART_DIR, of_kind

OWN_ROLES = {
    "environment": ["environment"],
    "reward": ["reward"],
    "rollout": ["rollout"],
    "gateway": ["gateway"],
    "search": [],
}


def _pods(objects):
    """(name, pod spec) of every Deployment and Ray group."""
    for deployment in of_kind(objects, "Deployment"):
        yield deployment["metadata"]["name"], deployment["spec"]["template"]["spec"]
    for kind in ("RayJob", "RayCluster"):
        for ray in of_kind(objects, kind):
            cluster = ray["spec"].get("rayClusterSpec", ray["spec"])
            yield "ray-head", cluster["headGroupSpec"]["template"]["spec"]
            for group in cluster["workerGroupSpecs"]:
                yield f"ray-{group['groupName']}", group["template"]["spec"]


def _credentials(spec) -> tuple[dict, dict[str, str]]:
    volume = next(v for v in spec["volumes"] if v["name"] == "credentials")
    env = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    return volume["secret"], env


def test_no_token_or_password_is_in_the_values() -> None:
    values = yaml.safe_load((CHART_DIR / "values.yaml").read_text())
    assert values["auth"] == {"existingSecret": "", "metricsRequireToken": False}
    assert "password" not in json.dumps(values["redis"]).lower()


def test_the_secret_holds_a_token_and_its_digest_per_role(rendered) -> None:
    (secret,) = of_kind(rendered["defaults"], "Secret")
    assert secret["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    data = {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}
    assert set(data) == {*ROLES, *(f"{r}.sha256" for r in ROLES), "redis-password"}
    tokens = [data[role] for role in ROLES]
    assert len(set(tokens)) == len(ROLES) and all(len(t) >= 32 for t in tokens)
    for role in ROLES:
        # What a server reads from `<role>.sha256` is what etude.common.auth computes.
        assert data[f"{role}.sha256"] == hashlib.sha256(data[role].encode()).hexdigest()
    assert len(data["redis-password"]) >= 32


def test_each_pod_mounts_every_digest_and_only_its_own_tokens(rendered) -> None:
    checked = set()
    for name, spec in _pods(rendered["defaults"]):
        secret, env = _credentials(spec)
        component = name.removeprefix("etude-")
        own = OWN_ROLES.get(component, ["trainer", "rollout"])
        keys = [item["key"] for item in secret["items"]]
        assert sorted(k for k in keys if not k.endswith(".sha256")) == sorted(own), name
        assert {k for k in keys if k.endswith(".sha256")} == {f"{r}.sha256" for r in ROLES}
        assert "redis-password" not in keys
        assert secret["defaultMode"] in (0o440, 0o444)
        assert env["ETUDE_AUTH__TOKENS_DIR"] == "/etc/etude/credentials"
        assert json.loads(env["ETUDE_AUTH__ROLES"]) == own
        assert "ETUDE_AUTH__REQUIRED" not in env  # never switched off
        mounts = spec["containers"][0]["volumeMounts"]
        assert {"name": "credentials", "mountPath": "/etc/etude/credentials",
                "readOnly": True} in mounts  # fmt: skip
        checked.add(component)
    assert set(OWN_ROLES) <= checked
    # No pod but the operator's own tooling holds the operator token, none the UpdateWeights
    # one except the trainer's Ray pods.
    for name, spec in _pods(rendered["defaults"]):
        keys = {item["key"] for item in _credentials(spec)[0]["items"]}
        assert "operator" not in keys
        assert ("trainer" in keys) == name.startswith("ray-")


def test_redis_requires_the_password_and_keda_reads_it(rendered) -> None:
    objects = rendered["defaults"]
    (redis,) = of_kind(objects, "StatefulSet")
    (container,) = redis["spec"]["template"]["spec"]["containers"]
    args = container["args"]
    assert args[args.index("--requirepass") + 1] == "$(REDIS_PASSWORD)"
    renamed = [args[i + 1] for i, a in enumerate(args) if a == "--rename-command"]
    assert "CONFIG" in renamed
    (password,) = container["env"]
    assert password["valueFrom"]["secretKeyRef"] == {"name": "etude-auth", "key": "redis-password"}
    assert "REDISCLI_AUTH" in " ".join(container["readinessProbe"]["exec"]["command"])
    (auth,) = of_kind(objects, "TriggerAuthentication")
    assert auth["spec"]["secretTargetRef"] == [
        {"parameter": "password", "name": "etude-auth", "key": "redis-password"}
    ]
    scaled = of_kind(objects, "ScaledObject")
    assert scaled and all(
        t["authenticationRef"] == {"name": auth["metadata"]["name"]}
        for s in scaled
        for t in s["spec"]["triggers"]
    )


@pytest.mark.parametrize("scenario", ["external-redis", "everything"])
def test_a_redis_of_its_own_brings_its_own_credentials(rendered, scenario) -> None:
    objects = rendered[scenario]
    assert not of_kind(objects, "TriggerAuthentication")
    for s in of_kind(objects, "ScaledObject"):
        refs = {t.get("authenticationRef", {}).get("name") for t in s["spec"]["triggers"]}
        assert refs == ({"redis-auth"} if scenario == "everything" else {None})


def test_an_existing_secret_is_used_and_mtls_mounts_certificates(rendered) -> None:
    objects = rendered["mtls"]
    assert not of_kind(objects, "Secret")  # the user's, not generated
    certificates = {c["metadata"]["name"]: c for c in of_kind(objects, "Certificate")}
    assert set(certificates) == {
        f"etude-{c}-tls" for c in ("environment", "search", "reward", "rollout", "gateway",
                                   "trainer")
    }  # fmt: skip
    for certificate in certificates.values():
        # Structure (no cert-manager CRD in ../shared/crds to validate against).
        assert certificate["apiVersion"] == "cert-manager.io/v1"
        spec = certificate["spec"]
        assert spec["secretName"] == certificate["metadata"]["name"]
        assert spec["issuerRef"] == {"name": "etude-ca", "kind": "ClusterIssuer",
                                     "group": "cert-manager.io"}  # fmt: skip
        assert {"server auth", "client auth"} <= set(spec["usages"])
        assert spec["dnsNames"] and all(isinstance(n, str) for n in spec["dnsNames"])
    for name, spec in _pods(objects):
        secret, env = _credentials(spec)
        assert secret["secretName"] == "etude-credentials"
        assert env["ETUDE_AUTH__METRICS_REQUIRE_TOKEN"] == "true"
        tls = next(v for v in spec["volumes"] if v["name"] == "tls")
        assert tls["secret"]["secretName"] in certificates, name
        assert env["ETUDE_AUTH__TLS_CA_FILE"] == "/etc/etude/tls/ca.crt"
        assert env["ETUDE_AUTH__TLS_CERT_FILE"] == "/etc/etude/tls/tls.crt"
        assert env["ETUDE_AUTH__TLS_KEY_FILE"] == "/etc/etude/tls/tls.key"
