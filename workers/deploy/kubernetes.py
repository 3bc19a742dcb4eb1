"""Kubernetes manifests of a worker deployment, built from the key layout (``deploy kubernetes``).

What it does: :func:`manifests` returns, per file name, the objects of one deployment as
plain dicts: Secret templates for the Redis ACL users (the worker's, the scaler's), the worker Deployment (probes
on ``/livez`` and ``/readyz``, resources sized from the RSS benchmark, a grace period above
the worker's), a PodDisruptionBudget, a metrics Service, and KEDA's TriggerAuthentication
and ScaledObject; :func:`render` dumps them as YAML. The stream names and the consumer
group of the ScaledObject come from :class:`~signals.streams.keys.Keys` and
:data:`~signals.streams.keys.GROUP`, the user names from :func:`~signals.streams.acl.user_name`:
nothing is typed by hand, so the manifests cannot drift from the code.

What it does not do: no I/O, no cluster access, no secrets (the Secret holds placeholders,
to be filled with the passwords ``wm-signals deploy acl`` printed).

Why one ``redis-streams`` trigger per partition: KEDA's trigger reads one stream, and the
HPA scales on the largest of several metrics, while the backlog is the sum over every
partition. Lag mode (``lagCount``: the group's ``lag`` from ``XINFO GROUPS``, Redis >= 7)
gives each partition's undelivered entries, and ``advanced.scalingModifiers`` replaces the
per-trigger metrics with one composite metric, the formula ``p0 + p1 + ...``, whose target
is the backlog one worker should carry. It reads Redis itself, so it works when no worker
runs (scaling from zero: the Prometheus lag gauge comes from the workers and vanishes with
them). docs/operations/kubernetes.md gives the Prometheus alternative for very many partitions.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import yaml

from signals.errors import InvalidInputError
from signals.streams.acl import user_name
from signals.streams.keys import GROUP, Keys

__all__ = ("FILES", "GRACE_PERIOD_S", "METRICS_PORT", "RESOURCES", "Options", "command_line", "manifests", "render")

#: The worker's metrics, ``/livez`` and ``/readyz`` port (the metrics contract).
METRICS_PORT = 9464

#: ``terminationGracePeriodSeconds``: above the worker's stop (``grace_s``, 10 s by default,
#: for the batch in flight, then a hard deadline and shielded cleanups of a few seconds).
GRACE_PERIOD_S = 30

#: The uid and gid of the image's non-root user (deploy/Dockerfile).
IMAGE_UID = 10001

#: Per worker process, from BENCHMARKS.md ("Worker memory (RSS) by lanes touched": about
#: 55 MB just after start, 105 MB once it has seen 1,000,000 lanes, flat beyond: its caches
#: are bounded). The request covers that plateau (105 MB is 100 MiB) with room for a batch
#: of large documents in flight (500 entries of a few KiB); the limit doubles it, so only a
#: leak is killed. One process runs on one core (asyncio; the throughput benchmark measured
#: about 24,000 events/s on one): the CPU limit of one core never throttles it below that.
RESOURCES: Mapping[str, Mapping[str, str]] = {
    "requests": {"cpu": "500m", "memory": "128Mi"},
    "limits": {"cpu": "1", "memory": "256Mi"},
}

#: The files of ``-o DIR``, in order.
FILES = ("secret.yaml", "deployment.yaml", "pdb.yaml", "service.yaml", "keda.yaml")

_NAME = re.compile(r"[a-z]([-a-z0-9]{0,38}[a-z0-9])?")
_K8S_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_HOST_PORT = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9.]*[A-Za-z0-9])?:([0-9]{1,5})")
_IMAGE = re.compile(r"[^\s]{1,255}")


@dataclass(frozen=True, slots=True)
class Options:
    """What a deployment's manifests depend on.

    Args:
        keys: the namespace and partition count (the streams the ScaledObject watches).
        name: the prefix of every object's name (two deployments in one Kubernetes
            namespace need different names); at most 40 characters, a DNS label.
        k8s_namespace: ``metadata.namespace`` of every object; ``None`` leaves it out
            (``kubectl apply -n`` decides).
        image: the worker image (built from deploy/Dockerfile).
        redis_address: ``host:port`` of Redis, or for ``cluster`` the nodes, comma-separated.
        cluster: Redis Cluster (the worker's cluster mode, KEDA's ``redis-cluster-streams``).
        min_replicas: the fewest workers (0: scale to zero when no entry waits).
        max_replicas: the most workers.
        lag_per_replica: the backlog (undelivered entries over all partitions) one worker
            should carry: the composite metric's target.

    Raises:
        InvalidInputError: a value Kubernetes or KEDA would refuse, named.
    """

    keys: Keys
    name: str = "wm-signals"
    k8s_namespace: str | None = None
    image: str = "wm-signals:0.1.0"
    redis_address: str = "redis:6379"
    cluster: bool = False
    min_replicas: int = 1
    max_replicas: int = 16
    lag_per_replica: int = 2000

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise InvalidInputError(f"--name {self.name!r}: a DNS label of at most 40 characters "
                                    "(lowercase letters, digits and '-', starting with a letter)")
        if self.k8s_namespace is not None and not _K8S_NAMESPACE.fullmatch(self.k8s_namespace):
            raise InvalidInputError(f"--k8s-namespace {self.k8s_namespace!r}: not a Kubernetes namespace name "
                                    "(a DNS label: lowercase letters, digits and '-', at most 63)")
        if not _IMAGE.fullmatch(self.image):
            raise InvalidInputError(f"--image {self.image!r}: an image reference without whitespace")
        for address in self.addresses():
            match = _HOST_PORT.fullmatch(address)
            if match is None or not 1 <= int(match.group(2)) <= 65535:
                raise InvalidInputError(f"--redis-address {address!r}: give HOST:PORT (port 1-65535)"
                                        + (", comma-separated for a cluster" if self.cluster else ""))
        if len(self.addresses()) > 1 and not self.cluster:
            raise InvalidInputError("--redis-address: several addresses need --cluster")
        if not 0 <= self.min_replicas <= self.max_replicas or self.max_replicas < 1:
            raise InvalidInputError(f"replicas: need 0 <= --min-replicas ({self.min_replicas}) <= "
                                    f"--max-replicas ({self.max_replicas}) and --max-replicas >= 1")
        if self.lag_per_replica < 1:
            raise InvalidInputError(f"--lag-per-replica {self.lag_per_replica}: must be at least 1")

    def addresses(self) -> list[str]:
        """The Redis addresses (one unless ``cluster``)."""
        return self.redis_address.split(",")


def command_line(options: Options) -> str:
    """The ``wm-signals deploy kubernetes`` command that makes these manifests (in each file's header)."""
    default = Options(Keys())
    parts = ["wm-signals deploy kubernetes", f"--namespace {options.keys.namespace}",
             f"--partitions {options.keys.partitions}"]
    flags = (("--name", "name"), ("--k8s-namespace", "k8s_namespace"), ("--image", "image"),
             ("--redis-address", "redis_address"), ("--min-replicas", "min_replicas"),
             ("--max-replicas", "max_replicas"), ("--lag-per-replica", "lag_per_replica"))
    parts += [f"{flag} {getattr(options, attr)}" for flag, attr in flags
              if getattr(options, attr) != getattr(default, attr)]
    if options.cluster:
        parts.append("--cluster")
    return " ".join(parts)


def _labels(options: Options, component: str = "worker") -> dict[str, str]:
    return {"app.kubernetes.io/name": "wm-signals", "app.kubernetes.io/instance": options.name,
            "app.kubernetes.io/component": component}


def _meta(options: Options, name: str, component: str = "worker") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"{options.name}-{name}"}
    if options.k8s_namespace is not None:
        meta["namespace"] = options.k8s_namespace
    return meta | {"labels": _labels(options, component)}


