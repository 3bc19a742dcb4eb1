"""``wm-signals mcp --transport stdio`` as a process: standard output carries protocol frames and nothing else.

The test speaks raw JSON-RPC lines (the 2025 handshake, a tool call, a subscription), writes
through the CLI in another process, waits for the notification frame, then closes stdin:
every line the process wrote to stdout must be a JSON-RPC message, while its log events
(``mcp.serving``, ``mcp.written``) are on stderr. Then the SDK's own stdio client runs the
2026 generation against a fresh process.
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from typing import Any

import anyio
import pytest
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream
from mcp import Client, StdioServerParameters

from signals.streams.keys import Keys
from tests.e2e.mcp_support import ROOT, cli, wm_argv
from tests.integration.helpers import spawn_worker, wait_ready
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]


async def _send(proc: Process, message: dict[str, Any]) -> None:
    assert proc.stdin is not None
    await proc.stdin.send((json.dumps(message) + "\n").encode())


async def _until(lines: BufferedByteReceiveStream, seen: list[bytes], test: Any) -> dict[str, Any]:
    with anyio.fail_after(30):
        while True:
            line = await lines.receive_until(b"\n", 1 << 20)
            seen.append(line)
            message = json.loads(line)
            if test(message):
                return dict(message)


async def test_stdio_writes_only_protocol_frames(redis_server: RedisServer, keys: Keys) -> None:
    """Handshake, tools, a subscription and its notification over stdio; stdout holds JSON-RPC lines only."""
    url = redis_server.url
    worker = spawn_worker(url, keys, "w-stdio")
    env = {**os.environ, "WM_SIGNALS_LOG_LEVEL": "debug", "WM_SIGNALS_LOG_FORMAT": "json"}  # every event logs
    seen: list[bytes] = []
    try:
        await wait_ready(worker)
        async with await anyio.open_process(wm_argv(url, keys, "mcp", "--resource", "alice"), cwd=ROOT,
                                            env=env) as proc:
            assert proc.stdout is not None and proc.stderr is not None
            lines = BufferedByteReceiveStream(proc.stdout)
            await _send(proc, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
            init = await _until(lines, seen, lambda m: m.get("id") == 1)
            assert init["result"]["capabilities"]["resources"]["subscribe"] is True
            await _send(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
            await _send(proc, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
                "name": "set_working_memory", "arguments": {"memory": "# Alice via stdio"}}})
            done = await _until(lines, seen, lambda m: m.get("id") == 2)
            assert done["result"]["structuredContent"]["version"] == 1
            await _send(proc, {"jsonrpc": "2.0", "id": 3, "method": "resources/subscribe",
                               "params": {"uri": "wm://resource/alice"}})
            await _until(lines, seen, lambda m: m.get("id") == 3)
            code, _, err = await cli(url, keys, "write", "--resource", "alice", "--markdown", "# Alice via CLI")
            assert code == 0, err
            note = await _until(lines, seen, lambda m: m.get("method") == "notifications/resources/updated")
            assert note["params"]["uri"] == "wm://resource/alice"
            await _send(proc, {"jsonrpc": "2.0", "id": 4, "method": "resources/read",
                               "params": {"uri": "wm://resource/alice"}})
            read = await _until(lines, seen, lambda m: m.get("id") == 4)
            assert read["result"]["contents"][0]["text"].endswith("# Alice via CLI</working-memory>")
            await proc.stdin.aclose()  # type: ignore[union-attr]
            with anyio.fail_after(20):
                rest = b"".join([chunk async for chunk in proc.stdout])
                stderr = b"".join([chunk async for chunk in proc.stderr]).decode()
                assert await proc.wait() == 0, stderr
    finally:
        worker.terminate()
        worker.wait(10)
    frames = seen + [line for line in rest.split(b"\n") if line]
    for frame in frames:
        assert json.loads(frame)["jsonrpc"] == "2.0", frame
    assert all(event in stderr for event in ("mcp.serving", "mcp.written", "mcp.subscribed", "mcp.notified")), \
        "log events go to stderr"


async def test_the_sdk_stdio_client_speaks_2026_to_the_process(redis_server: RedisServer) -> None:
    """The SDK's stdio client (auto: the 2026 generation) lists, writes and reads through a server process."""
    keys = Keys(namespace="s" + uuid.uuid4().hex[:10], partitions=4)
    argv = wm_argv(redis_server.url, keys, "mcp", "--resource", "dana", "--thread", "chat-1")
    params = StdioServerParameters(command=sys.executable, args=argv[1:], cwd=str(ROOT), env=dict(os.environ))
    async with Client(params) as client:
        assert client.protocol_version == "2026-07-28"
        assert len((await client.list_tools()).tools) == 3
        done = await client.call_tool("set_working_memory", {"memory": "# chat plan"})
        assert done.structured_content is not None and done.structured_content["lane"] == "t:chat-1"
        read = await client.read_resource("wm://thread/chat-1")
        assert read.contents[0].text.endswith("# chat plan</working-memory>")  # type: ignore[union-attr]


@pytest.mark.parametrize(("args", "needle"), [
    (["mcp"], "needs --resource"),
    (["mcp", "--transport", "http", "--tokens-file", "/nonexistent/tokens.json"], "--tokens-file"),
    (["mcp", "--resource", "a{b}"], "resource id"),
])
async def test_bad_flags_are_one_line_and_exit_2(redis_server: RedisServer, keys: Keys, args: list[str],
                                                 needle: str) -> None:
    """A combination that cannot run is refused before serving: exit 2, one line on stderr, nothing on stdout."""
    proc = await anyio.run_process(wm_argv(redis_server.url, keys, *args), cwd=ROOT, check=False)
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert len(err.strip().splitlines()) == 1 and needle in err, err
    assert proc.stdout == b""
