"""The MCP server runs as the generated ``writer`` ACL user: every tool, resource read and
both subscription styles, with a worker running as the ``worker`` user (deploy/README.md)."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp_types import ResourceUpdatedNotification

from signals.streams.acl import ROLES, acl_file
from signals.streams.client import connect
from signals.streams.keys import Keys
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import running_workers
from workers.mcp.access import Caller
from workers.mcp.server import Options, build_server
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis,
              pytest.mark.filterwarnings("ignore:resources/(un)?subscribe is removed")]
PASSWORDS = {role: secrets.token_hex(8) for role in ROLES}
KEYS = Keys("wm", 4)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    path = Path(tmp_path_factory.mktemp("mcp-acl")) / "users.acl"
    path.write_text(acl_file(KEYS, PASSWORDS))
    srv = RedisServer(extra=["--aclfile", str(path)]).start()
    yield srv
    srv.stop()


def _url(server: RedisServer, role: str) -> str:
    return f"redis://wm-{role}:{PASSWORDS[role]}@127.0.0.1:{server.port}/0"


async def test_the_writer_role_serves_mcp(server: RedisServer) -> None:
    """Set, get, history, resource reads, a 2025 subscription and a 2026 listen, all as ``wm-writer``."""
    writer = connect(_url(server, "writer"))
    store = WorkingMemoryStore(writer, keys=KEYS)
    mcp_server = build_server(store, caller=Caller("alice"), options=Options(block_ms=500))
    messages: list[Any] = []

    async def collect(message: Any) -> None:
        messages.append(message)

    try:
        async with (running_workers(_url(server, "worker"), KEYS, 1),
                    Client(mcp_server, mode="legacy", message_handler=collect) as old, Client(mcp_server) as new):
            assert not (await old.call_tool("set_working_memory", {"memory": "# one", "thread_id": "c1"})).is_error
            await old.subscribe_resource("wm://resource/alice")
            async with new.listen(resource_subscriptions=["wm://thread/c1"]) as sub:
                assert not (await new.call_tool("set_working_memory", {"memory": "# alice"})).is_error
                assert not (await new.call_tool("set_working_memory", {"memory": "# two", "thread_id": "c1"})).is_error
                with anyio.fail_after(15):
                    while not any(isinstance(m, ResourceUpdatedNotification) for m in messages):
                        await anyio.sleep(0.02)
                    assert (await sub.__anext__()).uri == "wm://thread/c1"  # type: ignore[union-attr]
            got = await old.call_tool("get_working_memory", {"thread_id": "c1"})
            assert got.structured_content is not None and got.structured_content["memory"] == "# two"
            history = await old.call_tool("get_working_memory_history", {"thread_id": "c1"})
            assert not history.is_error, history.content
            read = await old.read_resource("wm://thread/c1/version")
            assert read.contents[0].text == "2"  # type: ignore[union-attr]
    finally:
        await writer.aclose()