def _secret_name(options: Options, role: str) -> str:
    return f"{options.name}-redis-{role}"


def secret(options: Options, role: str) -> dict[str, Any]:
    """An ACL user's name and (placeholder) password: one Secret per user, so that the worker's
    pods and KEDA each read only their own."""
    user = user_name(options.keys, role)
    data = {"username": user, "password": f"REPLACE-ME-with-the-{user}-password-from-deploy-acl"}
    component = "autoscaler" if role == "scaler" else role
    return {"apiVersion": "v1", "kind": "Secret", "metadata": _meta(options, f"redis-{role}", component),
            "type": "Opaque", "stringData": data}


def _secret_env(options: Options, name: str, key: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": _secret_name(options, "worker"), "key": key}}}


def _probe(path: str, period_s: int, failures: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": "metrics"}, "periodSeconds": period_s, "timeoutSeconds": 2,
            "failureThreshold": failures}


def deployment(options: Options) -> dict[str, Any]:
    """The worker Deployment. No ``replicas``: the HPA KEDA makes owns the count (a
    ``kubectl apply`` would otherwise reset it); without KEDA it runs one worker.

    The Redis URL is assembled from the Secret with Kubernetes' ``$(VAR)`` expansion, so the
    password must be URL-safe (``deploy acl`` makes ``token_urlsafe`` passwords). So must
    the user name: a namespace may hold ``:``, which in a URL ends the user name (the worker
    of namespace ``a:b`` logged in as user ``a``). Such a name is written into the URL
    percent-encoded instead (the expansion cannot encode), as redis-py decodes it.
    """
    user = user_name(options.keys, "worker")
    url_user = "$(WM_REDIS_USERNAME)" if quote(user, safe="") == user else quote(user, safe="")
    env = [
        {"name": "WM_SIGNALS_NAMESPACE", "value": options.keys.namespace},
        {"name": "WM_SIGNALS_PARTITIONS", "value": str(options.keys.partitions)},
        {"name": "WM_SIGNALS_METRICS_PORT", "value": str(METRICS_PORT)},
        {"name": "WM_SIGNALS_METRICS_ADDR", "value": "0.0.0.0"},  # noqa: S104 - the pod's own interface, for probes
        {"name": "WM_SIGNALS_LOG_FORMAT", "value": "json"},
        _secret_env(options, "WM_REDIS_USERNAME", "username"),
        _secret_env(options, "WM_REDIS_PASSWORD", "password"),
        {"name": "WM_SIGNALS_REDIS_URL",
         "value": f"redis://{url_user}:$(WM_REDIS_PASSWORD)@{options.addresses()[0]}/0"},
    ]
    if options.cluster:
        env.append({"name": "WM_SIGNALS_CLUSTER", "value": "true"})
    container = {
        "name": "worker",
        "image": options.image,
        "imagePullPolicy": "IfNotPresent",
        "args": ["worker"],
        "env": env,
        "ports": [{"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"}],
        # start-up: its own pending entries first (a restart resumes them), up to a minute
        "startupProbe": _probe("/livez", 2, 30),
        "livenessProbe": _probe("/livez", 10, 3),
        "readinessProbe": _probe("/readyz", 5, 2),
        "resources": {kind: dict(values) for kind, values in RESOURCES.items()},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],  # noqa: S108 - a private emptyDir
    }
    pod = {
        "terminationGracePeriodSeconds": GRACE_PERIOD_S,
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": IMAGE_UID, "runAsGroup": IMAGE_UID,
                            "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": "64Mi"}}],
    }
    annotations = {"prometheus.io/scrape": "true", "prometheus.io/port": str(METRICS_PORT),
                   "prometheus.io/path": "/metrics"}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": _meta(options, "worker"),
        "spec": {
            "revisionHistoryLimit": 5,
            "selector": {"matchLabels": _labels(options)},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {"metadata": {"labels": _labels(options), "annotations": annotations}, "spec": pod},
        },
    }


