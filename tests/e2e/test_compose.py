"""deploy/compose.yaml: it parses, and every command in it runs, as a process, against a real
redis-server started from the Redis service's own command with the ACL file it mounts.

No container runs here (no Docker engine): each service's command runs on this host with
what the container would have, and only these substitutions, all stated in :func:`_localize`:
mounted files are their sources in deploy/; the service name ``redis`` (port 6379) is the
test's server on a free loopback port; listening addresses are 127.0.0.1 (tests never bind
anything else), metrics ports are free ones; ``wm-signals`` is ``python -m workers``. Compose's
``${VAR:-default}`` interpolation is done with an empty environment: the dev defaults.

The worker healthcheck (``worker --check``) and the metrics endpoint are run as well.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from redis import exceptions as redis_exc
from redis.asyncio import Redis

from signals.streams.client import connect
from signals.streams.keys import GROUP, Keys
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import check_lane, wait_caught_up
from tests.ports import free_port
from workers.deploy import kubernetes
from workers.runtime.embedded import find_redis_server
from workers.runtime.settings import Settings

pytestmark = [pytest.mark.anyio, pytest.mark.redis]
ROOT = Path(__file__).parents[2]
DEPLOY = ROOT / "deploy"
COMPOSE: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
SERVICES: dict[str, Any] = COMPOSE["services"]
KEYS = Keys("wm", 16)
_VAR = re.compile(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$")


def _interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's variable interpolation: ``${VAR}``, ``${VAR:-default}`` and ``$$`` (a ``$``)."""
    def one(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        if match.group(1) is None:
            raise AssertionError(f"unsupported interpolation in {value!r}")
        return env.get(match.group(1)) or (match.group(2) or "")
    return _VAR.sub(one, value)


class Stack:
    """The services' commands with the substitutions of the module docstring."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.port = free_port()
        self.metrics_ports: dict[str, int] = {}

    def _localize(self, text: str) -> str:
        text = text.replace("@redis:6379/", f"@127.0.0.1:{self.port}/").replace("-p 6379", f"-p {self.port}")
        return text.replace("0.0.0.0", "127.0.0.1")

    def env(self, service: str) -> dict[str, str]:
        """The service's environment, interpolated and localized, on top of this process's."""
        env = {k: self._localize(_interpolate(str(v), {})) for k, v in SERVICES[service].get("environment", {}).items()}
        if "WM_SIGNALS_METRICS_PORT" in env:
            env["WM_SIGNALS_METRICS_PORT"] = str(self.metrics_ports.setdefault(service, free_port()))
        return {**os.environ, **env}

    def argv(self, service: str, command: list[str]) -> list[str]:
        """A command of the service as this host runs it, behind the image's entrypoint
        (ours, built from deploy/Dockerfile: ``wm-signals``; Redis's runs its command as given)."""
        entry = SERVICES[service].get("entrypoint", ["wm-signals"] if "build" in SERVICES[service] else [])
        return self._program([*entry, *command])

    def _program(self, args: list[str]) -> list[str]:
        args = [self._localize(_interpolate(a, {})) for a in args]
        if args[0] == "wm-signals":
            return [sys.executable, "-m", "workers", *args[1:]]
        if args[0] == "python":
            return [sys.executable, *args[1:]]
        if args[0] == "redis-server":
            return [find_redis_server(), *args[1:]]
        raise AssertionError(f"unexpected program {args[0]!r}")

    def redis_argv(self) -> list[str]:
        """The Redis service's command: its mounts resolved to their sources, a private port and dir."""
        mounts = {}
        for volume in SERVICES["redis"]["volumes"]:
            source, target = _interpolate(volume, {}).split(":")[:2]
            if source.startswith("./"):
                copy = self.tmp / Path(source).name  # a copy: the server may not write deploy/
                copy.write_text((DEPLOY / source).read_text())
                mounts[target] = str(copy)
        argv = self.argv("redis", SERVICES["redis"]["command"])
        conf = mounts[argv[1]]
        text = Path(conf).read_text()
        Path(conf).write_text(text.replace("aclfile /etc/redis/users.acl", f"aclfile {mounts['/etc/redis/users.acl']}"))
        return [argv[0], conf, *argv[2:], "--port", str(self.port), "--dir", str(self.tmp), "--daemonize", "no"]

    def healthcheck(self, service: str, **env: str) -> subprocess.CompletedProcess[str]:
        """Run the service's healthcheck command once."""
        test = SERVICES[service]["healthcheck"]["test"]
        if test[0] == "CMD-SHELL":
            argv = ["sh", "-c", self._localize(_interpolate(test[1], {}))]
        else:
            assert test[0] == "CMD"
            argv = self._program(test[1:])
        return subprocess.run(argv, env={**self.env(service), **env}, cwd=ROOT, capture_output=True, text=True,
                              timeout=60, check=False)

    def url(self, role: str) -> str:
        return f"redis://wm-{role}:{role}-secret@127.0.0.1:{self.port}/0"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Redis, started from the compose file's Redis service; healthy when its healthcheck passes."""
    stack = Stack(tmp_path_factory.mktemp("compose"))
    log = (stack.tmp / "redis.log").open("w")
    proc = subprocess.Popen(stack.redis_argv(), stdout=log, stderr=subprocess.STDOUT)
    try:
        for _ in range(200):
            if stack.healthcheck("redis").returncode == 0:
                break
            assert proc.poll() is None, (stack.tmp / "redis.log").read_text()[-2000:]
            time.sleep(0.05)
        else:
            raise AssertionError("the Redis service never became healthy")
        yield stack
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


@pytest.fixture(scope="module")
def workers(stack: Stack) -> Iterator[dict[str, subprocess.Popen[bytes]]]:
    """Both worker services, each its command in its own process."""
    procs = {}
    for name in ("worker-1", "worker-2"):
        log = (stack.tmp / f"{name}.log").open("w")
        procs[name] = subprocess.Popen(stack.argv(name, SERVICES[name]["command"]), env=stack.env(name), cwd=ROOT,
                                       stdout=log, stderr=subprocess.STDOUT)
        log.close()
    deadline = time.monotonic() + 60  # as compose's depends_on: the workers are up (their functions loaded)
    while not all("worker.ready" in (stack.tmp / f"{name}.log").read_text() for name in procs):
        assert time.monotonic() < deadline, "the workers did not start within 60 s"
        assert all(proc.poll() is None for proc in procs.values()), "a worker exited"
        time.sleep(0.1)
    yield procs
    for proc in procs.values():
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


@pytest.fixture
async def operator(stack: Stack) -> AsyncIterator[Redis]:
    client = connect(stack.url("operator"))
    yield client  # type: ignore[misc]
    await client.aclose()


def _spawn(argv: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def _consumers(operator: Redis, stream: str) -> set[str]:
    try:
        return {c["name"] for c in await operator.xinfo_consumers(stream, GROUP)}
    except redis_exc.ResponseError as e:  # no stream or no group yet
        assert "NOGROUP" in str(e) or "no such key" in str(e), e
        return set()


async def _until_consumers(operator: Redis, count: int, procs: list[subprocess.Popen[bytes]]) -> set[str]:
    with anyio.fail_after(60):
        while len(names := await _consumers(operator, KEYS.writes(0))) < count:
            assert all(p.poll() is None for p in procs), [p.returncode for p in procs]
            await anyio.sleep(0.1)
    return names


# -- the file ---------------------------------------------------------------------------


def test_compose_file_wires_the_services() -> None:
    """Redis, two workers, the agent loop; healthchecks on Redis and the workers; everyone waits
    for what it needs to be healthy; the workers get the grace period of their graceful stop;
    the image is built from deploy/Dockerfile with the repository as context."""
    assert set(SERVICES) == {"redis", "worker-1", "worker-2", "agent"}
    for name in ("worker-1", "worker-2", "agent"):
        service = SERVICES[name]
        assert service["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
        assert (DEPLOY / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
    for name in ("worker-1", "worker-2"):
        service = SERVICES[name]
        assert service["depends_on"] == {"redis": {"condition": "service_healthy"}}
        assert service["stop_signal"] == "SIGTERM" and service["stop_grace_period"] == "30s"
        assert int(service["stop_grace_period"].removesuffix("s")) >= Settings().grace_s + 10
        assert service["healthcheck"]["test"][:4] == ["CMD", "wm-signals", "worker", "--check"]
        assert service["environment"]["WM_SIGNALS_METRICS_PORT"] == str(kubernetes.METRICS_PORT)
    assert SERVICES["agent"]["depends_on"] == {w: {"condition": "service_healthy"} for w in ("worker-1", "worker-2")}
    assert "redis-cli" in SERVICES["redis"]["healthcheck"]["test"][1]
    assert "STOPSIGNAL SIGTERM" in (DEPLOY / "Dockerfile").read_text()


def test_passwords_come_from_the_environment() -> None:
    """Every password in the file is a variable whose default is a test placeholder of
    deploy/users.acl (``<role>-secret``); set, the variable wins."""
    text = (DEPLOY / "compose.yaml").read_text()
    secrets = re.findall(r"\$\{(WM_[A-Z]+_PASSWORD):-([^}]*)\}", text)
    assert {var for var, _ in secrets} == {"WM_WORKER_PASSWORD", "WM_AGENT_PASSWORD", "WM_SCALER_PASSWORD"}
    assert all(default == var.split("_")[1].lower() + "-secret" for var, default in secrets)
    config = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    assert config.count("-secret") == len(secrets)  # no literal password outside a variable's default
    assert _interpolate("redis://u:${WM_WORKER_PASSWORD:-worker-secret}@h", {"WM_WORKER_PASSWORD": "s3"}) == \
        "redis://u:s3@h"


# -- the commands -----------------------------------------------------------------------


def test_redis_service_healthcheck(stack: Stack) -> None:
    """The Redis service's command loaded redis.conf and the ACL file (the default user is off);
    its healthcheck passes with the scaler's password and fails with another."""
    assert stack.healthcheck("redis").returncode == 0
    assert stack.healthcheck("redis", REDISCLI_AUTH="wrong").returncode != 0
    proc = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", str(stack.port), "ping"], capture_output=True,
                          text=True, timeout=30, check=False)
    assert "NOAUTH" in proc.stdout + proc.stderr


def test_worker_healthcheck_fails_without_a_worker(stack: Stack) -> None:
    """Before any worker ran, the workers' healthcheck exits 1 with one line saying why."""
    proc = stack.healthcheck("worker-1")
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr


async def test_worker_services_start_and_consume(stack: Stack, workers: dict[str, subprocess.Popen[bytes]],
                                                 operator: Redis) -> None:
    """Both worker commands join the consumer group on every partition, as the wm-worker user,
    and turn the writer's writes into signals."""
    names = await _until_consumers(operator, 2, list(workers.values()))
    assert len(names) == 2
    writer = connect(stack.url("writer"))
    store = WorkingMemoryStore(writer, keys=KEYS)
    for i in range(20):
        await store.replace(f"compose-{i}", f"# User {i}\n- likes tea")
        await store.replace(f"compose-{i}", f"# User {i}\n- likes coffee")
    await wait_caught_up(operator, KEYS)
    for i in range(20):
        assert [s.mode for s in await check_lane(operator, KEYS, f"r:compose-{i}")][-1] in ("delta", "snapshot")
    for stream in KEYS.all_writes():
        assert await _consumers(operator, stream) == names
    await writer.aclose()


def test_worker_healthcheck_passes_with_live_workers(stack: Stack, workers: dict[str, subprocess.Popen[bytes]]) -> None:
    """With the workers running, the workers' healthcheck exits 0 (within the service's
    start_period: the heartbeat is written by the monitor's first tick after start, which
    on a loaded host came after this check; compose retries its healthcheck likewise)."""
    deadline = time.monotonic() + 20
    while (proc := stack.healthcheck("worker-2")).returncode != 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("path", ["/livez", "/readyz", "/metrics"])
def test_worker_metrics_endpoint(stack: Stack, workers: dict[str, subprocess.Popen[bytes]], path: str) -> None:
    """Each worker serves its health and metrics on the port the compose file gives it.

    A worker is ready once its monitor has checked Redis (one ``health_interval_s`` tick
    after start; a probe's ``initialDelaySeconds`` covers that), so the probe is retried
    for a bounded time, as Kubernetes and compose retry theirs; ``wm_signals_up`` reads 0
    while a process's last publish is stale (a loaded host can delay one), so the scrape
    is retried the same way until it reads 1."""
    for name in workers:
        url = f"http://127.0.0.1:{stack.metrics_ports[name]}{path}"
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url, timeout=10) as reply:
                    body = reply.read().decode()
                    status = reply.status
            except urllib.error.HTTPError as e:
                body, status = e.read().decode(), e.code
            up = path != "/metrics" or "wm_signals_up 1.0" in body  # 0 while a process's last publish is stale
            if (status == 200 and up) or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        assert status == 200, f"{name} {path}: {status} {body}"
        if path == "/metrics":
            assert "wm_signals_up 1.0" in body


def test_agent_service_runs_on_the_workers(stack: Stack, workers: dict[str, subprocess.Popen[bytes]]) -> None:
    """The agent service's command (the example agent loop as wm-agent, no worker of its own)
    runs to the end on the two workers: snapshot, re-injection after trimming, the model's writes."""
    service = SERVICES["agent"]
    proc = subprocess.run(stack.argv("agent", service["command"]), env=stack.env("agent"), cwd=ROOT,
                          capture_output=True, text=True, timeout=180, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    assert "snapshot (bootstrap)" in proc.stdout and "(reinject)" in proc.stdout
    assert "- **Location**: Paris" in proc.stdout and "patch=\"unified-diff\"" in proc.stdout  # the delta


async def test_kubernetes_worker_container_runs(stack: Stack, workers: dict[str, subprocess.Popen[bytes]],
                                                operator: Redis) -> None:
    """The Deployment's container (deploy/kubernetes: args and env, ``$(VAR)`` expanded as
    Kubernetes does, the Secret filled with the dev passwords) joins the group as a third worker."""
    files = kubernetes.manifests(kubernetes.Options(KEYS))
    [worker_secret, _] = files["secret.yaml"]
    secret = dict(worker_secret["stringData"], password="worker-secret")
    [container] = files["deployment.yaml"][0]["spec"]["template"]["spec"]["containers"]
    env: dict[str, str] = {}
    for var in container["env"]:
        value = secret[var["valueFrom"]["secretKeyRef"]["key"]] if "valueFrom" in var else var["value"]
        env[var["name"]] = stack._localize(re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)], value))
    env["WM_SIGNALS_METRICS_PORT"] = str(free_port())
    proc = _spawn([sys.executable, "-m", "workers", *container["args"]], {**os.environ, **env})
    try:
        assert len(await _until_consumers(operator, 3, [proc])) == 3
    finally:
        proc.send_signal(signal.SIGTERM)
        assert await anyio.to_thread.run_sync(proc.wait, 30) == 0


def test_workers_stop_gracefully_on_the_stop_signal(workers: dict[str, subprocess.Popen[bytes]]) -> None:
    """``stop_signal: SIGTERM``: each worker exits 0 well within ``stop_grace_period``."""
    for proc in workers.values():
        proc.send_signal(signal.SIGTERM)
    for proc in workers.values():
        assert proc.wait(30) == 0
