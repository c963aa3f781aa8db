"""JSON schemas of the two custom resources the manifests use, from their documented specifications.

KEDA `ScaledObject` (keda.sh/v1alpha1): the ScaledObject specification and the Prometheus scaler's
trigger metadata of the KEDA 2.15 documentation. Prometheus operator `ServiceMonitor`
(monitoring.coreos.com/v1): its API reference (ServiceMonitorSpec, Endpoint). Written for these
checks, not copied: fields the manifests might use, their types, the required ones, and closed
objects (unknown fields fail), so a typo or a field KEDA does not have is caught offline.
"""

from __future__ import annotations

from typing import Any

INT32 = {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1}
QUANTITY = {"type": "string", "pattern": r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$"}
DURATION = {  # Prometheus duration, as the operator's CRD constrains it
    "type": "string",
    "pattern": r"^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$",
}
STRING_MAP = {"type": "object", "additionalProperties": {"type": "string"}}
METADATA = {
    "type": "object",
    "required": ["name"],
    "properties": {"name": {"type": "string"}, "namespace": {"type": "string"}, "labels": STRING_MAP,
                   "annotations": STRING_MAP},
}  # fmt: skip
LABEL_SELECTOR = {
    "type": "object",
    "additionalProperties": False,
    "properties": {"matchLabels": STRING_MAP, "matchExpressions": {"type": "array"}},
}


def _closed(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "additionalProperties": False, "properties": properties, "required": list(required)}


HPA_POLICY = _closed(
    {
        "type": {"enum": ["Pods", "Percent"]},
        "value": {**INT32, "minimum": 1},
        "periodSeconds": {**INT32, "minimum": 1, "maximum": 1800},
    },
    ("type", "value", "periodSeconds"),
)
HPA_RULES = _closed(
    {
        "stabilizationWindowSeconds": {**INT32, "minimum": 0, "maximum": 3600},
        "selectPolicy": {"enum": ["Max", "Min", "Disabled"]},
        "policies": {"type": "array", "items": HPA_POLICY},
    }
)
PROMETHEUS_METADATA = _closed(
    {
        "serverAddress": {"type": "string", "pattern": "^https?://"},
        "query": {"type": "string", "minLength": 1},
        "threshold": QUANTITY,
        "activationThreshold": QUANTITY,
        "namespace": {"type": "string"},
        "customHeaders": {"type": "string"},
        "ignoreNullValues": {"enum": ["true", "false"]},
        "queryParameters": {"type": "string"},
        "unsafeSsl": {"enum": ["true", "false"]},
        "timeout": {"type": "string"},
    },
    ("serverAddress", "query", "threshold"),
)
TRIGGER = _closed(
    {
        "type": {"type": "string"},
        "name": {"type": "string"},
        "metadata": {"type": "object", "additionalProperties": {"type": "string"}},
        "metricType": {"enum": ["AverageValue", "Value", "Utilization"]},
        "useCachedMetrics": {"type": "boolean"},
        "authenticationRef": _closed({"name": {"type": "string"}, "kind": {"type": "string"}}, ("name",)),
    },
    ("type", "metadata"),
)
SCALED_OBJECT: dict[str, Any] = _closed(
    {
        "apiVersion": {"const": "keda.sh/v1alpha1"},
        "kind": {"const": "ScaledObject"},
        "metadata": METADATA,
        "spec": _closed(
            {
                "scaleTargetRef": _closed(
                    {
                        "apiVersion": {"type": "string"},
                        "kind": {"type": "string"},
                        "name": {"type": "string"},
                        "envSourceContainerName": {"type": "string"},
                    },
                    ("name",),
                ),  # fmt: skip
                "pollingInterval": INT32,
                "cooldownPeriod": INT32,
                "initialCooldownPeriod": INT32,
                "idleReplicaCount": INT32,
                "minReplicaCount": INT32,
                "maxReplicaCount": INT32,
                "fallback": _closed({"failureThreshold": INT32, "replicas": INT32}, ("failureThreshold", "replicas")),
                "advanced": _closed(
                    {
                        "restoreToOriginalReplicaCount": {"type": "boolean"},
                        "horizontalPodAutoscalerConfig": _closed(
                            {
                                "name": {"type": "string"},
                                "behavior": _closed({"scaleUp": HPA_RULES, "scaleDown": HPA_RULES}),
                            }
                        ),  # fmt: skip
                        "scalingModifiers": {"type": "object"},
                    }
                ),
                "triggers": {"type": "array", "minItems": 1, "items": TRIGGER},
            },
            ("scaleTargetRef", "triggers"),
        ),
    },
    ("apiVersion", "kind", "metadata", "spec"),
)
ENDPOINT = _closed(
    {
        "port": {"type": "string"},
        "targetPort": {"type": ["string", "integer"]},
        "path": {"type": "string", "pattern": "^/"},
        "scheme": {"enum": ["http", "https", "HTTP", "HTTPS"]},
        "interval": DURATION,
        "scrapeTimeout": DURATION,
        "honorLabels": {"type": "boolean"},
        "authorization": {"type": "object"},
        "tlsConfig": {"type": "object"},
        "relabelings": {"type": "array"},
        "metricRelabelings": {"type": "array"},
    }
)
SERVICE_MONITOR: dict[str, Any] = _closed(
    {
        "apiVersion": {"const": "monitoring.coreos.com/v1"},
        "kind": {"const": "ServiceMonitor"},
        "metadata": METADATA,
        "spec": _closed(
            {
                "selector": LABEL_SELECTOR,
                "endpoints": {"type": "array", "items": ENDPOINT},
                "namespaceSelector": _closed({"any": {"type": "boolean"}, "matchNames": {"type": "array"}}),
                "jobLabel": {"type": "string"},
                "targetLabels": {"type": "array"},
                "podTargetLabels": {"type": "array"},
                "sampleLimit": {"type": "integer", "minimum": 0},
            },
            ("selector",),
        ),
    },
    ("apiVersion", "kind", "metadata", "spec"),
)
SCHEMAS = {"ScaledObject": SCALED_OBJECT, "ServiceMonitor": SERVICE_MONITOR}
