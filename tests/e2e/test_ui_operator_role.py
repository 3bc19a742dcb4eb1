"""``wm-signals ui`` runs as the generated ``operator`` ACL user (the least privilege that serves
it): every page, the search, a live page's first event, and a dead-letter drop in operator mode;
the thread page checks the delivery log's chains (XINFO STREAM included) as that user, with the
signing key and the verification keys of a rotation, as ``replay --deliveries`` does."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote

import anyio
import pytest

from signals.agent import AgentWorkingMemory
from signals.core.signing import Signer
from signals.streams.client import connect
from signals.streams.keys import Keys
from signals.streams.store import WorkingMemoryStore
from tests.browser.scenario import scripted_run
from tests.integration.helpers import running_workers, wait_caught_up
from tests.ports import free_port
from tests.trust_boundary.narrowed_acl import ADMIN, PASSWORDS, start_server
from workers.runtime.embedded import RedisServer

pytestmark = pytest.mark.redis
ROOT = Path(__file__).parents[2]
KEYS = Keys("wm", 4)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A redis-server with the generated users of namespace ``wm`` and an admin for the test."""
    srv = start_server(tmp_path_factory.mktemp("acl"), KEYS)
    yield srv
    srv.stop()


async def _fill(port: int) -> None:
    url = f"redis://admin:{ADMIN}@127.0.0.1:{port}/0"
    redis = connect(url)
    try:
        async with running_workers(url, KEYS):
            await scripted_run(redis, KEYS, "ada", "chat-1", turns=8, window=6)
            await redis.xadd(KEYS.writes(0), {"e": "junk"})
            await wait_caught_up(redis, KEYS)
            with anyio.fail_after(30):
                while not await redis.xlen(KEYS.dead_letters(0)):
                    await anyio.sleep(0.05)
    finally:
        await redis.aclose()


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return int(response.status), response.read().decode()
    except urllib.error.HTTPError as e:
        return int(e.code), e.read().decode()


def _serve(port: int, *flags: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """``wm-signals ui`` as the operator user, once it answers."""
    ui_port = free_port()
    operator = f"redis://wm-operator:{PASSWORDS['operator']}@127.0.0.1:{port}/0"
    proc = subprocess.Popen([sys.executable, "-m", "workers", "ui", "--redis-url", operator, "--namespace", "wm",
                             "--partitions", "4", "--port", str(ui_port), *flags], cwd=ROOT,
                            env={**os.environ, **(env or {})}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{ui_port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            _get(base + "/static/ui.css")
        except urllib.error.URLError:
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
        else:
            return proc, base


def test_every_page_works_as_the_operator_user(server: RedisServer) -> None:
    """Overview, search, lane, diff, thread, dead letters, a live page, a drop: no NOPERM anywhere."""
    anyio.run(_fill, server.port)
    proc, base = _serve(server.port, "--operator")
    try:
        assert 'data-integrity="whole"' in _get(base + "/thread?id=chat-1")[1]  # the log's check, as the operator
        for path in ("/", "/search?q=chat-1", f"/lane?id={quote('r:ada')}", f"/diff?id={quote('r:ada')}&a=1&b=2",
                     "/thread?id=chat-1", "/deadletters"):
            status, body = _get(base + path)
            assert status == 200, (path, body[:500])
            assert "NOPERM" not in body and "may not" not in body, path
        dead_id = re.findall(r'data-id="([0-9]+-[0-9]+)"', _get(base + "/deadletters")[1])[0]
        status, page = _get(f"{base}/deadletter?id={dead_id}&partition=0&confirm=drop")
        assert status == 200, page[:500]
        csrf = re.findall(r'name="csrf" value="([^"]+)"', page)[0]
        form = f"id={dead_id}&partition=0&confirm=yes&csrf={csrf}".encode()
        request = urllib.request.Request(f"{base}/deadletter/drop", data=form, headers={
            "Content-Type": "application/x-www-form-urlencoded", "Origin": base})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert f"dead letter {dead_id} dropped" in response.read().decode()
        assert dead_id not in _get(base + "/deadletters")[1]
        with urllib.request.urlopen(f"{base}/live/lane?id={quote('r:ada')}&after=0-0",
                                    timeout=30) as response:
            assert response.headers["content-type"].startswith("text/event-stream")
            lines = [response.readline()]
            while lines[-1] and not lines[-1].startswith(b"event: signals"):
                lines.append(response.readline())
            assert lines[-1].startswith(b"event: signals"), lines  # an empty line: the stream ended
    finally:
        proc.terminate()
        proc.wait(10)


OLD_KEY, NEW_KEY = "an-old-signing-key-of-32-bytes!!", "a-new-signing-key-of-32-bytes!!!"


async def _signed_log(port: int) -> None:
    """Workers and an agent loop signing with the key a rotation is retiring: the thread's log is chained with it."""
    url = f"redis://admin:{ADMIN}@127.0.0.1:{port}/0"
    redis = connect(url)
    try:
        async with running_workers(url, KEYS, signing_key=OLD_KEY):
            agent = AgentWorkingMemory(redis, KEYS, resource_id="cy", thread_id="signed-1",
                                       signer=Signer(OLD_KEY.encode()))
            await WorkingMemoryStore(redis, keys=KEYS).replace("cy", "# Cy\n- tea")
            await wait_caught_up(redis, KEYS)
            assert (await agent.before_model_call(set())).add
    finally:
        await redis.aclose()


def test_the_thread_page_checks_chains_with_the_verification_keys(server: RedisServer) -> None:
    """During a rotation (another signing key, the retiring one a verification key) a log the
    agents chained with the retiring key is whole on the thread page, as ``replay`` finds it."""
    anyio.run(_signed_log, server.port)
    proc, base = _serve(server.port, env={"WM_SIGNALS_SIGNING_KEY": NEW_KEY,
                                          "WM_SIGNALS_VERIFY_KEYS": f'["{OLD_KEY}"]'})
    try:
        status, body = _get(base + "/thread?id=signed-1")
        assert status == 200, body[:500]
        assert 'data-integrity="whole"' in body, re.findall(r"<li>[^<]*</li>", body)
    finally:
        proc.terminate()
        proc.wait(10)


async def _big_entries(port: int) -> None:
    """Three entries of 600 KB in a thread's log (any agent user may append them)."""
    redis = connect(f"redis://admin:{ADMIN}@127.0.0.1:{port}/0")
    try:
        for _ in range(3):
            await redis.xadd(KEYS.deliveries("big-1"), {"x": "y" * 600_000})
    finally:
        await redis.aclose()


def test_the_ui_reads_redis_under_the_reply_bound(server: RedisServer) -> None:
    """``wm-signals ui`` opens its client bounded by ``max_reply_bytes``, as a worker does: a
    log of entries larger than the bound is not read into the process; the page says so."""
    anyio.run(_big_entries, server.port)
    proc, base = _serve(server.port, env={"WM_SIGNALS_MAX_REPLY_BYTES": str(1 << 20)})
    try:
        status, body = _get(base + "/thread?id=big-1")
        assert status == 200, body[:500]
        assert "the calls cannot be shown: a reply from Redis over 1,048,576 bytes" in body
    finally:
        proc.terminate()
        proc.wait(10)
