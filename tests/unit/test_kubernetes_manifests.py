"""``wm-signals deploy kubernetes``: the manifests validate offline, follow the key layout, and
``deploy/kubernetes/`` is the generator's output for the defaults.

Kubernetes objects are checked against the schemas ``kubernetes-validate`` ships (strict:
unknown fields fail) for a pinned Kubernetes version; KEDA's objects, custom resources
absent from those schemas, against :mod:`tests.unit.keda_schema` (KEDA's documented fields).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml
from redis.connection import parse_url

from signals.errors import InvalidInputError
from signals.streams.acl import ROLES, acl_users, user_name
from signals.streams.keys import GROUP, Keys
from tests.unit.keda_schema import KEDA_SCHEMAS
from workers.deploy import kubernetes
from workers.deploy.kubernetes import FILES, Options, manifests, render
from workers.runtime.settings import Settings

ROOT = Path(__file__).parents[2]
COMMITTED = ROOT / "deploy" / "kubernetes"
#: The Kubernetes version the manifests are validated for (policy/v1 PDBs, autoscaling/v2: >= 1.23).
K8S_VERSION = "1.30"

VARIANTS = [
    Options(Keys()),
    Options(Keys("acme.prod", 5), name="acme", k8s_namespace="tenants", image="registry.example/wm:1.2",
            redis_address="redis.tenants.svc:6380", min_replicas=0, max_replicas=3, lag_per_replica=500),
    Options(Keys("wm", 8), cluster=True, redis_address="redis-0.redis:6379,redis-1.redis:6379,redis-2.redis:6379"),
]


def _objects(options: Options) -> list[dict[str, Any]]:
    return [obj for objects in manifests(options).values() for obj in objects]


def _by_kind(options: Options) -> dict[str, dict[str, Any]]:
    return {obj["kind"]: obj for obj in _objects(options)}


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workers", "deploy", "kubernetes", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=60, check=False)


def test_committed_files_are_the_generated_ones() -> None:
    """deploy/kubernetes/ holds exactly the generator's files for the defaults, byte for byte:
    regenerate with ``wm-signals deploy kubernetes -o deploy/kubernetes`` after a change."""
    options = Options(Keys())
    assert sorted(p.name for p in COMMITTED.iterdir()) == sorted(FILES)
    for name, objects in manifests(options).items():
        assert (COMMITTED / name).read_text() == render(options, objects), name


@pytest.mark.parametrize("options", VARIANTS, ids=["defaults", "tenant", "cluster"])
def test_kubernetes_objects_validate_against_the_schemas(options: Options) -> None:
    """Every core object (Secret, Deployment, PodDisruptionBudget, Service), as rendered and
    parsed back, is valid for the pinned Kubernetes version in strict mode; the KEDA objects
    are valid against KEDA's documented fields."""
    seen = set()
    for name, objects in manifests(options).items():
        parsed = list(yaml.safe_load_all(render(options, objects)))
        assert parsed == objects, name  # the YAML says what the dicts say
        for obj in parsed:
            seen.add(obj["kind"])
            if obj["kind"] in KEDA_SCHEMAS:
                jsonschema.validate(obj, KEDA_SCHEMAS[obj["kind"]])
            else:
                assert kubernetes_validate.validate(obj, K8S_VERSION, strict=True) == K8S_VERSION
    assert seen == {"Secret", "Deployment", "PodDisruptionBudget", "Service", "TriggerAuthentication", "ScaledObject"}


def test_the_validators_refuse_a_wrong_manifest() -> None:
    """The schemas bite: a misspelt field fails each validator (so the test above can fail)."""
    kinds = _by_kind(Options(Keys()))
    deployment = kinds["Deployment"]
    deployment["spec"]["template"]["spec"]["terminationGracePeriod"] = 30
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSION, strict=True)
    scaled = kinds["ScaledObject"]
    scaled["spec"]["triggers"][0]["metadata"]["lagcount"] = "5"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(scaled, KEDA_SCHEMAS["ScaledObject"])


