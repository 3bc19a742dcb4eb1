"""``wm-signals mcp --transport http`` as processes: two replicas, a worker process, writes from the CLI.

Everything crosses process boundaries: the SDK's client over streamable HTTP with a
bearer token, the replicas sharing nothing but Redis, the worker and the CLI in their own
processes. A notification can only come from the lane's signal stream.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import ResourceUpdatedNotification

from signals.streams.keys import Keys
from tests.e2e.mcp_support import (
    ALICE,
    BOB,
    CAROL,
    cli,
    http_client,
    log_of,
    spawn_mcp_http,
    stop,
    tokens_file,
    wait_listening,
)
from tests.integration.helpers import spawn_worker, wait_ready
from tests.ports import free_port
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis,
              pytest.mark.filterwarnings("ignore:resources/(un)?subscribe is removed")]

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}}}


class Stack:
    """A worker process and two MCP replicas (a third in schema mode, for carol's JSON memory) on one namespace."""

    def __init__(self, url: str, keys: Keys, ports: list[int], procs: list[subprocess.Popen[bytes]]) -> None:
        self.url, self.keys, self.ports, self.procs = url, keys, ports, procs


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def stack(redis_server: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    keys = Keys(namespace="m" + uuid.uuid4().hex[:10], partitions=4)
    directory = tmp_path_factory.mktemp("mcp")
    tokens = tokens_file(directory)
    schema = directory / "schema.json"
    schema.write_text(json.dumps(SCHEMA))
    procs: list[subprocess.Popen[bytes]] = []
    try:
        worker = spawn_worker(redis_server.url, keys, "w0")
        procs.append(worker)
        ports = [free_port(), free_port(), free_port()]
        procs.append(spawn_mcp_http(redis_server.url, keys, ports[0], tokens))
        procs.append(spawn_mcp_http(redis_server.url, keys, ports[1], tokens))
        procs.append(spawn_mcp_http(redis_server.url, keys, ports[2], tokens, "--schema", str(schema)))

        async def ready() -> None:
            await wait_ready(worker)
            for proc, port in zip(procs[1:], ports, strict=True):
                await wait_listening(proc, port)

        anyio.run(ready)
        yield Stack(redis_server.url, keys, ports, procs[1:])
    finally:
        for proc in procs:
            stop(proc)


def _payload(result: Any) -> dict[str, Any]:
    return dict(result.structured_content)


async def _wait_for(messages: list[Any], uri: str, count: int = 1) -> None:
    with anyio.fail_after(15):
        while sum(isinstance(m, ResourceUpdatedNotification) and m.params.uri == uri for m in messages) < count:
            await anyio.sleep(0.02)


async def test_no_token_or_a_wrong_token_is_refused(stack: Stack) -> None:
    """Without a bearer token, or with one the tokens file does not hold: 401, before any MCP message is served."""
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    url = f"http://127.0.0.1:{stack.ports[0]}/mcp"
    async with httpx2.AsyncClient() as http:
        for auth in ({}, {"Authorization": "Bearer not-a-token-we-know-000"}, {"Authorization": "Basic YTpi"}):
            response = await http.post(url, json=body, headers={**headers, **auth})
            assert response.status_code == 401, (auth, response.status_code)
            assert response.json()["error"] == "invalid_token"
        response = await http.post(url, json=body, headers={**headers, "Authorization": f"Bearer {ALICE}"})
        assert response.status_code == 200
    refusals = [json.loads(line) for line in log_of(stack.procs[0]).splitlines() if '"mcp.refused"' in line]
    assert {r["reason"] for r in refusals} >= {"no bearer token", "a bearer token this server does not know"}
    assert not any("not-a-token-we-know" in line for line in log_of(stack.procs[0]).splitlines()), "no token logged"
    with pytest.raises(Exception):  # noqa: B017 - the SDK's client surfaces the 401 as its transport error
        async with http_client(stack.ports[0], "wrong-token-0000000000") as client:
            await client.list_tools()


async def test_tools_templates_set_and_read_over_http(stack: Stack) -> None:
    """Markdown over HTTP: tools and templates listed; set, read, conflict, empty-template guard."""
    async with http_client(stack.ports[0], ALICE) as client:
        assert sorted(t.name for t in (await client.list_tools()).tools) == [
            "get_working_memory", "get_working_memory_history", "set_working_memory"]
        assert len((await client.list_resource_templates()).resource_templates) == 4
        done = _payload(await client.call_tool("set_working_memory", {"memory": "# Alice over HTTP"}))
        read = await client.read_resource("wm://resource/alice")
        assert read.contents[0].text.endswith("# Alice over HTTP</working-memory>")  # type: ignore[union-attr]
        stale = await client.call_tool("set_working_memory", {"memory": "# x", "expected_version": done["version"] - 1})
        assert stale.is_error and _payload(stale)["kind"] == "conflict"
        wipe = await client.call_tool("set_working_memory", {"memory": "\n# User Information\n- **First Name**: \n"
                                      "- **Last Name**: \n- **Location**: \n- **Occupation**: \n- **Interests**: \n"
                                      "- **Goals**: \n- **Events**: \n- **Facts**: \n- **Projects**: \n"})
        assert wipe.is_error and "empty template" in _payload(wipe)["error"]


async def test_json_merge_and_schema_error_over_http(stack: Stack) -> None:
    """Schema mode (--schema) over HTTP: merges, null deletes, a schema failure names the field."""
    async with http_client(stack.ports[2], CAROL) as client:
        await client.call_tool("set_working_memory", {"memory": {"name": "Bob", "age": 40}})
        await client.call_tool("set_working_memory", {"memory": {"age": None}})
        read = _payload(await client.call_tool("get_working_memory", {}))
        assert json.loads(read["memory"]) == {"name": "Bob"}
        bad = await client.call_tool("set_working_memory", {"memory": {"age": "old"}})
        assert bad.is_error and _payload(bad)["fields"] == ["age"]


async def test_a_cli_write_reaches_both_generations_on_both_replicas(stack: Stack) -> None:
    """A 2025 subscriber on replica 1 and a 2026 listener on replica 2 are both told of a write made by the CLI,
    in another process; then a write through replica 2 reaches the subscriber on replica 1."""
    messages: list[Any] = []

    async def collect(message: Any) -> None:
        messages.append(message)

    async with (http_client(stack.ports[0], ALICE, message_handler=collect) as old,
                http_client(stack.ports[1], ALICE, mode="auto") as new):
        assert new.protocol_version == "2026-07-28" and old.protocol_version != new.protocol_version
        await old.subscribe_resource("wm://resource/alice")
        async with new.listen(resource_subscriptions=["wm://resource/alice"]) as sub:
            code, _, err = await cli(stack.url, stack.keys, "write", "--resource", "alice", "--markdown", "# from CLI")
            assert code == 0, err
            await _wait_for(messages, "wm://resource/alice")
            with anyio.fail_after(15):
                event = await sub.__anext__()
            assert event.uri == "wm://resource/alice"  # type: ignore[union-attr]
        read = await old.read_resource("wm://resource/alice")
        assert read.contents[0].text.endswith("# from CLI</working-memory>")  # type: ignore[union-attr]
        await new.call_tool("set_working_memory", {"memory": "# through replica 2"})
        await _wait_for(messages, "wm://resource/alice", 2)
        version = await old.read_resource("wm://resource/alice/version")
        assert version.contents[0].text == str(_payload(await new.call_tool("get_working_memory", {}))["version"])  # type: ignore[union-attr]
    with anyio.fail_after(15):  # the 2025 session ended: replica 1 watches none of its lanes any more
        while '"lanes_watched": 0' not in log_of(stack.procs[0]):
            await anyio.sleep(0.05)


async def test_a_token_for_one_resource_reaches_nothing_of_another(stack: Stack, tmp_path: Path) -> None:
    """Alice's token against bob's resource and thread: every tool, resource and both subscription styles are
    refused with the protocol's error; bob's memory is untouched."""
    code, _, err = await cli(stack.url, stack.keys, "write", "--resource", "bob", "--thread", "bt", "--scope", "thread",
                              "--markdown", "# bt")
    assert code == 0, err
    code, _, err = await cli(stack.url, stack.keys, "write", "--resource", "bob", "--markdown", "# bob")
    assert code == 0, err
    async with (http_client(stack.ports[0], ALICE) as old, http_client(stack.ports[1], ALICE, mode="auto") as new):
        for client in (old, new):
            for name, args in [("get_working_memory", {"resource_id": "bob"}),
                               ("get_working_memory", {"thread_id": "bt"}),
                               ("set_working_memory", {"memory": "# mine", "resource_id": "bob"}),
                               ("set_working_memory", {"memory": "# mine", "thread_id": "bt"}),
                               ("get_working_memory_history", {"resource_id": "bob"}),
                               ("get_working_memory_history", {"thread_id": "bt"})]:
                with pytest.raises(MCPError, match=r"^refused"):
                    await client.call_tool(name, args)
            for uri in ("wm://resource/bob", "wm://resource/bob/version", "wm://thread/bt", "wm://thread/bt/version"):
                with pytest.raises(MCPError, match=r"^refused"):
                    await client.read_resource(uri)
        for uri in ("wm://resource/bob", "wm://thread/bt/version"):
            with pytest.raises(MCPError, match=r"^refused"):
                await old.subscribe_resource(uri)
            with pytest.raises(MCPError, match=r"^refused"):
                async with new.listen(resource_subscriptions=[uri]):
                    pass
    async with http_client(stack.ports[1], BOB) as bob:
        assert _payload(await bob.call_tool("get_working_memory", {"thread_id": "bt"}))["memory"] == "# bt"
        assert _payload(await bob.call_tool("get_working_memory", {}))["memory"] == "# bob"
