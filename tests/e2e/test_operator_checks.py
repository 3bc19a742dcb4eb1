"""An operator's checks of the worker and the CLI, as a user meets them.

``wm_signals_up`` stayed 1 while the worker backed off from an unreachable Redis, so the
alerts built on it (``WmSignalsNoWorkerReading``, ``WmSignalsWorkerNotReading``) never
fired for the outage they describe. ``/readyz`` said ``ok`` while Redis was out of memory:
every readiness check is a read, which Redis still answers, while it refused every commit.
Worker settings accepted values they could not honour: a log level that is not one (exit 1,
``unexpected error (KeyError)``), an infinite heartbeat TTL (``OverflowError``), one Redis
refuses (no heartbeat was ever written: ``worker --check`` failed for a healthy worker), a
``claim_idle_ms`` past XAUTOCLAIM's range (the worker crashed two seconds after starting).
``replay --from/--to`` selecting no retained signal printed nothing, exit 0, which reads as a
lane without history (``--at`` a version not retained is exit 2 naming the retained range).
A command the ACL refused said only ``Redis: this user has no permissions ...``: ``replay
--verify`` as the reader (the README says to run it as the operator) did not say which role.
``deploy acl -o`` and ``deploy kubernetes -o`` on a path they cannot write were exit 1 with a
bare ``[Errno 2]`` line; ``export -o`` names the flag, exit 2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from signals.streams.acl import ROLES, acl_file
from signals.streams.client import connect
from signals.streams.keys import Keys
from signals.streams.scripts import ensure_loaded
from signals.streams.store import WorkingMemoryStore
from tests.e2e.test_debugging_empty_lanes import wm
from tests.integration.helpers import running_workers, wait_caught_up
from tests.integration.test_ops import _http, _metrics, _ready, _spawn, _until
from tests.ports import free_port
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


async def test_up_reads_zero_while_the_worker_cannot_reach_redis(tmp_path: Path, keys: Keys) -> None:
    """``wm_signals_up`` is 0 while the read loop backs off from a Redis that is gone, and
    1 again once it reads: the alerts on it fire for exactly that outage."""
    server = RedisServer(data_dir=str(tmp_path)).start()
    port = free_port()
    proc = _spawn(server.url, keys, "--metrics-port", str(port), "--consumer-name", "up-probe")

    async def up(value: float) -> bool:
        return (await _metrics(port))["wm_signals_up"] == value

    try:
        await _ready(proc, port)
        assert await up(1.0)
        await anyio.to_thread.run_sync(server.kill)
        await _until("wm_signals_up 0 while Redis is gone", lambda: up(0.0))
        await anyio.to_thread.run_sync(server.start)
        await _until("wm_signals_up 1 once the worker reads again", lambda: up(1.0))
    finally:
        proc.kill()
        proc.wait()
        server.stop()


async def test_readyz_fails_while_redis_is_out_of_memory(keys: Keys) -> None:
    """Past ``maxmemory`` Redis answers the readiness check's reads but refuses the commits
    (OOM): ``/readyz`` is 503 saying so, and 200 again once memory is freed."""
    server = RedisServer().start()
    admin = connect(server.url)
    port = free_port()
    proc = _spawn(server.url, keys, "--metrics-port", str(port), "--consumer-name", "oom-probe")

    async def unready() -> str | None:
        status, body = await _http(port, "/readyz")
        return body if status == 503 else None

    try:
        await _ready(proc, port)
        await admin.config_set("maxmemory", "1")  # below what the server already holds
        assert "refuses work" in await _until("/readyz 503 while Redis is out of memory", unready)
        await admin.config_set("maxmemory", "0")
        await _ready(proc, port)
    finally:
        proc.kill()
        proc.wait()
        await admin.aclose()
        server.stop()


@pytest.mark.parametrize(("variable", "value", "setting"), [
    ("WM_SIGNALS_LOG_LEVEL", "verbose", "log_level"),
    ("WM_SIGNALS_HEARTBEAT_TTL_S", "inf", "heartbeat_ttl_s"),
    ("WM_SIGNALS_HEARTBEAT_TTL_S", "1e30", "heartbeat_ttl_s"),
    ("WM_SIGNALS_GRACE_S", "inf", "grace_s"),
    ("WM_SIGNALS_RECONNECT_TIMEOUT_S", "inf", "reconnect_timeout_s"),
    ("WM_SIGNALS_CLAIM_IDLE_MS", "99999999999999999999", "claim_idle_ms"),
    # finite, but past what the --processes supervisor can wait for a child (OverflowError at the stop)
    ("WM_SIGNALS_GRACE_S", "2200000", "grace_s"),
])
def test_a_worker_setting_it_cannot_honour_is_refused(redis_server: RedisServer, keys: Keys, variable: str,
                                                      value: str, setting: str) -> None:
    """Refused at start (exit 2, one line naming the setting), before anything runs."""
    env = {**os.environ, variable: value}
    proc = subprocess.run([sys.executable, "-m", "workers", "worker", "--check", "--redis-url", redis_server.url,
                           "--namespace", keys.namespace, "--consumer-name", "settings-probe"],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and len(lines) == 1, (proc.returncode, proc.stderr)
    assert lines[0].startswith("wm-signals: invalid setting") and setting in lines[0], lines[0]


def test_a_variable_that_names_no_setting_is_warned_of(redis_server: RedisServer, keys: Keys) -> None:
    """``WM_SIGNALS_IDEMPOTENCY_TTL_S`` (a library parameter) or a misspelt setting was
    ignored without a word, so the setting kept its default: each is named in a warning;
    settings, in any case, and the CLI's own switch are not."""
    env = {**os.environ, "WM_SIGNALS_IDEMPOTENCY_TTL_S": "60", "WM_SIGNALS_RETAIN_SIGNAL": "5",
           "wm_signals_block_ms": "50", "WM_SIGNALS_TRACEBACK": ""}
    proc = subprocess.run([sys.executable, "-m", "workers", "get", "--resource", "nobody", "--redis-url",
                           redis_server.url, "--namespace", keys.namespace],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    warned = sorted(json.loads(line)["variable"] for line in proc.stderr.splitlines()
                    if "settings.unknown_variable" in line)
    assert warned == ["WM_SIGNALS_IDEMPOTENCY_TTL_S", "WM_SIGNALS_RETAIN_SIGNAL"], proc.stderr


def test_a_log_level_is_taken_in_any_case(redis_server: RedisServer, keys: Keys) -> None:
    """``WARNING`` is the level ``warning``: the check runs (no live worker of that name: exit 1)."""
    env = {**os.environ, "WM_SIGNALS_LOG_LEVEL": "WARNING"}
    proc = subprocess.run([sys.executable, "-m", "workers", "worker", "--check", "--redis-url", redis_server.url,
                           "--namespace", keys.namespace, "--consumer-name", "nobody-here"],
                          env=env, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 1 and "no live worker 'nobody-here'" in proc.stderr, proc.stderr


async def test_replay_range_with_no_retained_signal_says_so(redis_server: RedisServer, redis: Redis,
                                                           keys: Keys) -> None:
    """A range past the lane's history is exit 2, one line giving the retained versions and
    times; a range that holds signals still prints them."""
    store = WorkingMemoryStore(redis, keys=keys)
    async with running_workers(redis_server.url, keys, 1):
        await store.replace("rng", "# Notes\n- one")
        await store.replace("rng", "# Notes\n- two")
        await wait_caught_up(redis, keys)
    for bound in (("--from", "9"), ("--to", "2001-01-01T00:00:00"), ("--from", "3", "--json")):
        code, out, err = await wm(redis_server.url, keys, "replay", "--resource", "rng", *bound)
        lines = err.splitlines()
        assert code == 2 and out == "" and len(lines) == 1, (code, out, err)
        assert f"no retained signal in {bound[0]} {bound[1]}" in lines[0], lines[0]
        assert "signal versions 1..2" in lines[0], lines[0]
    code, out, err = await wm(redis_server.url, keys, "replay", "--resource", "rng", "--from", "2", "--json")
    assert code == 0 and [json.loads(line)["version"] for line in out.splitlines()] == [2], (code, out, err)


async def test_a_command_the_acl_refuses_names_the_role_it_needs(tmp_path: Path) -> None:
    """Exit 1, one line naming the command and the role to run it as."""
    keys = Keys("wm", 4)
    path = tmp_path / "users.acl"
    path.write_text(acl_file(keys, {role: f"{role}-pw" for role in ROLES}))
    server = RedisServer(extra=["--aclfile", str(path)]).start()
    writer = connect(f"redis://wm-writer:writer-pw@127.0.0.1:{server.port}/0")
    operator = connect(f"redis://wm-operator:operator-pw@127.0.0.1:{server.port}/0")
    reader = f"redis://wm-reader:reader-pw@127.0.0.1:{server.port}/0"
    try:
        await ensure_loaded(operator)  # the project's functions, as a worker or `deploy functions` loads them
        await WorkingMemoryStore(writer, keys=keys).replace("acl1", "# Notes\n- one")
        for args, role in ((("replay", "--resource", "acl1", "--verify"), "operator role"),
                           (("inspect",), "operator role"),
                           (("write", "--resource", "acl1", "--markdown", "x"), "writer or agent role")):
            code, _, err = await wm(reader, keys, *args)
            lines = err.splitlines()
            assert code == 1 and len(lines) == 1, (code, err)
            assert f"may not do what '{args[0]}' needs" in lines[0] and role in lines[0], lines[0]
        writer_url = f"redis://wm-writer:writer-pw@127.0.0.1:{server.port}/0"
        code, _, err = await wm(writer_url, keys, "replay", "--resource", "acl1", "--thread", "t1", "--deliveries")
        assert code == 1 and "reader, agent or operator" in err, err  # not "--verify reads the tracking" alone
        code, _, err = await wm(writer_url, keys, "worker", "--check", "--consumer-name", "probe")
        assert code == 1 and "run the probe as the worker or operator role" in err, err  # it named no role
    finally:
        await writer.aclose()
        await operator.aclose()
        server.stop()


def test_deploy_output_it_cannot_write_is_bad_input(tmp_path: Path) -> None:
    """Exit 2, one line naming ``-o`` and the path; no password is printed for a file not written."""
    (tmp_path / "a-file").write_text("")
    for args in (("acl", "--namespace", "wm", "-o", str(tmp_path / "missing" / "users.acl")),
                 ("kubernetes", "-o", str(tmp_path / "a-file" / "k8s"))):
        proc = subprocess.run([sys.executable, "-m", "workers", "deploy", *args], capture_output=True, text=True,
                              timeout=60, check=False)
        lines = proc.stderr.splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and proc.stdout == "", (proc.returncode, proc.stderr)
        assert lines[0].startswith(f"wm-signals: -o {args[-1]}: "), lines[0]
