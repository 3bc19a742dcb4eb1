"""A JSON Schema of the KEDA objects the manifests use (``keda.sh/v1alpha1``), written for the tests.

KEDA's ScaledObject and TriggerAuthentication are custom resources, absent from the
Kubernetes schemas ``kubernetes-validate`` ships. This schema holds the fields KEDA
documents (ScaledObject specification, KEDA 2.17; the ``redis-streams`` and
``redis-cluster-streams`` scalers' parameter lists; TriggerAuthentication's
``secretTargetRef``), closed with ``additionalProperties: false`` so that a misspelt field
fails; trigger metadata values are strings, as in KEDA's CRD. Only the parts the
generator may emit are listed: a field KEDA has but the generator never writes is absent
(adding one to the generator means adding it here, from KEDA's documentation).
"""

from __future__ import annotations

from typing import Any

_INT = {"type": "integer", "minimum": 0}
_STR = {"type": "string", "minLength": 1}
_NUMBER_TEXT = {"type": "string", "pattern": r"^[0-9]+(\.[0-9]+)?$"}


def _closed(properties: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": list(required), "additionalProperties": False}


_METADATA = _closed({
    "name": _STR,
    "namespace": _STR,
    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
    "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
}, ("name",))

#: The redis-streams (and redis-cluster-streams) scaler's documented parameters.
_REDIS_STREAMS_METADATA = _closed({
    "address": _STR, "addresses": _STR, "host": _STR, "hosts": _STR, "port": _STR, "ports": _STR,
    "addressFromEnv": _STR, "hostFromEnv": _STR, "portFromEnv": _STR,
    "usernameFromEnv": _STR, "passwordFromEnv": _STR,
    "stream": _STR, "consumerGroup": _STR,
    "pendingEntriesCount": _NUMBER_TEXT, "streamLength": _NUMBER_TEXT,
    "lagCount": _NUMBER_TEXT, "activationLagCount": _NUMBER_TEXT,
    "enableTLS": {"enum": ["true", "false"]}, "unsafeSsl": {"enum": ["true", "false"]},
    "databaseIndex": _NUMBER_TEXT,
}, ("stream",))

_TRIGGER = _closed({
    "type": {"enum": ["redis-streams", "redis-cluster-streams"]},
    "name": {"type": "string", "pattern": "^[A-Za-z_][A-Za-z0-9_]*$"},  # an identifier of the formula
    "metadata": _REDIS_STREAMS_METADATA,
    "authenticationRef": _closed({"name": _STR, "kind": {"enum": ["TriggerAuthentication",
                                                                  "ClusterTriggerAuthentication"]}}, ("name",)),
    "metricType": {"enum": ["AverageValue", "Value"]},
    "useCachedMetrics": {"type": "boolean"},
}, ("type", "metadata"))

_HPA_POLICY = _closed({"type": {"enum": ["Pods", "Percent"]}, "value": {"type": "integer", "minimum": 1},
                       "periodSeconds": {"type": "integer", "minimum": 1, "maximum": 1800}},
                      ("type", "value", "periodSeconds"))
_HPA_RULES = _closed({"stabilizationWindowSeconds": {"type": "integer", "minimum": 0, "maximum": 3600},
                      "selectPolicy": {"enum": ["Max", "Min", "Disabled"]},
                      "policies": {"type": "array", "items": _HPA_POLICY, "minItems": 1}})

SCALED_OBJECT: dict[str, Any] = _closed({
    "apiVersion": {"const": "keda.sh/v1alpha1"},
    "kind": {"const": "ScaledObject"},
    "metadata": _METADATA,
    "spec": _closed({
        "scaleTargetRef": _closed({"apiVersion": _STR, "kind": _STR, "name": _STR,
                                   "envSourceContainerName": _STR}, ("name",)),
        "pollingInterval": _INT, "cooldownPeriod": _INT, "initialCooldownPeriod": _INT,
        "idleReplicaCount": {"const": 0}, "minReplicaCount": _INT, "maxReplicaCount": {"type": "integer", "minimum": 1},
        "fallback": _closed({"failureThreshold": _INT, "replicas": _INT,
                             "behavior": {"enum": ["static", "currentReplicas", "currentReplicasIfHigher",
                                                   "currentReplicasIfLower"]}},
                            ("failureThreshold", "replicas")),
        "advanced": _closed({
            "restoreToOriginalReplicaCount": {"type": "boolean"},
            "horizontalPodAutoscalerConfig": _closed({"name": _STR, "behavior": _closed(
                {"scaleUp": _HPA_RULES, "scaleDown": _HPA_RULES})}),
            "scalingModifiers": _closed({"formula": _STR, "target": _NUMBER_TEXT, "activationTarget": _NUMBER_TEXT,
                                         "metricType": {"enum": ["AverageValue", "Value"]}},
                                        ("formula", "target")),
        }),
        "triggers": {"type": "array", "items": _TRIGGER, "minItems": 1},
    }, ("scaleTargetRef", "triggers")),
}, ("apiVersion", "kind", "metadata", "spec"))

TRIGGER_AUTHENTICATION: dict[str, Any] = _closed({
    "apiVersion": {"const": "keda.sh/v1alpha1"},
    "kind": {"const": "TriggerAuthentication"},
    "metadata": _METADATA,
    "spec": _closed({"secretTargetRef": {"type": "array", "minItems": 1, "items": _closed(
        {"parameter": {"enum": ["username", "password", "host", "port", "address", "addresses", "hosts", "ports",
                                "tls", "ca", "cert", "key", "keyPassword"]},
         "name": _STR, "key": _STR}, ("parameter", "name", "key"))}}, ("secretTargetRef",)),
}, ("apiVersion", "kind", "metadata", "spec"))

#: Schema per KEDA kind.
KEDA_SCHEMAS = {"ScaledObject": SCALED_OBJECT, "TriggerAuthentication": TRIGGER_AUTHENTICATION}
