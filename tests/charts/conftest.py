from __future__ import annotations

from typing import Any

import pytest

from tests.charts.chart import render

# Value scenarios every structural test runs on.
SCENARIOS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "everything": {
        "environment": {
            "runtimeClassName": "gvisor",
            "sandbox": {
                "seccompProfile": "Localhost",
                "seccompLocalhostProfile": "profiles/etude-bwrap.json",
            },
        },
        "reward": {"runtimeClassName": "gvisor"},
        "gateway": {"podDisruptionBudget": {"enabled": True}},
        "keda": {"triggerAuthenticationName": "redis-auth"},
        "networkPolicy": {
            "rayExternalEgress": False,
            "gatewayIngressFrom": [{"namespaceSelector": {"matchLabels": {"team": "ml"}}}],
        },
        "imagePullSecrets": [{"name": "regcred"}],
        "trainer": {"activeDeadlineSeconds": 86400},
    },
    "external-redis": {"externalRedis": {"url": "redis://:secret@redis.example.com:6380/2"}},
    "raycluster": {"trainer": {"mode": "raycluster"}},
    "monitoring-off": {"monitoring": {"enabled": False}},
    "no-keda": {"keda": {"enabled": False}},
    "mtls": {
        "tls": {"enabled": True, "issuerRef": {"name": "etude-ca", "kind": "ClusterIssuer"}},
        "auth": {"existingSecret": "etude-credentials", "metricsRequireToken": True},
        "trainer": {"mode": "raycluster"},
    },
    "minimal": {
        "trainer": {"enabled": False},
        "search": {"enabled": False},
        "networkPolicy": {"enabled": False},
        "tests": {"enabled": False},
    },
}


@pytest.fixture(scope="session")
def rendered() -> dict[str, list[dict[str, Any]]]:
    """Every scenario rendered once per session (rendering is the slow part)."""
    return {name: render(values) for name, values in SCENARIOS.items()}