def disruption_budget(options: Options) -> dict[str, Any]:
    """At most one worker evicted at a time (``maxUnavailable``: ``minAvailable: 1`` would
    block every node drain while one worker runs). Workers are stateless: an evicted worker's
    pending entries are reclaimed by the others."""
    return {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": _meta(options, "worker"),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": _labels(options)}}}


def metrics_service(options: Options) -> dict[str, Any]:
    """A ClusterIP Service on the workers' metrics port, for Prometheus to scrape."""
    return {"apiVersion": "v1", "kind": "Service", "metadata": _meta(options, "metrics"),
            "spec": {"type": "ClusterIP", "selector": _labels(options),
                     "ports": [{"name": "metrics", "port": METRICS_PORT, "targetPort": "metrics",
                                "protocol": "TCP"}]}}


def trigger_authentication(options: Options) -> dict[str, Any]:
    """KEDA's credentials for Redis: the ``scaler`` ACL user (XINFO GROUPS on the write streams only)."""
    refs = [{"parameter": p, "name": _secret_name(options, "scaler"), "key": p} for p in ("username", "password")]
    return {"apiVersion": "keda.sh/v1alpha1", "kind": "TriggerAuthentication",
            "metadata": _meta(options, "redis-scaler", "autoscaler"), "spec": {"secretTargetRef": refs}}


