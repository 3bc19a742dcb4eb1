"""Write -> MCP notification latency beside write -> subscriber for the same writes, and
MCP tool-call time beside a bare Redis round trip.

One redis-server, one ``wm-signals worker`` process and one ``wm-signals mcp --transport
http`` process on loopback. The bench process writes (the store's own ``replace``) at a
steady rate, round-robin over T threads of one resource (each thread sees one write every
T / rate seconds, so no two writes of a lane coalesce into one notification), stamping the
send time. For the same writes it records three arrivals: the library's subscriber
(:class:`~signals.streams.subscribe.Subscription`, one tail per thread lane: the agent-loop
path and the baseline), a 2025 MCP client subscribed to every thread URI
(``resources/subscribe``, over the session's GET stream), and a 2026 MCP client listening
to all of them (``subscriptions/listen``). The MCP path is: the server's own XREAD of the
signal streams, the notification over HTTP, the client's SSE parse. The difference of
medians is what the MCP server adds to the subscriber path (target: under 2 ms at p50).

Tool calls: ``get_working_memory`` and ``set_working_memory`` through the 2025 client
over HTTP, N each, and through the SDK's in-process client (the server's own cost, no
transport), beside N ``PING`` round trips of the library's redis.asyncio client
(the floor of any call that touches Redis). A warm-up pass (one write per thread, and
some calls) is not measured.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
import warnings
from pathlib import Path
from typing import Any

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import ResourceUpdatedNotification

from signals.streams.client import connect
from signals.streams.keys import Keys
from signals.streams.store import WorkingMemoryStore
from signals.streams.subscribe import Subscription
from workers.mcp.uris import uri_of
from workers.runtime.embedded import RedisServer
from workers.runtime.logging import configure_logging

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "bench-token-0123456789abcdef"
TARGET_ADDED_P50_MS = 2.0


def _port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _spawn(argv: list[str]) -> subprocess.Popen[bytes]:
    env = {**os.environ, "WM_SIGNALS_LOG_LEVEL": "warning"}
    return subprocess.Popen([sys.executable, "-m", "workers", *argv], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def _listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    with anyio.fail_after(60):
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the mcp server exited with {proc.returncode}")
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.05)
            else:
                await stream.aclose()
                return


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


def _summary(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50": _pct(values, 0.5), "p99": _pct(values, 0.99)}


async def _measure(url: str, keys: Keys, port: int, *, rate: float, seconds: float, threads: int,
                   calls: int) -> dict[str, Any]:
    redis = connect(url)
    store = WorkingMemoryStore(redis, keys=keys)
    names = [f"t{i}" for i in range(threads)]
    for name in names:
        await store.create_thread(name, "bench")
    sent: dict[tuple[str, int], float] = {}  # (thread, version) -> send time
    arrived: dict[str, dict[tuple[str, int], float]] = {"subscriber": {}, "mcp 2025": {}, "mcp 2026": {}}
    pending: dict[str, dict[str, list[int]]] = {"mcp 2025": {n: [] for n in names}, "mcp 2026": {n: [] for n in names}}
    thread_of = {uri_of("thread", n): n for n in names}

    def mcp_arrival(path: str, uri: str, at: float) -> None:
        thread = thread_of.get(uri)
        if thread is not None and pending[path][thread]:
            arrived[path][(thread, pending[path][thread].pop(0))] = at

    async def on_message(message: Any) -> None:
        if isinstance(message, ResourceUpdatedNotification):
            mcp_arrival("mcp 2025", message.params.uri, time.perf_counter())

    async def tail(name: str) -> None:
        sub = Subscription(redis, keys, f"t:{name}", block_ms=1000)
        async for item in sub:
            arrived["subscriber"][(name, item.signal.version)] = time.perf_counter()

    headers = {"Authorization": f"Bearer {TOKEN}"}
    endpoint = f"http://127.0.0.1:{port}/mcp"
    async with (httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as h1,
                httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as h2,
                Client(streamable_http_client(endpoint, http_client=h1), mode="legacy",
                       message_handler=on_message) as old,
                Client(streamable_http_client(endpoint, http_client=h2)) as new,
                anyio.create_task_group() as tg):
        for name in names:
            with warnings.catch_warnings():  # the SDK warns that 2026 removed it: the 2025 call is the point
                warnings.simplefilter("ignore")
                await old.session.subscribe_resource(uri_of("thread", name))
            tg.start_soon(tail, name)
        async with new.listen(resource_subscriptions=[uri_of("thread", n) for n in names]) as sub:
            async def listen() -> None:
                async for event in sub:
                    mcp_arrival("mcp 2026", getattr(event, "uri", ""), time.perf_counter())

            tg.start_soon(listen)

            async def write(name: str, text: str) -> None:
                version = await store.replace("bench", text, thread_id=name, scope="thread")
                for path in pending:
                    pending[path][name].append(version)
                sent[(name, version)] = started

            # warm-up: one write per thread, every path delivering it, not measured
            for name in names:
                started = time.perf_counter()
                await write(name, f"# {name}\n- warm-up")
            with anyio.move_on_after(20):
                while any(len(a) < threads for a in arrived.values()):
                    await anyio.sleep(0.01)
            sent.clear()
            for a in arrived.values():
                a.clear()

            total = int(rate * seconds)
            begin = time.perf_counter() + 0.05
            for i in range(total):
                due = begin + i / rate
                await anyio.sleep(max(0.0, due - time.perf_counter()))
                name = names[i % threads]
                started = time.perf_counter()
                await write(name, f"# {name}\n- write {i}")
            with anyio.move_on_after(20):
                while any(len(a) < len(sent) for a in arrived.values()):
                    await anyio.sleep(0.01)

            tools: dict[str, list[float]] = {"get_working_memory": [], "set_working_memory": [], "redis PING": []}
            tools.update(await _in_process(store, calls))
            for i in range(calls + 20):
                t0 = time.perf_counter()
                await old.call_tool("get_working_memory", {})
                t1 = time.perf_counter()
                await old.call_tool("set_working_memory", {"memory": f"# bench\n- call {i}"})
                t2 = time.perf_counter()
                await redis.ping()
                t3 = time.perf_counter()
                if i >= 20:
                    tools["get_working_memory"].append((t1 - t0) * 1000)
                    tools["set_working_memory"].append((t2 - t1) * 1000)
                    tools["redis PING"].append((t3 - t2) * 1000)
            tg.cancel_scope.cancel()
    await redis.aclose()
    latency = {path: _summary([(at - sent[key]) * 1000 for key, at in got.items() if key in sent])
               for path, got in arrived.items()}
    return {"writes": len(sent), "rate": rate, "threads": threads, "latency": latency,
            "tools": {name: _summary(v) for name, v in tools.items()}}


async def _in_process(store: WorkingMemoryStore, calls: int) -> dict[str, list[float]]:
    """The same calls through the SDK's in-process client: the server's own cost, no HTTP."""
    from workers.mcp.access import Caller  # noqa: PLC0415
    from workers.mcp.server import build_server  # noqa: PLC0415

    out: dict[str, list[float]] = {"get_working_memory (in-process)": [], "set_working_memory (in-process)": []}
    async with Client(build_server(store, caller=Caller("bench"))) as client:
        for i in range(calls + 20):
            t0 = time.perf_counter()
            await client.call_tool("get_working_memory", {})
            t1 = time.perf_counter()
            await client.call_tool("set_working_memory", {"memory": f"# bench\n- in-process {i}"})
            t2 = time.perf_counter()
            if i >= 20:
                out["get_working_memory (in-process)"].append((t1 - t0) * 1000)
                out["set_working_memory (in-process)"].append((t2 - t1) * 1000)
    return out


def run(rate: float = 50.0, seconds: float = 10.0, threads: int = 50, calls: int = 300) -> dict[str, Any]:
    """Start Redis, a worker and an MCP server; measure; stop them."""
    configure_logging("console", "warning")  # the in-process server's events must not interleave with the table
    keys = Keys(namespace="bm" + uuid.uuid4().hex[:8], partitions=16)
    with RedisServer() as server, tempfile.TemporaryDirectory() as tmp:
        tokens = Path(tmp) / "tokens.json"
        tokens.write_text(json.dumps({TOKEN: "bench"}))
        common = ["--redis-url", server.url, "--namespace", keys.namespace, "--partitions", str(keys.partitions)]
        port = _port()
        worker = _spawn(["worker", *common])
        mcp = _spawn(["mcp", "--transport", "http", "--port", str(port), "--tokens-file", str(tokens), *common])
        try:
            anyio.run(_listening, port, mcp)
            result = anyio.run(lambda: _measure(server.url, keys, port, rate=rate, seconds=seconds,
                                                threads=threads, calls=calls))
        finally:
            for proc in (mcp, worker):
                proc.terminate()
                proc.wait(15)
    sub, old, new = (result["latency"][p]["p50"] for p in ("subscriber", "mcp 2025", "mcp 2026"))
    result["added_p50_ms"] = {"mcp 2025": old - sub, "mcp 2026": new - sub}
    return result


def table(r: dict[str, Any]) -> list[str]:
    """Markdown lines for BENCHMARKS.md."""
    lines = [f"{r['writes']} writes at {r['rate']:g}/s over {r['threads']} thread lanes of one resource "
             "(one worker process, one MCP server process over HTTP):", "",
             "| path | received | p50 ms | p99 ms | p50 added to the subscriber's |", "|---|---:|---:|---:|---:|"]
    base = r["latency"]["subscriber"]["p50"]
    for path, s in r["latency"].items():
        added = "baseline" if path == "subscriber" else f"{s['p50'] - base:+.2f} ms"
        lines.append(f"| write -> {path} | {s['n']} | {s['p50']:.2f} | {s['p99']:.2f} | {added} |")
    lines += ["", "| call | n | p50 ms | p99 ms | p50 ratio to PING |", "|---|---:|---:|---:|---:|"]
    ping = r["tools"]["redis PING"]["p50"]
    for name, s in r["tools"].items():
        lines.append(f"| {name} | {s['n']} | {s['p50']:.2f} | {s['p99']:.2f} | {s['p50'] / ping:.1f}x |")
    worst = max(r["added_p50_ms"].values())
    lines += ["", f"Target: the MCP path adds < {TARGET_ADDED_P50_MS:g} ms p50 to the subscriber path "
                  f"(here: {worst:+.2f} ms, {'met' if worst < TARGET_ADDED_P50_MS else 'NOT met'})."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rate", type=float, default=50.0, help="writes per second")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=50, help="thread lanes written round-robin (at most 64)")
    parser.add_argument("--calls", type=int, default=300, help="tool calls of each kind")
    args = parser.parse_args()
    result = run(args.rate, args.seconds, args.threads, args.calls)
    print("\n".join(table(result)))


if __name__ == "__main__":
    main()
