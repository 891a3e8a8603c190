"""Render the Étude Helm chart offline with a real Helm engine (helm_python)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from helm_python import Chart

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR: Path = REPO_ROOT / "charts" / "etude"
CRD_DIR: Path = REPO_ROOT.parent / "shared" / "crds"


def render(
    values: dict[str, Any] | None = None,
    *,
    name: str = "etude",
    namespace: str = "etude",
    chart_dir: Path = CHART_DIR,
) -> list[dict[str, Any]]:
    """Every object the chart (by default the repository's) renders with these values,
    parsed from YAML.

    Empty documents (a disabled component's template) are dropped. Raises the
    engine's error (HelmValuesError, HelmRenderError) when rendering fails.
    """
    chart = Chart.load(chart_dir)
    manifests = chart.render(values or {}, name=name, namespace=namespace, is_install=True)
    objects: list[dict[str, Any]] = []
    for path in sorted(manifests):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(manifests[path]):
            if doc:
                objects.append(doc)
    return objects


def of_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The objects of one kind, in rendering order."""
    return [obj for obj in objects if obj.get("kind") == kind]
