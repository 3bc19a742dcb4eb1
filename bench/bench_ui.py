"""``wm-signals ui``: a lane with 10,000 signals and a thread with 10,000 deliveries.

The lane's history is made with the worker's own numbering (``signals.core.lane.advance``,
compact policy, a snapshot every 20 signals, ~1 KB Markdown), with its snapshot list and
stored document; the thread's delivery log by the agent side's own tracker
(``signals.core.window.WindowTracker``) over those signals, one model call per signal,
the loop trimming its window every 100 calls (a re-injection), logged by ``DeliveryLog``;
and a second thread whose loop never trims (one chain of 10,000: a page reads back to its
one snapshot, the whole log: the worst case).
Then the real ``wm-signals ui`` serves them (its own process) and each page is timed:

* server time: the app's ``Server-Timing`` header (request in -> response out, read and render),
* time to first byte and the whole page, from an HTTP client on loopback,
* the rendered page, in headless chromium (navigation start -> load event), when Debian's
  chromium and selenium are installed,

each beside a baseline from the same run: the same pages for a lane with 10 signals and a
thread with 10 deliveries. Last, the server's RSS idle and with 10 live pages open
(server-sent event streams). Target: under 500 ms server time for the 10,000 pages.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio
import httpx
import psutil  # type: ignore[import-untyped]

from signals.core.codec import FIELD, encode_json
from signals.core.lane import LaneOptions, LaneTracking, advance
from signals.core.models import WriteEvent
from signals.core.window import WindowTracker
from signals.streams.client import connect
from signals.streams.deliveries import DeliveryLog
from signals.streams.keys import Keys
from signals.streams.replay import materialise, read_signals
from workers.runtime.embedded import RedisServer

ROOT = Path(__file__).parents[1]
TRIM_EVERY = 100


async def _lane(redis: Any, keys: Keys, name: str, count: int) -> None:
    """``count`` signals of lane ``r:<name>`` as the worker numbers them, with snapshots listed."""
    rng = random.Random(7)
    lines = [f"- fact {i:02d}: {rng.randint(0, 10**9)} remembered about the user" for i in range(22)]
    lane, tracking, version = f"r:{name}", LaneTracking(), 0
    options = LaneOptions(policy="compact", snapshot_every=20)
    event = None
    while tracking.version < count:
        async with redis.pipeline(transaction=False) as pipe:
            modes: list[str] = []
            while tracking.version < count and len(modes) < 500:
                lines[rng.randrange(len(lines))] = f"- fact changed {rng.randint(0, 10**9)}"
                version += 1
                event = WriteEvent(lane=lane, scope="resource", format="markdown", version=version,
                                   data="# Profile\n" + "\n".join(lines), op="replace", resource_id=name,
                                   written_at="2026-01-01T00:00:00.000Z")
                tracking, signal = advance(tracking, event, options, now="2026-01-01T00:00:00.000Z")
                if signal is not None:
                    pipe.xadd(keys.signals(lane), {FIELD: encode_json(signal)})
                    modes.append(signal.mode)
            ids = await pipe.execute()
        snapshots = [i for i, mode in zip(ids, modes, strict=True) if mode == "snapshot"]
        if snapshots:
            await redis.rpush(keys.snapshots(lane), *snapshots)
    assert event is not None
    await redis.hset(keys.doc(lane), mapping={"data": event.data, "version": version, "format": "markdown",
                                              "scope": "resource", "updatedAt": "2026-01-01T00:00:00.000Z"})
    await redis.hset(keys.track(lane), mapping={"wv": version})
    await redis.sadd(keys.lanes(keys.partition(lane)), lane)


async def _thread(redis: Any, keys: Keys, name: str, thread: str, trim_every: int | None = TRIM_EVERY) -> None:
    """One model call per signal of ``r:<name>``, logged: the agent side's tracker and log; the
    loop trims its window every ``trim_every`` calls (``None``: never, one chain of 10,000)."""
    lane = f"r:{name}"
    tracker = WindowTracker(lane)
    log = DeliveryLog(redis, keys, retention=100_000)
    held: list[str] = []
    for item in materialise(await read_signals(redis, keys, lane)):
        tracker.offer(item.signal, item.value)
        result = tracker.step(held)
        held = [m for m in held if m not in result.drop] + [inj.id for inj in result.add]
        await log.record(thread, lane, result)
        if trim_every and result.step % trim_every == 0:
            held = held[-1:]


async def _load(url: str, keys: Keys, count: int) -> None:
    redis = connect(url)
    try:
        for name, n in (("small", 10), ("long", count)):
            await _lane(redis, keys, name, n)
            await _thread(redis, keys, name, f"chat-{name}")
        await _thread(redis, keys, "long", "chat-untrimmed", None)
        await redis.hset(keys.config(), "partitions", keys.partitions)
    finally:
        await redis.aclose()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _time(client: httpx.Client, url: str) -> tuple[float, float, float]:
    """(server ms from Server-Timing, time to first byte ms, whole response ms)."""
    start = time.perf_counter()
    with client.stream("GET", url) as response:
        first = time.perf_counter()
        response.read()
        end = time.perf_counter()
    assert response.status_code == 200, (url, response.status_code)
    server = float(response.headers["server-timing"].split("dur=")[1])
    return server, (first - start) * 1000, (end - start) * 1000


def _rendered(base: str, paths: list[str], repeat: int) -> dict[str, float] | None:
    """Median navigation-start -> load-event ms per path in headless chromium (None: no chromium here)."""
    if not (shutil.which("/usr/bin/chromium") and shutil.which("/usr/bin/chromedriver")):
        return None
    try:
        from selenium import webdriver  # noqa: PLC0415
        from selenium.webdriver.chrome.service import Service  # noqa: PLC0415
    except ImportError:
        return None
    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)
    try:
        out = {}
        for path in paths:
            times = []
            for _ in range(repeat):
                driver.get(base + path)
                times.append(driver.execute_script(
                    "const t = performance.getEntriesByType('navigation')[0]; return t.loadEventEnd - t.startTime;"))
            out[path] = statistics.median(times)
            driver.get("about:blank")
        return out
    finally:
        driver.quit()


def _rss_with_live_pages(base: str, pid: int, lane: str, pages: int) -> tuple[float, float]:
    """The server's RSS (MiB) idle, and with ``pages`` live pages' event streams open."""
    process = psutil.Process(pid)
    idle = process.memory_info().rss / 2**20

    async def hold() -> float:
        async with httpx.AsyncClient(timeout=30) as client, anyio.create_task_group() as tg:
            opened = anyio.Event()
            count = 0

            async def one() -> None:
                nonlocal count
                async with client.stream("GET", f"{base}/live/lane?id={lane}") as response:
                    assert response.status_code == 200
                    async for _ in response.aiter_raw():
                        count += 1
                        if count >= pages:
                            opened.set()
                        await anyio.sleep_forever()
            for _ in range(pages):
                tg.start_soon(one)
            with anyio.fail_after(30):
                await opened.wait()
            await anyio.sleep(1)
            rss = float(process.memory_info().rss) / 2**20
            tg.cancel_scope.cancel()
        return rss

    return idle, anyio.run(hold)


def run(count: int = 10_000, repeat: int = 5, *, browser: bool = True) -> dict[str, Any]:
    """Load, serve, measure; figures of the long pages beside the small ones' (``browser``:
    the rendered page in chromium too, where it is installed)."""
    with RedisServer() as server:
        keys = Keys("benchui", 16)
        anyio.run(_load, server.url, keys, count)
        port = _free_port()
        proc = subprocess.Popen([sys.executable, "-m", "workers", "ui", "--redis-url", server.url, "--namespace",
                                 keys.namespace, "--partitions", "16", "--port", str(port)], cwd=ROOT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        base = f"http://127.0.0.1:{port}"
        try:
            with httpx.Client(timeout=60) as client:
                deadline = time.monotonic() + 30
                while True:
                    try:
                        client.get(base + "/static/ui.css")
                        break
                    except httpx.TransportError:
                        if time.monotonic() > deadline:
                            raise
                        time.sleep(0.1)
                pages = [("lane", "/lane?id=r:long", "/lane?id=r:small"),
                         ("thread", "/thread?id=chat-long", "/thread?id=chat-small"),
                         ("thread, window never trimmed", "/thread?id=chat-untrimmed", "/thread?id=chat-small")]
                rows = []
                for page, long_path, small_path in pages:
                    figures = {}
                    for size, path in (("small", small_path), ("long", long_path)):
                        _time(client, base + path)  # warm: templates compiled, connections open
                        runs = [_time(client, base + path) for _ in range(repeat)]
                        figures[size] = [statistics.median(r[i] for r in runs) for i in range(3)]
                    rows.append((page, long_path, figures))
            paths = [p for _, long_path, small_path in pages for p in (long_path, small_path)]
            rendered = _rendered(base, paths, repeat) if browser else None
            idle, live = _rss_with_live_pages(base, proc.pid, "r:long", 10)
        finally:
            proc.terminate()
            proc.wait(10)
    return {"count": count, "rows": rows, "rendered": rendered, "rss_idle": idle, "rss_live": live}


def table(result: dict[str, Any]) -> list[str]:
    """The Markdown table of a run."""
    n = result["count"]
    lines = [f"## wm-signals ui: a lane with {n:,} signals, a thread with {n:,} deliveries",
             "", "| page | server ms | TTFB ms | whole page ms | rendered in chromium ms | baseline (10) server ms | "
             "ratio |", "|---|---:|---:|---:|---:|---:|---:|"]
    rendered = result["rendered"] or {}
    for page, path, figures in result["rows"]:
        long, small = figures["long"], figures["small"]
        shown = f"{rendered[path]:.0f}" if path in rendered else "not measured (quick run, or no chromium)"
        lines.append(f"| {page} | {long[0]:.1f} | {long[1]:.1f} | {long[2]:.1f} | {shown} | {small[0]:.1f} | "
                     f"{long[0] / small[0]:.2f}x |")
    lines += ["", f"Server RSS: {result['rss_idle']:.1f} MiB idle, {result['rss_live']:.1f} MiB with 10 live lane "
              f"pages open (+{result['rss_live'] - result['rss_idle']:.1f} MiB). Target: under 500 ms server time "
              "for the 10,000 pages (a page shows 50 rows: the newest signals, or the newest model calls with "
              "their texts, diffs and verify badges)."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--count", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    for line in table(run(args.count, args.repeat)):
        print(line)


if __name__ == "__main__":
    main()