@pytest.mark.parametrize(("namespace", "partitions"), [("wm", 16), ("acme.prod", 5), ("x", 1)])
def test_scaled_object_watches_the_key_layout(namespace: str, partitions: int) -> None:
    """One lag-mode trigger per partition, on exactly the layout's write streams and the
    workers' consumer group; the composite formula sums every trigger once."""
    keys = Keys(namespace, partitions)
    spec = _by_kind(Options(keys))["ScaledObject"]["spec"]
    triggers = spec["triggers"]
    assert [t["metadata"]["stream"] for t in triggers] == keys.all_writes()
    assert {t["metadata"]["consumerGroup"] for t in triggers} == {GROUP}
    assert all(t["type"] == "redis-streams" and "lagCount" in t["metadata"] for t in triggers)
    names = [t["name"] for t in triggers]
    assert len(set(names)) == partitions
    assert sorted(re.findall(r"\w+", spec["advanced"]["scalingModifiers"]["formula"])) == sorted(names)
    assert spec["advanced"]["scalingModifiers"]["formula"].count("+") == partitions - 1


@pytest.mark.parametrize("options", VARIANTS, ids=["defaults", "tenant", "cluster"])
def test_objects_refer_to_each_other(options: Options) -> None:
    """Selectors match the pod labels, the ScaledObject targets the Deployment, every Secret key
    referred to exists, and the users in the Secret are the ACL users of the namespace."""
    kinds = _by_kind(options)
    deployment = kinds["Deployment"]
    secrets = {obj["metadata"]["name"]: obj["stringData"] for obj in _objects(options) if obj["kind"] == "Secret"}
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"] == labels
    assert kinds["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"] == labels
    assert kinds["Service"]["spec"]["selector"] == labels
    assert kinds["ScaledObject"]["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    auth = kinds["TriggerAuthentication"]
    assert {t["authenticationRef"]["name"] for t in kinds["ScaledObject"]["spec"]["triggers"]} == {
        auth["metadata"]["name"]}
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    pod_refs = [e["valueFrom"]["secretKeyRef"] for e in env if "valueFrom" in e]
    keda_refs = auth["spec"]["secretTargetRef"]
    for refs, role in ((pod_refs, "worker"), (keda_refs, "scaler")):  # each reads only its own user's Secret
        assert {r["name"] for r in refs} == {f"{options.name}-redis-{role}"}
        assert {r["key"] for r in refs} == {"username", "password"} <= set(secrets[refs[0]["name"]])
        assert secrets[refs[0]["name"]]["username"] == user_name(options.keys, role)
    users = acl_users(options.keys, dict.fromkeys(ROLES, "x"))
    assert {s["username"] for s in secrets.values()} <= set(users)
    assert all(obj["metadata"].get("namespace") == options.k8s_namespace for obj in kinds.values())


def _rss_mb_from_benchmarks() -> float:
    """The largest worker RSS in BENCHMARKS.md's "Worker memory (RSS)" table."""
    text = (ROOT / "BENCHMARKS.md").read_text()
    section = text.split("## Worker memory (RSS)", 1)
    assert len(section) == 2, "BENCHMARKS.md has no 'Worker memory (RSS)' section: size the pods from it"
    rows = re.findall(r"^\|\s*[\d,]+\s*\|\s*([\d.]+)\s*\|", section[1].split("\n## ", 1)[0], re.MULTILINE)
    assert rows, "no RSS rows"
    return max(float(r) for r in rows)


def test_the_worker_pod_fits_the_worker() -> None:
    """Probes on the health endpoints of the metrics port; the grace period is above the worker's
    ``grace_s``; the memory request covers the benchmark's largest RSS (MB) and the limit
    leaves room above it; the settings a worker needs come from the namespace's layout."""
    options = Options(Keys("acme", 12))
    pod = _by_kind(options)["Deployment"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert pod["terminationGracePeriodSeconds"] > Settings().grace_s + 5
    assert container["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "metrics"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert container["ports"] == [{"name": "metrics", "containerPort": 9464, "protocol": "TCP"}]
    mib = {k: int(v["memory"].removesuffix("Mi")) for k, v in container["resources"].items()}
    rss_mib = _rss_mb_from_benchmarks() * 1e6 / 2**20
    assert mib["requests"] >= rss_mib and mib["limits"] >= 2 * rss_mib
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["WM_SIGNALS_NAMESPACE"] == "acme" and env["WM_SIGNALS_PARTITIONS"] == "12"
    assert env["WM_SIGNALS_METRICS_PORT"] == "9464"
    assert env["WM_SIGNALS_REDIS_URL"] == "redis://$(WM_REDIS_USERNAME):$(WM_REDIS_PASSWORD)@redis:6379/0"
    assert pod["securityContext"]["runAsNonRoot"] and container["securityContext"]["readOnlyRootFilesystem"]
    version = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    assert version and Options(Keys()).image == f"wm-signals:{version.group(1)}"  # the default image is this release
    dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
    assert f"USER {kubernetes.IMAGE_UID}:{kubernetes.IMAGE_UID}" in dockerfile


def test_cluster_mode_uses_the_cluster_scaler_and_the_cluster_client() -> None:
    """``--cluster``: KEDA's redis-cluster-streams trigger with every node, the worker in cluster mode."""
    options = VARIANTS[2]
    kinds = _by_kind(options)
    triggers = kinds["ScaledObject"]["spec"]["triggers"]
    assert {t["type"] for t in triggers} == {"redis-cluster-streams"}
    assert {t["metadata"]["addresses"] for t in triggers} == {options.redis_address}
    env = {e["name"]: e.get("value") for e in kinds["Deployment"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["WM_SIGNALS_CLUSTER"] == "true" and env["WM_SIGNALS_REDIS_URL"].endswith("@redis-0.redis:6379/0")


def test_command_prints_and_writes_the_manifests(tmp_path: Path) -> None:
    """Without ``-o`` one YAML stream of every object; with ``-o DIR`` the files of deploy/kubernetes."""
    proc = _cli("--namespace", "acme", "--partitions", "3", "--k8s-namespace", "tenants")
    assert proc.returncode == 0, proc.stderr
    options = Options(Keys("acme", 3), k8s_namespace="tenants")
    assert proc.stdout == render(options, _objects(options))
    assert "--namespace acme --partitions 3 --k8s-namespace tenants" in proc.stdout.splitlines()[0]
    proc = _cli("-o", str(tmp_path / "out"))
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr
    for name in FILES:
        assert (tmp_path / "out" / name).read_text() == (COMMITTED / name).read_text()


@pytest.mark.parametrize(("overrides", "needle"), [
    ({"name": "Bad_Name"}, "--name 'Bad_Name'"),
    ({"k8s_namespace": "a.b"}, "--k8s-namespace 'a.b'"),
    ({"min_replicas": 3, "max_replicas": 2}, "--min-replicas (3)"),
    ({"max_replicas": 0, "min_replicas": 0}, "--max-replicas >= 1"),
    ({"redis_address": "redis"}, "--redis-address 'redis'"),
    ({"redis_address": "redis:70000"}, "port 1-65535"),
    ({"redis_address": "a:1,b:2"}, "several addresses need --cluster"),
    ({"redis_address": "a:1,,b:2", "cluster": True}, "--redis-address ''"),
    ({"lag_per_replica": 0}, "--lag-per-replica 0"),
    ({"image": "has space"}, "--image"),
])
def test_bad_options_are_refused_naming_them(overrides: dict[str, Any], needle: str) -> None:
    """Settings Kubernetes or KEDA would refuse are an InvalidInputError naming the flag."""
    with pytest.raises(InvalidInputError) as caught:
        Options(Keys(), **overrides)
    assert needle in str(caught.value)


def test_bad_input_is_exit_2_naming_it() -> None:
    """The command: exit 2, one line on stderr naming what is wrong, nothing printed."""
    proc = _cli("--namespace", "wm", "--partitions", "0")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr == "wm-signals: partitions must be between 1 and 4096\n"


def test_output_onto_a_file_is_refused(tmp_path: Path) -> None:
    """``-o`` naming a file: exit 2, the file untouched."""
    target = tmp_path / "file"
    target.write_text("keep")
    proc = _cli("-o", str(target))
    assert proc.returncode == 2 and "not a directory" in proc.stderr and target.read_text() == "keep"


def test_a_namespace_with_a_colon_gets_a_url_its_worker_can_log_in_with() -> None:
    """Namespace ``a:b`` (valid) has the worker user ``a:b-worker``; in the URL template a ``:``
    ends the user name, so the worker logged in as ``a`` with password ``b-worker:<pw>`` and
    was refused. The name is percent-encoded into the URL, as redis-py decodes it."""
    [container] = kubernetes.deployment(Options(Keys("a:b", 4)))["spec"]["template"]["spec"]["containers"]
    url = {e["name"]: e.get("value") for e in container["env"]}["WM_SIGNALS_REDIS_URL"]
    parsed = parse_url(url.replace("$(WM_REDIS_PASSWORD)", "pw"))
    assert (parsed["username"], parsed["password"]) == ("a:b-worker", "pw")
