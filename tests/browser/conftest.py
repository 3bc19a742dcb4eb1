"""Fixtures of the browser tests: Debian's chromium driven through its chromedriver (Selenium),
a real redis-server (the suite's), a real worker process, the scripted agent loop, and the
UI served by ``wm-signals ui`` in its own process.

Chromium is never downloaded: the tests use ``/usr/bin/chromium`` and ``/usr/bin/chromedriver``
and fail, saying how to install them, when they are missing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from signals import Keys, connect
from signals.core.codec import encode_json
from signals.core.models import WriteEvent
from signals.streams.history import first_signal
from signals.streams.progress import wait_caught_up
from tests.browser.scenario import scripted_run
from tests.integration.helpers import spawn_worker, wait_ready
from tests.ports import free_port
from workers.runtime.embedded import RedisServer

ROOT = Path(__file__).parents[2]
CHROMIUM = os.environ.get("WM_SIGNALS_CHROMIUM", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("WM_SIGNALS_CHROMEDRIVER", "/usr/bin/chromedriver")
CHROME_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run", "--window-size=1400,1000")
#: The worker keeps few signals, so that lanes show where their retained history starts.
RETAIN_SIGNALS = 2
SNAPSHOT_EVERY = 2


def _need_chromium() -> None:
    missing = [path for path in (CHROMIUM, CHROMEDRIVER) if not shutil.which(path)]
    if missing:
        pytest.fail(f"the browser tests need Debian's chromium and its driver ({', '.join(missing)} missing): "
                    "apt-get install -y chromium chromium-driver", pytrace=False)
    try:
        import selenium  # noqa: F401, PLC0415
    except ImportError:
        pytest.fail("the browser tests need selenium (the dev extra: pip install -e '.[dev]')", pytrace=False)


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """A headless chromium (Debian's) with its console and network logs on."""
    _need_chromium()
    from selenium import webdriver  # noqa: PLC0415
    from selenium.webdriver.chrome.service import Service  # noqa: PLC0415

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()




@dataclass
class UiServer:
    """A ``wm-signals ui`` process: its base URL (always a loopback one) and its log (the request log)."""

    proc: subprocess.Popen[bytes]
    url: str
    log_path: Path

    def log(self) -> str:
        """What the server printed so far (uvicorn's access log among it)."""
        return self.log_path.read_text(errors="replace")

    def stop(self) -> None:
        """SIGTERM, then wait (kill after 10 s)."""
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)


def start_ui(redis_url: str, keys: Keys, *flags: str, token: str | None = None) -> UiServer:
    """Start ``wm-signals ui`` and wait until it answers."""
    port = free_port()
    log = tempfile.NamedTemporaryFile(prefix="wm-ui-", suffix=".log", delete=False)  # noqa: SIM115
    args = [sys.executable, "-m", "workers", "ui", "--redis-url", redis_url, "--namespace", keys.namespace,
            "--partitions", str(keys.partitions), "--port", str(port), "--page", "6", *flags]
    env = {**os.environ, "WM_SIGNALS_RETAIN_SIGNALS": str(RETAIN_SIGNALS)}
    proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    server = UiServer(proc, f"http://127.0.0.1:{port}", Path(log.name))
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            raise AssertionError(f"wm-signals ui exited with {proc.returncode}: {server.log()[-2000:]}")
        request = urllib.request.Request(server.url + "/static/ui.css")
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=2):
                return server
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            if time.monotonic() > deadline:
                server.stop()
                raise AssertionError(f"wm-signals ui did not answer in 30 s: {server.log()[-2000:]}") from None
            time.sleep(0.1)


@dataclass
class Pipeline:
    """A namespace that a real worker process and the scripted agent loop filled."""

    url: str
    keys: Keys
    resource: str
    thread: str
    worker: subprocess.Popen[bytes]

    @property
    def lane(self) -> str:
        """The resource lane the loop reads and writes."""
        return "r:" + self.resource


async def _fill(url: str, keys: Keys, resource: str, thread: str) -> None:
    redis = connect(url)
    try:
        await scripted_run(redis, keys, resource, thread, turns=20, window=6)
        # a poison event: the worker dead-letters it at once, so the pages have one to show
        await redis.xadd(keys.writes(0), {"e": "{not json"})
        # and a well-formed event of a lane with no document: poison too, but one an operator may requeue
        ghost = "r:ghost-" + resource
        event = WriteEvent(lane=ghost, scope="resource", format="markdown", version=1, data="x", op="replace",
                           resource_id=ghost[2:])
        await redis.xadd(keys.writes(keys.partition(ghost)), {"e": encode_json(event)})
        await wait_caught_up(redis, keys)
        with anyio.fail_after(30):  # the dead letters, and the lane's retention at work
            while sum([await redis.xlen(keys.dead_letters(p)) for p in range(keys.partitions)]) < 2 or \
                    (await first_signal(redis, keys, "r:" + resource)).signal.version == 1:  # type: ignore[union-attr]
                await anyio.sleep(0.05)
    finally:
        await redis.aclose()


async def _heartbeat_written(url: str, keys: Keys, instance: str) -> None:
    """Wait for the worker's first heartbeat: its monitor task writes it beside the read loop,
    so "ready" can come first on a loaded host, and the overview counts live heartbeats."""
    redis = connect(url)
    try:
        with anyio.fail_after(30):
            while not await redis.exists(keys.heartbeat(instance)):
                await anyio.sleep(0.05)
    finally:
        await redis.aclose()


@pytest.fixture(scope="module")
def pipeline(redis_server: RedisServer) -> Iterator[Pipeline]:
    """A worker process (few signals retained) and one scripted run of the agent loop."""
    keys = Keys(namespace="ui" + uuid.uuid4().hex[:8], partitions=4)
    worker = spawn_worker(redis_server.url, keys, "ui-worker", retain_signals=RETAIN_SIGNALS,
                          snapshot_every=SNAPSHOT_EVERY)
    try:
        anyio.run(wait_ready, worker)
        anyio.run(_heartbeat_written, redis_server.url, keys, "ui-worker")
        run = uuid.uuid4().hex[:6]
        pipeline = Pipeline(redis_server.url, keys, f"ada-{run}", f"chat-{run}", worker)
        anyio.run(_fill, redis_server.url, keys, pipeline.resource, pipeline.thread)
        yield pipeline
    finally:
        worker.terminate()
        worker.wait(20)


@pytest.fixture(scope="module")
def ui(pipeline: Pipeline) -> Iterator[UiServer]:
    """The UI over the pipeline's namespace, read-only, on loopback."""
    server = start_ui(pipeline.url, pipeline.keys)
    try:
        yield server
    finally:
        server.stop()


def browser_logs(driver: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """The console entries and the URLs of the requests the page made since the last call."""
    import json  # noqa: PLC0415

    console = driver.get_log("browser")
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message.get("method") == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return console, urls


def console_problems(console: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The console's errors and warnings, less a live page's event stream cut when the browser
    left the page (the only error a navigation away from a live page makes)."""
    return [e for e in console if e["level"] in ("SEVERE", "WARNING")
            and not ("/live/" in e["message"] and "ERR_INCOMPLETE_CHUNKED_ENCODING" in e["message"])]


def screenshot(driver: Any, name: str) -> Path:
    """Write the page's screenshot to docs/img/<name>.png (used by docs/ui.md)."""
    path = ROOT / "docs" / "img" / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    height = int(driver.execute_script("return document.documentElement.scrollHeight"))
    driver.set_window_size(1400, min(max(height, 600), 2400))
    try:
        driver.save_screenshot(str(path))
    finally:
        driver.set_window_size(1400, 1000)
    return path
