"""Renders the Helm chart offline and validates what it renders, for tests/unit/test_helm.py.

Rendering uses Helm's own Go SDK (v4) through helm-python-sdk's bundled library: no helm binary, no cluster.
Validation uses kubernetes-validate's strict schemas (unknown fields are errors) for each Kubernetes version in
KUBE_VERSIONS; an object whose kind and apiVersion have no schema there (an unknown, misspelt or removed API)
is a failure too, never the warning the CLI prints. The one custom resource the chart may render, Prometheus
Operator's ServiceMonitor, is checked against SERVICE_MONITOR_SCHEMA below instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import helm_python
import jsonschema
import yaml
from kubernetes_validate import utils as kv
from referencing import Registry, Resource

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "helm" / "triton-vllm-gateway"
RELEASE, NAMESPACE = "llm", "inference"
# The oldest Kubernetes still supported by its providers when the chart was written, and the newest schemas.
KUBE_VERSIONS = ("1.29.0", "1.37.0")

_DEFINITIONS = "https://kubernetes.io/api/_definitions.json"
_META = {"$ref": f"{_DEFINITIONS}#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
_SELECTOR = {"$ref": f"{_DEFINITIONS}#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.LabelSelector"}
# Prometheus Operator's duration format (its CRDs' pattern for interval and scrapeTimeout).
_DURATION = {
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
_SECRET_KEY = {
    "type": "object",
    "additionalProperties": False,
    "required": ["key"],
    "properties": {"name": {"type": "string"}, "key": {"type": "string"}, "optional": {"type": "boolean"}},
}
# The part of monitoring.coreos.com/v1 ServiceMonitor that the chart uses, closed like the strict schemas.
SERVICE_MONITOR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": _META,
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "endpoints"],
            "properties": {
                "selector": _SELECTOR,
                "namespaceSelector": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "any": {"type": "boolean"},
                        "matchNames": {"type": "array", "items": {"type": "string"}},
                    },
                },
                "endpoints": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "port": {"type": "string"},
                            "path": {"type": "string"},
                            "scheme": {"enum": ["http", "https"]},
                            "interval": _DURATION,
                            "scrapeTimeout": _DURATION,
                            "authorization": {
                                "type": "object",
                                "additionalProperties": False,
                                "properties": {"type": {"type": "string"}, "credentials": _SECRET_KEY},
                            },
                        },
                    },
                },
            },
        },
    },
}


@dataclass(frozen=True)
class Problem:
    """Why one rendered object failed validation against one Kubernetes version."""

    kind: str
    name: str
    version: str
    message: str


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The chart's objects for these values (helm_python raises on a template's `fail`)."""
    with helm_python.Chart.load(CHART) as chart:
        manifests = chart.render(values or {}, name=RELEASE, namespace=NAMESPACE, is_install=True)
    return [doc for text in manifests.values() for doc in yaml.safe_load_all(text) if doc]


def rendered_text(values: dict[str, Any] | None = None) -> str:
    """The objects as one multi-document YAML stream, as `helm template` prints it."""
    return yaml.safe_dump_all(render(values), sort_keys=False)


def _custom_validator(schema: dict[str, Any], version: str) -> jsonschema.Draft202012Validator:
    definitions = kv.schema_contents(f"kubernetes-json-schema/v{version}-local-strict/_definitions.json", version)
    registry = Registry().with_resource(_DEFINITIONS, Resource.from_contents(definitions))
    return jsonschema.Draft202012Validator(schema, registry=registry)


def problems(objects: Iterable[dict[str, Any]], versions: Iterable[str] = KUBE_VERSIONS) -> list[Problem]:
    """Every validation failure; an empty list means every object is valid on every version."""
    found = []
    for obj in objects:
        kind, name = obj.get("kind", "?"), obj.get("metadata", {}).get("name", "?")
        for version in versions:
            try:
                if obj.get("apiVersion") == "monitoring.coreos.com/v1" and kind == "ServiceMonitor":
                    for error in _custom_validator(SERVICE_MONITOR_SCHEMA, version).iter_errors(obj):
                        found.append(Problem(kind, name, version, f"{error.json_path}: {error.message}"))
                else:
                    kv.validate(obj, version, strict=True)
            except kv.ValidationError as error:
                path = ".".join(str(part) for part in error.path)
                found.append(Problem(kind, name, version, f"{path}: {error.message}"))
            except (kv.SchemaNotFoundError, kv.InvalidSchemaError) as error:
                # The CLI only warns here; an API the cluster does not serve is a failure.
                found.append(Problem(kind, name, version, error.message))
    return found


def by_kind(objects: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [obj for obj in objects if obj["kind"] == kind]


def one(objects: Iterable[dict[str, Any]], kind: str, component: str | None = None) -> dict[str, Any]:
    """The single object of this kind (and app.kubernetes.io/component, when given)."""
    found = [
        obj
        for obj in by_kind(objects, kind)
        if component is None or obj["metadata"]["labels"].get("app.kubernetes.io/component") == component
    ]
    assert len(found) == 1, f"{len(found)} {kind} objects for {component}"
    return found[0]