def scaled_object(options: Options) -> dict[str, Any]:
    """Workers scaled on the consumer group's backlog summed over the partitions (module docstring)."""
    names = [f"p{p}" for p in range(options.keys.partitions)]
    where = {"addresses": options.redis_address} if options.cluster else {"address": options.redis_address}
    triggers = [{
        "type": "redis-cluster-streams" if options.cluster else "redis-streams",
        "name": name,
        "authenticationRef": {"name": f"{options.name}-redis-scaler"},
        "metadata": where | {"stream": options.keys.writes(p), "consumerGroup": GROUP,
                             "lagCount": str(options.lag_per_replica), "activationLagCount": "0"},
    } for p, name in enumerate(names)]
    return {
        "apiVersion": "keda.sh/v1alpha1", "kind": "ScaledObject", "metadata": _meta(options, "worker", "autoscaler"),
        "spec": {
            "scaleTargetRef": {"name": f"{options.name}-worker"},
            "pollingInterval": 15,
            "cooldownPeriod": 300,
            "minReplicaCount": options.min_replicas,
            "maxReplicaCount": options.max_replicas,
            "advanced": {
                # one worker at a time, once a minute: each stop gives its batch the grace period
                "horizontalPodAutoscalerConfig": {"behavior": {"scaleDown": {
                    "stabilizationWindowSeconds": 300,
                    "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}]}}},
                "scalingModifiers": {"formula": " + ".join(names), "target": str(options.lag_per_replica),
                                     "activationTarget": "0", "metricType": "AverageValue"},
            },
            "triggers": triggers,
        },
    }


def manifests(options: Options) -> dict[str, list[dict[str, Any]]]:
    """Per file (:data:`FILES`), its objects."""
    return {
        "secret.yaml": [secret(options, "worker"), secret(options, "scaler")],
        "deployment.yaml": [deployment(options)],
        "pdb.yaml": [disruption_budget(options)],
        "service.yaml": [metrics_service(options)],
        "keda.yaml": [trigger_authentication(options), scaled_object(options)],
    }


def render(options: Options, objects: list[dict[str, Any]]) -> str:
    """YAML documents, headed by the command that made them."""
    header = f"# Generated by `{command_line(options)}`: regenerate, do not edit.\n"
    body = yaml.safe_dump_all(objects, sort_keys=False, explicit_start=True, width=120)
    return header + str(body)
