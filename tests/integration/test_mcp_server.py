"""The MCP server in-process, with the SDK's real client, on a real redis-server and worker.

Both protocol generations: ``Client(server, mode="legacy")`` speaks the 2025 handshake
(``resources/subscribe``), ``Client(server)`` the 2026 one (``subscriptions/listen``).
The caller is fixed (as over stdio): resource ``alice``; ``bob`` owns a thread she must
not reach.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import AsyncIterator
from typing import Any

import anyio
import jsonschema
import pydantic
import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ResourceUpdatedNotification
from redis.asyncio import Redis

from signals.core.memory import DEFAULT_TEMPLATE, Schema, WorkingMemoryConfig
from signals.streams.keys import Keys
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import running_workers
from workers.mcp.access import Caller
from workers.mcp.server import Options, build_server
from workers.mcp.subscriptions import Limits
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis,
              pytest.mark.filterwarnings("ignore:resources/(un)?subscribe is removed")]

SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                                            "tags": {"type": "array", "items": {"type": "string"}}}}


def _server(redis: Redis, keys: Keys, *, schema: Schema | None = None, limits: Limits | None = None,
            max_bytes: int = 65536) -> Any:
    store = WorkingMemoryStore(redis, keys=keys, config=WorkingMemoryConfig(schema=schema, max_bytes=max_bytes))
    return build_server(store, caller=Caller("alice"), options=Options(block_ms=500, limits=limits or Limits()))


def _payload(result: CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None
    text = result.content[0].text  # type: ignore[union-attr]
    assert json.loads(text) == result.structured_content
    return dict(result.structured_content)


@pytest.fixture
async def worker(redis_server: RedisServer, keys: Keys) -> AsyncIterator[None]:
    async with running_workers(redis_server.url, keys, 1):
        yield


async def test_lists_tools_and_templates(redis: Redis, keys: Keys) -> None:
    """Three tools (the set tool's memory a string in template mode), four URI templates, the caller's resources."""
    async with Client(_server(redis, keys)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
        listed = [r.uri for r in (await client.list_resources()).resources]
    assert sorted(tools) == ["get_working_memory", "get_working_memory_history", "set_working_memory"]
    assert tools["set_working_memory"].input_schema["properties"]["memory"]["type"] == "string"
    assert tools["set_working_memory"].input_schema["required"] == ["memory"]
    assert templates == ["wm://resource/{resourceId}", "wm://resource/{resourceId}/version",
                         "wm://thread/{threadId}", "wm://thread/{threadId}/version"]
    assert listed == ["wm://resource/alice", "wm://resource/alice/version"]


async def test_markdown_set_read_conflict_and_template_guard(redis: Redis, keys: Keys) -> None:
    """Set and read Markdown; a stale expected version is a conflict; the empty template over memory is refused."""
    async with Client(_server(redis, keys)) as client:
        empty = _payload(await client.call_tool("get_working_memory", {}))
        assert (empty["exists"], empty["version"], empty["template"]) == (False, 0, DEFAULT_TEMPLATE)
        done = _payload(await client.call_tool("set_working_memory", {"memory": "# Alice\n- likes <tea> & jam"}))
        assert (done["success"], done["version"], done["lane"]) == (True, 1, "r:alice")
        read = _payload(await client.call_tool("get_working_memory", {}))
        assert (read["memory"], read["version"], read["format"]) == ("# Alice\n- likes <tea> & jam", 1, "markdown")
        rendered = await client.read_resource("wm://resource/alice")
        assert rendered.contents[0].text == ('<working-memory format="markdown" scope="resource"># Alice\n'  # type: ignore[union-attr]
                                             "- likes &lt;tea&gt; &amp; jam</working-memory>")
        version = await client.read_resource("wm://resource/alice/version")
        assert version.contents[0].text == "1"  # type: ignore[union-attr]

        stale = await client.call_tool("set_working_memory", {"memory": "# Alice\n- v2", "expected_version": 0})
        assert stale.is_error and _payload(stale)["kind"] == "conflict" and _payload(stale)["version"] == 1
        ok = _payload(await client.call_tool("set_working_memory", {"memory": "# Alice\n- v2", "expected_version": 1}))
        assert ok["version"] == 2

        wipe = await client.call_tool("set_working_memory", {"memory": DEFAULT_TEMPLATE})
        assert wipe.is_error and "empty template" in _payload(wipe)["error"]
        blank = await client.call_tool("set_working_memory", {"memory": "   \n"})
        assert blank.is_error and "blank" in _payload(blank)["error"]
    assert await redis.hget(keys.doc("r:alice"), "data") == "# Alice\n- v2"


async def test_json_merge_null_delete_and_schema_error(redis: Redis, keys: Keys) -> None:
    """Schema mode: objects merge, null deletes, arrays replace; a schema failure names the field, stores nothing."""
    async with Client(_server(redis, keys, schema=SCHEMA)) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        assert "name" in tools["set_working_memory"].input_schema["properties"]["memory"]["properties"]
        await client.call_tool("set_working_memory", {"memory": {"name": "Alice", "age": 30, "tags": ["a", "b"]}})
        done = _payload(await client.call_tool("set_working_memory", {"memory": {"age": None, "tags": ["c"]}}))
        assert done["version"] == 2
        read = _payload(await client.call_tool("get_working_memory", {}))
        assert (json.loads(read["memory"]), read["format"]) == ({"name": "Alice", "tags": ["c"]}, "json")
        bad = await client.call_tool("set_working_memory", {"memory": {"age": "thirty"}})
        assert bad.is_error and _payload(bad)["kind"] == "schema" and _payload(bad)["fields"] == ["age"]
        text = await client.call_tool("set_working_memory", {"memory": '{"name": "Al"}'})
        assert _payload(text)["version"] == 3, "JSON text merges too"
    assert json.loads(await redis.hget(keys.doc("r:alice"), "data") or "") == {"name": "Al", "tags": ["c"]}


async def test_a_pydantic_schema_with_references_keeps_them_resolvable(redis: Redis, keys: Keys) -> None:
    """A schema whose fields reference $defs (a nested pydantic model) keeps them at the input schema's root."""

    class Place(pydantic.BaseModel):
        city: str

    class Profile(pydantic.BaseModel):
        name: str | None = None
        home: Place | None = None

    async with Client(_server(redis, keys, schema=Profile)) as client:
        tool = next(t for t in (await client.list_tools()).tools if t.name == "set_working_memory")
        assert "Place" in tool.input_schema["$defs"]
        jsonschema.Draft202012Validator.check_schema(tool.input_schema)
        assert jsonschema.Draft202012Validator(tool.input_schema).is_valid({"memory": {"home": {"city": "Oslo"}}})
        done = _payload(await client.call_tool("set_working_memory", {"memory": {"home": {"city": "Oslo"}}}))
        bad = await client.call_tool("set_working_memory", {"memory": {"home": {"city": 5}}})
    assert done["version"] == 1 and bad.is_error and _payload(bad)["fields"] == ["home.city"]


async def test_bad_input_to_every_tool_and_resource_is_an_error_result(redis: Redis, keys: Keys) -> None:
    """Unknown tools, wrong types, extra fields, bad ids, huge documents, malformed URIs: a message, nothing written."""
    async with Client(_server(redis, keys, max_bytes=1000)) as client:
        calls: list[tuple[str, dict[str, Any], str]] = [
            ("nope", {}, "unknown tool"),
            ("get_working_memory", {"thread_id": 5}, "thread_id"),
            ("get_working_memory", {"extra": 1}, "extra"),
            ("get_working_memory", {"thread_id": "a{b}"}, "invalid"),
            ("get_working_memory", {"thread_id": "x" * 600}, "thread_id"),
            ("set_working_memory", {}, "memory"),
            ("set_working_memory", {"memory": 3}, "memory"),
            ("set_working_memory", {"memory": {"a": 1}}, "must be a string"),
            ("set_working_memory", {"memory": "x" * 5000}, "over the limit"),
            ("set_working_memory", {"memory": "ok", "expected_version": -1}, "expected_version"),
            ("set_working_memory", {"memory": "ok", "expected_version": True}, "expected_version"),
            ("set_working_memory", {"memory": "ok", "idempotency_key": ""}, "idempotency_key"),
            ("set_working_memory", {"memory": "\ud800"}, "surrogate"),
            ("get_working_memory_history", {"limit": 0}, "limit"),
            ("get_working_memory_history", {"limit": 10**6}, "limit"),
        ]
        for name, args, needle in calls:
            result = await client.call_tool(name, args)
            assert result.is_error, (name, args)
            assert needle in _payload(result)["error"], (name, args, _payload(result))
        for uri, needle in [("http://x", "unknown resource URI"), ("wm://user/alice", "resource/ or thread/"),
                            ("wm://resource/alice/text", "/version"), ("wm://resource/", "non-empty"),
                            ("wm://resource/%FF", "not UTF-8"), ("wm://resource/" + "a" * 7000, "limit"),
                            ("wm://resource/alice?x=1", "/version")]:
            with pytest.raises(MCPError) as caught:
                await client.read_resource(uri)
            assert needle in caught.value.error.message, (uri, caught.value.error.message)
    assert not await redis.exists(keys.doc("r:alice"))


async def test_history_lists_recent_versions(redis: Redis, keys: Keys, worker: None) -> None:
    """The history tool rebuilds the last versions from the signal stream, oldest first."""
    async with Client(_server(redis, keys)) as client:
        for n in range(1, 5):
            await client.call_tool("set_working_memory", {"memory": f"# v{n}"})
        with anyio.fail_after(10):
            while (await redis.xlen(keys.signals("r:alice"))) < 4:
                await anyio.sleep(0.05)
        history = _payload(await client.call_tool("get_working_memory_history", {"limit": 2}))
    assert [(v["version"], v["memory"]) for v in history["versions"]] == [(3, "# v3"), (4, "# v4")]


async def _updates_legacy(client_messages: list[Any], uri: str, count: int = 1) -> None:
    with anyio.fail_after(10):
        while sum(isinstance(m, ResourceUpdatedNotification) and m.params.uri == uri for m in client_messages) < count:
            await anyio.sleep(0.02)


async def test_both_generations_are_notified_of_a_write_from_elsewhere(redis: Redis, keys: Keys, worker: None) -> None:
    """A write through the store (another writer) reaches a 2025 subscriber and a 2026 listener, per lane."""
    server = _server(redis, keys)
    store = WorkingMemoryStore(redis, keys=keys)
    await store.create_thread("t1", "alice")
    messages: list[Any] = []

    async def collect(message: Any) -> None:
        messages.append(message)

    async with Client(server, mode="legacy", message_handler=collect) as old, Client(server) as new:
        assert old.server_capabilities.resources is not None and old.server_capabilities.resources.subscribe
        await old.subscribe_resource("wm://resource/alice")
        await old.subscribe_resource("wm://thread/t1/version")
        async with new.listen(resource_subscriptions=["wm://resource/alice", "wm://thread/t1"]) as sub:
            await store.replace("alice", "# Alice\n- new fact")
            await _updates_legacy(messages, "wm://resource/alice")
            with anyio.fail_after(10):
                event = await sub.__anext__()
            assert event.uri == "wm://resource/alice"  # type: ignore[union-attr]
            await store.replace("alice", "# t1", thread_id="t1", scope="thread")
            await _updates_legacy(messages, "wm://thread/t1/version")
            with anyio.fail_after(10):
                event = await sub.__anext__()
            assert event.uri == "wm://thread/t1"  # type: ignore[union-attr]
        await old.unsubscribe_resource("wm://resource/alice")
        await store.replace("alice", "# Alice\n- after unsubscribe")
        await _updates_legacy(messages, "wm://thread/t1/version")  # still subscribed there: no error, no wait
        await anyio.sleep(0.5)
    assert sum(getattr(m, "params", None) is not None and getattr(m.params, "uri", "") == "wm://resource/alice"
               for m in messages) == 1, "no notification after unsubscribe"


async def test_refusals_for_another_resource_and_its_threads(redis: Redis, keys: Keys) -> None:
    """Alice cannot read, write or subscribe to bob's resource or thread: the protocol's error, nothing written."""
    store = WorkingMemoryStore(redis, keys=keys)
    await store.create_thread("bobs", "bob")
    await store.replace("bob", "# bob's thread", thread_id="bobs", scope="thread")
    await store.replace("bob", "# bob")
    async with Client(_server(redis, keys), mode="legacy") as old, Client(_server(redis, keys)) as new:
        attempts = [
            old.call_tool("get_working_memory", {"resource_id": "bob"}),
            old.call_tool("get_working_memory", {"thread_id": "bobs"}),
            old.call_tool("get_working_memory", {"thread_id": "no-such-thread"}),
            old.call_tool("set_working_memory", {"memory": "# mine", "resource_id": "bob"}),
            old.call_tool("set_working_memory", {"memory": "# mine", "thread_id": "bobs"}),
            old.call_tool("get_working_memory_history", {"resource_id": "bob"}),
            old.call_tool("get_working_memory_history", {"thread_id": "bobs"}),
            old.read_resource("wm://resource/bob"),
            old.read_resource("wm://resource/bob/version"),
            old.read_resource("wm://thread/bobs"),
            old.read_resource("wm://thread/bobs/version"),
            old.subscribe_resource("wm://resource/bob"),
            old.subscribe_resource("wm://thread/bobs"),
        ]
        for attempt in attempts:
            with pytest.raises(MCPError) as caught:
                await attempt
            assert caught.value.error.message.startswith("refused:"), caught.value.error.message
        for uris in (["wm://resource/bob"], ["wm://thread/bobs/version"], ["wm://resource/alice", "wm://thread/bobs"]):
            with pytest.raises(MCPError, match="refused"):
                async with new.listen(resource_subscriptions=uris):
                    pass
    assert await redis.hget(keys.doc("t:bobs"), "data") == "# bob's thread"
    assert await redis.hget(keys.doc("r:bob"), "data") == "# bob"
    assert await redis.hget(keys.thread("bobs"), "resource") == "bob"


async def test_a_write_to_a_new_thread_claims_it(redis: Redis, keys: Keys) -> None:
    """Writing a thread no resource owns records the caller's resource as its owner; then it reads back."""
    async with Client(_server(redis, keys)) as client:
        done = _payload(await client.call_tool("set_working_memory", {"memory": "# plan", "thread_id": "t-new"}))
        assert done["lane"] == "t:t-new"
        read = _payload(await client.call_tool("get_working_memory", {"thread_id": "t-new"}))
        assert read["memory"] == "# plan"
    assert await redis.hget(keys.thread("t-new"), "resource") == "alice"


async def test_subscriptions_are_bounded_per_connection_and_per_caller(redis: Redis, keys: Keys) -> None:
    """Past the bounds a subscription is refused with a message; the others keep working."""
    limits = Limits(per_connection=1, per_listen=1, listens_per_caller=1)
    store = WorkingMemoryStore(redis, keys=keys)
    await store.create_thread("t1", "alice")
    server = _server(redis, keys, limits=limits)
    async with Client(server, mode="legacy") as old, Client(server) as new:
        await old.subscribe_resource("wm://resource/alice")
        await old.subscribe_resource("wm://resource/alice")  # the same URI again: no new subscription
        with pytest.raises(MCPError, match="most it may hold"):
            await old.subscribe_resource("wm://thread/t1")
        with pytest.raises(MCPError, match="more than"):
            async with new.listen(resource_subscriptions=["wm://resource/alice", "wm://thread/t1"]):
                pass
        async with new.listen(resource_subscriptions=["wm://resource/alice"]):
            with pytest.raises(MCPError, match="listen streams open"):
                async with new.listen(resource_subscriptions=["wm://thread/t1"]):
                    pass


async def test_concurrent_subscriptions_of_one_connection_count_once(redis: Redis, keys: Keys) -> None:
    """The same URI subscribed many times at once is one subscription (one watch reference); the
    per-connection bound holds against concurrent requests too."""
    limits = Limits(per_connection=2)
    store = WorkingMemoryStore(redis, keys=keys)
    for thread in ("t1", "t2", "t3"):
        await store.create_thread(thread, "alice")
    server = _server(redis, keys, limits=limits)
    async with Client(server, mode="legacy") as old:
        async with anyio.create_task_group() as tg:
            for _ in range(5):
                tg.start_soon(old.subscribe_resource, "wm://resource/alice")
        refused: list[str] = []

        async def subscribe(uri: str) -> None:
            try:
                await old.subscribe_resource(uri)
            except MCPError as e:
                refused.append(e.error.message)

        async with anyio.create_task_group() as tg:
            for thread in ("t1", "t2", "t3"):
                tg.start_soon(subscribe, f"wm://thread/{thread}")
        assert len(refused) == 2 and all("most it may hold" in m for m in refused)
        await old.unsubscribe_resource("wm://resource/alice")
        await old.subscribe_resource("wm://thread/t3")  # room again: the five were one


async def test_the_sdk_still_gives_handlers_the_connection(redis: Redis, keys: Keys) -> None:
    """workers.mcp reaches the per-connection state through the session (see connection_of): a 2025
    subscription must land there, and be dropped when the connection closes."""
    server = _server(redis, keys)
    async with Client(server, mode="legacy") as old:
        await old.subscribe_resource("wm://resource/alice")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert (await old.read_resource("wm://resource/alice/version")).contents
