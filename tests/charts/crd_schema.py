"""Turn a CustomResourceDefinition's openAPIV3Schema into a JSON Schema that checks a
custom resource as strictly as the API server would, and stricter where it would silently
drop a field (see ../shared/crds/README.md for the pitfalls handled here)."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import yaml

# Go regex features Python's `re` lacks: the case-insensitive flag group. `(?i)abc`
# becomes `[aA][bB][cC]`.
_CASE_FLAG = re.compile(r"\(\?i\)")


def _fold_case(pattern: str) -> str:
    if not _CASE_FLAG.search(pattern):
        return pattern
    body = _CASE_FLAG.sub("", pattern)
    out, escaped, in_class = [], False, False
    for char in body:
        if escaped:
            out.append(char)
            escaped = False
        elif char == "\\":
            out.append(char)
            escaped = True
        elif char == "[":
            in_class = True
            out.append(char)
        elif char == "]":
            in_class = False
            out.append(char)
        elif char.isalpha():
            both = char.lower() + char.upper()
            out.append(both if in_class else f"[{both}]")
        else:
            out.append(char)
    return "".join(out)


def convert(node: dict[str, Any]) -> dict[str, Any]:
    """A JSON Schema for one openAPIV3Schema node (recursively)."""
    node = dict(node)
    preserve = node.pop("x-kubernetes-preserve-unknown-fields", False)
    int_or_string = node.pop("x-kubernetes-int-or-string", False)
    nullable = node.pop("nullable", False)
    for key in list(node):
        if key.startswith("x-kubernetes-") or key == "format":
            # CEL rules, list/map types and formats (int32, date-time…) are not JSON Schema
            # checks; CEL rules that matter are asserted in the tests.
            node.pop(key)
    if "pattern" in node:
        node["pattern"] = _fold_case(node["pattern"])
    if "properties" in node:
        node["properties"] = {k: convert(v) for k, v in node["properties"].items()}
        if not preserve and "additionalProperties" not in node:
            node["additionalProperties"] = False
    if isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = convert(node["additionalProperties"])
    if "items" in node and isinstance(node["items"], dict):
        node["items"] = convert(node["items"])
    for key in ("allOf", "anyOf", "oneOf"):
        if key in node:
            node[key] = [convert(part) for part in node[key]]
    if "not" in node:
        node["not"] = convert(node["not"])
    if int_or_string:
        node.pop("type", None)
        node = {"anyOf": [{"type": "integer"}, {"type": "string"}], **node}
    if nullable:
        node = {"anyOf": [{"type": "null"}, node]}
    return node


def load_crd_schemas(crd_dir: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> JSON Schema, for every served version of every CRD file."""
    schemas: dict[tuple[str, str], dict[str, Any]] = {}
    for path in sorted(crd_dir.rglob("*.yaml")):
        # The C loader: the KubeRay CRDs are tens of thousands of lines.
        for crd in yaml.load_all(path.read_text(), Loader=yaml.CSafeLoader):
            if not crd or crd.get("kind") != "CustomResourceDefinition":
                continue
            group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
            for version in crd["spec"]["versions"]:
                if not version.get("served", True):
                    continue
                schema = convert(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
                # The API server always requires these; the CRDs do not say so.
                schema.setdefault("required", [])
                schema["required"] = sorted({*schema["required"], "apiVersion", "kind", "metadata"})
                schema["properties"]["metadata"] = {
                    "type": "object",
                    "required": ["name"],
                    "properties": {
                        "name": {
                            "type": "string",
                            "pattern": r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$",
                            "maxLength": 253,
                        },
                        "namespace": {"type": "string"},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "annotations": {
                            "type": "object",
                            "additionalProperties": {"type": "string"},
                        },
                    },
                    "additionalProperties": False,
                }
                schemas[(f"{group}/{version['name']}", kind)] = schema
    return schemas
