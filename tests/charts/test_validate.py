"""Every rendered object is valid: built-in kinds against the Kubernetes OpenAPI schemas
(kubernetes-validate, strict: unknown fields fail) for several Kubernetes versions, custom
resources against the operators' CRD schemas in ../shared/crds/."""

from __future__ import annotations

import functools
import json

import jsonschema
import kubernetes_validate
import pytest

from tests.charts.chart import CRD_DIR, of_kind
from tests.charts.conftest import SCENARIOS
from tests.charts.crd_schema import load_crd_schemas

KUBERNETES_VERSIONS = ("1.29.0", "1.30.0", "1.33.0")
CUSTOM_GROUPS = ("ray.io/", "keda.sh/", "monitoring.coreos.com/", "cert-manager.io/")


def _is_custom(obj) -> bool:
    return obj["apiVersion"].startswith(CUSTOM_GROUPS)


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_builtin_objects_are_valid_kubernetes(rendered, version: str) -> None:
    # Scenarios share most objects; each distinct object is validated once per version.
    unique = {
        json.dumps(obj, sort_keys=True): obj
        for scenario in SCENARIOS
        for obj in rendered[scenario]
        if not _is_custom(obj)
    }
    for obj in unique.values():
        try:
            kubernetes_validate.validate(obj, version, strict=True)
        except kubernetes_validate.ValidationError as error:
            pytest.fail(
                f"{obj['kind']}/{obj['metadata']['name']} on {version}: {error.message} "
                f"at {list(error.path)}"
            )


@functools.cache
def _crd_schemas():
    return load_crd_schemas(CRD_DIR)


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_custom_resources_match_their_crds(rendered, scenario: str) -> None:
    if not CRD_DIR.is_dir():
        pytest.skip(f"CRD schemas not found at {CRD_DIR} (see ../shared/crds/README.md)")
    schemas = _crd_schemas()
    for obj in rendered[scenario]:
        if not _is_custom(obj):
            continue
        key = (obj["apiVersion"], obj["kind"])
        if key[0].startswith("cert-manager.io/") and key not in schemas:
            continue  # no cert-manager CRD in ../shared/crds: test_credentials checks these
        assert key in schemas, f"no CRD for {key}"
        errors = sorted(jsonschema.Draft7Validator(schemas[key]).iter_errors(obj), key=str)
        assert not errors, [
            f"{obj['kind']}/{obj['metadata']['name']}: {e.message} at {list(e.path)}"
            for e in errors
        ]


def test_crd_check_rejects_typos_and_wrong_types() -> None:
    """The converted schemas are strict where the API server would silently drop fields."""
    if not CRD_DIR.is_dir():
        pytest.skip(f"CRD schemas not found at {CRD_DIR} (see ../shared/crds/README.md)")
    schemas = _crd_schemas()
    from tests.charts.chart import render

    (job,) = of_kind(render(), "RayJob")
    validator = jsonschema.Draft7Validator(schemas[("ray.io/v1", "RayJob")])
    job["spec"]["shutdownAfterJobFinishs"] = True
    assert any("shutdownAfterJobFinishs" in e.message for e in validator.iter_errors(job))
    del job["spec"]["shutdownAfterJobFinishs"]
    job["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["rayStartParams"]["num-gpus"] = 8
    assert list(validator.iter_errors(job))


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_scaled_objects_keep_min_below_max(rendered, scenario: str) -> None:
    """KEDA's CEL rule (not checked by JSON Schema): minReplicaCount <= maxReplicaCount."""
    for scaled in of_kind(rendered[scenario], "ScaledObject"):
        assert scaled["spec"]["minReplicaCount"] <= scaled["spec"]["maxReplicaCount"]
        for trigger in scaled["spec"]["triggers"]:
            assert all(isinstance(v, str) for v in trigger["metadata"].values()), trigger


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_ray_start_params_are_strings(rendered, scenario: str) -> None:
    for obj in of_kind(rendered[scenario], "RayJob") + of_kind(rendered[scenario], "RayCluster"):
        spec = obj["spec"].get("rayClusterSpec", obj["spec"])
        for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
            assert all(isinstance(v, str) for v in group["rayStartParams"].values()), group
