"""Agent-loop side against real Redis: reconnects, the delivery log, the tool, the CLI tail."""

from __future__ import annotations

import contextlib
import json
import re
import sys

import anyio
import pytest
from redis.asyncio import Redis
from redis.exceptions import ResponseError

from signals.agent import AgentWorkingMemory
from signals.core.cachekey import cache_key
from signals.core.codec import FIELD, encode_json
from signals.core.diff import unified_patch
from signals.core.memory import WorkingMemoryConfig
from signals.core.models import Attributes, Delivery
from signals.errors import CorruptDataError, InvalidInputError, WmSignalsError
from signals.streams.client import connect
from signals.streams.deliveries import NO_WINDOW, DeliveryLog
from signals.streams.keys import Keys
from signals.streams.store import WorkingMemoryStore
from signals.streams.subscribe import Subscription
from tests.integration.helpers import running_workers, wait_caught_up
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]
LINES = [f"- fact {i}: long enough to make a delta worth sending" for i in range(10)]


def _doc(n: int) -> str:
    return "# Notes\n" + "\n".join(LINES) + f"\n- counter {n}"


async def test_subscription_survives_killed_connections(redis_server: RedisServer, redis: Redis, keys: Keys) -> None:
    """Every client connection is killed mid-tail: the subscriber resumes with no gap or repeat."""
    store = WorkingMemoryStore(redis, keys=keys)
    sub_client = connect(redis_server.url)
    sub = Subscription(sub_client, keys, "r:u", block_ms=100)
    seen: list[int] = []

    async def tail() -> None:
        async for item in sub:
            seen.append(item.signal.version)
            if item.signal.version == 40:
                return

    async with running_workers(redis_server.url, keys, 1), anyio.create_task_group() as tg:
        tg.start_soon(tail)
        for n in range(20):
            await store.replace("u", _doc(n))
        await wait_caught_up(redis, keys)
        await redis.client_kill_filter(_type="normal", skipme=True)
        for n in range(20, 40):
            await store.replace("u", _doc(n))
        with anyio.fail_after(30):
            while len(seen) < 40:
                await anyio.sleep(0.05)
    assert seen == list(range(1, 41))
    assert sub.value == _doc(39)
    await sub_client.aclose()


async def test_delivery_log_answers_what_the_model_saw(redis_server: RedisServer, redis: Redis, keys: Keys) -> None:
    """Each step's additions are logged; view_at(step) rebuilds what the model could see then."""
    store = WorkingMemoryStore(redis, keys=keys)
    await store.create_thread("t1", "u")
    agent = AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1")
    await agent.start()
    held: list[str] = []
    async with running_workers(redis_server.url, keys, 1):
        for step in range(1, 5):
            await store.replace("u", _doc(step))
            await wait_caught_up(redis, keys)
            result = await agent.before_model_call(held)
            held = [h for h in held if h not in result.drop] + [a.id for a in result.add]
    log = DeliveryLog(redis, keys)
    records = await log.read("t1")
    assert [(r.step, r.version, r.mode, r.reason) for r in records] == [
        (1, 1, "snapshot", "bootstrap"), (2, 2, "delta", "new"), (3, 3, "delta", "new"), (4, 4, "delta", "new")]
    view = await log.view_at("t1", 3)
    assert view is not None and view.version == 3 and view.text == _doc(3)


async def test_a_restarted_agent_continues_the_logs_steps(redis_server: RedisServer, redis: Redis,
                                                          keys: Keys) -> None:
    """An agent process that restarts on a thread numbers its steps after the log's last
    record, and every record names its window: view_at answers for one window.

    Its window starts empty (a bootstrap snapshot); its steps must not reuse the numbers
    of the first process's logged steps, or view_at(N) would mix two windows' records.
    Steps that added nothing are not logged, so the second process may number one of them
    again: the window tells them apart. Its message ids are not the first process's
    either: a loop that kept those messages must not have them taken for the new ones.
    """
    store = WorkingMemoryStore(redis, keys=keys)
    await store.create_thread("t1", "u")
    first_ids: list[str] = []
    windows = []
    async with running_workers(redis_server.url, keys, 1):
        for run in range(2):
            agent = AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1")
            await agent.start()
            windows.append(agent.window.window_id)
            held: list[str] = []
            for n in range(3):
                await store.replace("u", _doc(10 * run + n))
                await wait_caught_up(redis, keys)
                result = await agent.before_model_call(held)
                held = [h for h in held if h not in result.drop] + [a.id for a in result.add]
                assert not set(held) & set(first_ids)
            for _ in range(2):  # calls with nothing new: steps that add nothing are not logged
                result = await agent.before_model_call(held)
                assert result.add == ()
            assert agent.last_step == (5, 8)[run]  # the second numbers after the last record (3)
            first_ids = first_ids or held
    log = DeliveryLog(redis, keys)
    records = await log.read("t1")
    assert [(r.step, r.mode, r.reason, r.window) for r in records] == [
        (1, "snapshot", "bootstrap", windows[0]), (2, "delta", "new", windows[0]), (3, "delta", "new", windows[0]),
        (4, "snapshot", "bootstrap", windows[1]), (5, "delta", "new", windows[1]),
        (6, "delta", "new", windows[1])]
    view = await log.view_at("t1", 2)
    assert view is not None and view.text == _doc(1) and view.window == windows[0]
    view = await log.view_at("t1", 5)
    assert view is not None and view.text == _doc(11) and view.window == windows[1]
    # the first window's steps 4 and 5 added nothing; the second numbered its own 4 and 5
    view = await log.view_at("t1", 5, window=windows[0])
    assert view is not None and view.text == _doc(2) and view.window == windows[0]
    assert await log.view_at("t1", 3, window=windows[1]) is None
    with pytest.raises(InvalidInputError, match="window"):
        await log.view_at("t1", 3, window="no such/window")


async def test_a_start_that_failed_is_resumed_when_tried_again(redis_server: RedisServer, redis: Redis,
                                                              keys: Keys) -> None:
    """Redis busy while start() reads the log's last step (a script running past the busy
    threshold: a real, passing server condition): start() fails; tried again once Redis
    answers, it numbers after the log's last record (a failed read once left steps from 1)."""
    store = WorkingMemoryStore(redis, keys=keys)
    await store.create_thread("t1", "u")
    await store.replace("u", _doc(1))
    earlier = Delivery(thread_id="t1", step=40, lane="r:u", version=1, mode="snapshot", reason="bootstrap",
                       cache_key=cache_key("markdown", _doc(1)), contents=_doc(1),
                       attributes=Attributes(format="markdown", scope="resource"), window="earlier")
    await redis.xadd(keys.deliveries("t1"), {FIELD: encode_json(earlier)})
    threshold = (await redis.config_get("busy-reply-threshold"))["busy-reply-threshold"]
    blocker = connect(redis_server.url)
    agent = AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1")
    try:
        await redis.config_set("busy-reply-threshold", 20)
        async with anyio.create_task_group() as tg:
            async def busy() -> None:
                with contextlib.suppress(ResponseError):  # ended by SCRIPT KILL
                    await blocker.eval("while true do end", 0)

            tg.start_soon(busy)
            await anyio.sleep(0.3)
            with pytest.raises(WmSignalsError, match="busy"):
                await agent.start()
            admin = connect(redis_server.url)
            await admin.script_kill()
            await admin.aclose()
    finally:
        await redis.config_set("busy-reply-threshold", threshold)
        await blocker.aclose()
    await agent.start()
    assert agent.window.step(set()).step == 41


async def test_an_agent_that_was_not_started_still_continues_the_steps(redis: Redis, keys: Keys) -> None:
    """System-message delivery needs no start(): the first model call numbers after the
    log's last record (the first process's steps 2 and 3 resent the same text: not logged)."""
    store = WorkingMemoryStore(redis, keys=keys)
    await store.create_thread("t1", "u")
    for n in range(2):
        await store.replace("u", _doc(n))
        agent = AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1", delivery="system-message")
        for _ in range(3):
            await agent.before_model_call([])
    records = await DeliveryLog(redis, keys).read("t1")
    assert [(r.step, r.version) for r in records] == [(1, 1), (2, 2)]  # not (1, 2): numbered after the log
    assert agent.last_step == 4


def _record(step: int, version: int, window: str | None, base: int | None = None) -> dict[str, str]:
    """A genuine delivery record of ``_doc(version)``: a snapshot, or a delta from ``_doc(base)``."""
    if base is None:
        contents, attrs = _doc(version), Attributes(format="markdown", scope="resource")
    else:
        contents = unified_patch(_doc(base), _doc(version))
        attrs = Attributes(format="markdown", scope="resource", patch="unified-diff")
    coalesced = base if base is not None and base < version - 1 else None
    record = Delivery(thread_id="t1", step=step, lane="r:u", version=version,
                      mode="snapshot" if base is None else "delta", reason="new",
                      cache_key=cache_key("markdown", _doc(version)), contents=contents, attributes=attrs,
                      window=window, base_version=coalesced)
    return {FIELD: encode_json(record)}


async def test_a_delta_whose_window_lost_its_snapshot_to_retention_is_not_corrupt(redis: Redis, keys: Keys) -> None:
    """Two windows overlap; retention trims B's snapshot but A's (older version) stays: B's
    delta cannot be checked and is passed over, not taken for tampering (A's snapshot says
    nothing of what B held)."""
    stream = keys.deliveries("t1")
    for fields in (_record(1, 4, "A"), _record(2, 6, "B", base=5)):  # B's snapshot of v5 was trimmed
        await redis.xadd(stream, fields)
    log = DeliveryLog(redis, keys)
    assert [r.version for r in await log.read("t1")] == [4, 6]
    assert await log.view_at("t1", 2, window="B") is None
    view = await log.view_at("t1", 2, window="A")
    assert view is not None and view.text == _doc(4)


async def test_a_thread_log_with_two_lanes_rebuilds_each(redis: Redis, keys: Keys) -> None:
    """A profile agent (resource lane) and a plan agent (thread lane) log into one thread:
    each lane's versions are its own (the demo's thread read as corrupt: the plan's v1 was
    taken for the profile's)."""
    plan = "# Plan\n- day 1: temples\n- day 2: markets"
    attrs = Attributes(format="markdown", scope="thread")
    plan_record = Delivery(thread_id="t1", step=1, lane="t:t1", version=1, mode="snapshot", reason="bootstrap",
                           cache_key=cache_key("markdown", plan), contents=plan, attributes=attrs, window="plan")
    stream = keys.deliveries("t1")
    for fields in (_record(1, 1, "profile"), {FIELD: encode_json(plan_record)}, _record(2, 2, "profile", base=1)):
        await redis.xadd(stream, fields)
    log = DeliveryLog(redis, keys)
    assert [(r.lane, r.version) for r in await log.read("t1")] == [("r:u", 1), ("t:t1", 1), ("r:u", 2)]
    view = await log.view_at("t1", 2, window="profile")
    assert view is not None and view.text == _doc(2)
    view = await log.view_at("t1", 2, window="plan")
    assert view is not None and view.text == plan


async def test_records_without_a_window_are_asked_for_with_no_window(redis: Redis, keys: Keys) -> None:
    """Records written before windows were recorded are one window, NO_WINDOW; the
    automatic choice is the window of the newest record at or before the step."""
    stream = keys.deliveries("t1")
    for fields in (_record(1, 1, None), _record(2, 2, None, base=1), _record(2, 3, "new")):
        await redis.xadd(stream, fields)
    log = DeliveryLog(redis, keys)
    view = await log.view_at("t1", 2, window=NO_WINDOW)
    assert view is not None and view.text == _doc(2) and view.window is None
    view = await log.view_at("t1", 2)
    assert view is not None and view.text == _doc(3) and view.window == "new"


async def test_a_catch_up_from_a_version_another_window_held_is_corrupt(redis: Redis, keys: Keys) -> None:
    """A coalesced delta applies to a version its own window held: v3 was only ever in
    window A, so B's delta from v3 is not one B's tracker made (a forged record)."""
    stream = keys.deliveries("t1")
    for fields in (_record(1, 3, "A"), _record(1, 1, "B"), _record(2, 4, "B", base=1), _record(3, 5, "B", base=3)):
        await redis.xadd(stream, fields)
    log = DeliveryLog(redis, keys)
    view = await log.view_at("t1", 2, window="B")
    assert view is not None and view.text == _doc(4)
    with pytest.raises(CorruptDataError, match="applies to 3"):
        await log.view_at("t1", 3, window="B")


async def test_tool_writes_and_returns_errors_to_the_model(redis: Redis, keys: Keys) -> None:
    """setWorkingMemory writes through the store; refused writes come back as tool results."""
    cfg = WorkingMemoryConfig(schema={"type": "object", "properties": {"age": {"type": "integer"}}})
    agent = AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t", config=cfg)
    (tool,) = agent.tools()
    assert tool["function"]["name"] == "setWorkingMemory"
    assert "<working-memory>" in tool["function"]["description"]
    assert tool["function"]["parameters"]["properties"]["age"] == {"type": "integer"}
    assert await agent.call_tool({"age": 3}) == {"success": True, "version": 1}
    bad = await agent.call_tool({"age": "old"})
    assert bad["success"] is False and "age" in bad["error"]
    reader = AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t", config=cfg, read_only=True)
    assert reader.tools() == []
    assert (await reader.call_tool({"age": 4}))["success"] is False
    message = await reader.system_message()
    assert message["role"] == "system" and '{"age":3}' in message["content"]
    assert "setWorkingMemory" not in message["content"]


async def test_template_tool_needs_a_string(redis: Redis, keys: Keys) -> None:
    """In template mode the tool takes the whole document as a string."""
    agent = AgentWorkingMemory(redis, keys, resource_id="u")
    assert (await agent.call_tool({"memory": "# Me\n- likes tea"}))["success"] is True
    bad = await agent.call_tool({"memory": {"not": "a string"}})
    assert bad == {"success": False, "error": "the memory field must be a string holding the whole Markdown document"}
    message = await agent.system_message()
    assert "<working_memory_template>" in message["content"] and "- likes tea" in message["content"]


async def test_subscribe_command_prints_json_lines(redis_server: RedisServer, redis: Redis, keys: Keys) -> None:
    """``wm-signals subscribe --json --count N`` prints N signals with version, mode, value."""
    store = WorkingMemoryStore(redis, keys=keys)
    async with running_workers(redis_server.url, keys, 1):
        for n in range(3):
            await store.replace("u", _doc(n))
        await wait_caught_up(redis, keys)
    proc = await anyio.run_process(
        [sys.executable, "-m", "workers", "subscribe", "--redis-url", redis_server.url, "--namespace",
         keys.namespace, "--partitions", str(keys.partitions), "--resource", "u", "--json",
         "--from-start", "--count", "3"], check=False)
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert [(x["version"], x["mode"]) for x in lines] == [(1, "snapshot"), (2, "delta"), (3, "delta")]
    assert lines[-1]["value"] == _doc(2) and lines[-1]["cacheKey"].startswith("sha256:")



class _ScriptedModel:
    """Stands in for an LLM: reports what working memory its messages carried."""

    def __init__(self) -> None:
        self.calls: list[list[dict[str, str]]] = []

    def reply(self, messages: list[dict[str, str]]) -> str:
        self.calls.append(list(messages))
        return f"reply {len(self.calls)}"


async def test_system_message_delivery(redis_server: RedisServer, redis: Redis, keys: Keys) -> None:
    """``delivery="system-message"``: each call carries the whole memory as one system message, no signals.

    A worker runs, so the lane has state signals; the agent still gets none of them. The
    delivery log holds the document each time the text it carried changed.
    """
    store = WorkingMemoryStore(redis, keys=keys)
    await store.create_thread("t1", "u")
    agent = AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1", delivery="system-message")
    assert await agent.start() == []
    model = _ScriptedModel()
    history: list[dict[str, str]] = []
    system: dict[str, str] | None = None
    async with running_workers(redis_server.url, keys, 1):
        for step, n in enumerate((1, 1, 2), start=1):
            await store.replace("u", _doc(n))
            await wait_caught_up(redis, keys)
            result = await agent.before_model_call([])
            assert result.step == step and result.add == () and result.drop == ()
            assert result.system is not None
            system = result.system
            history.append({"role": "user", "content": f"message {step}"})
            history.append({"role": "assistant", "content": model.reply([system, *history])})
    assert await Subscription(redis, keys, "r:u").bootstrap(), "the lane has state signals"
    for call, n in zip(model.calls, (1, 1, 2), strict=True):
        head, *rest = call
        assert head["role"] == "system" and _doc(n) in head["content"]
        assert "setWorkingMemory" in head["content"] and "<working_memory_template>" in head["content"]
        assert not any(m["content"].startswith("<working-memory") for m in rest)
    records = await DeliveryLog(redis, keys).read("t1")
    assert [(r.step, r.version, r.mode, r.reason) for r in records] == [
        (1, 1, "snapshot", "bootstrap"), (3, 3, "snapshot", "new")]
    view = await DeliveryLog(redis, keys).view_at("t1", 2)
    assert view is not None and view.text == _doc(1)

    reader = AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1", read_only=True,
                                delivery="system-message", log_deliveries=False)
    result = await reader.before_model_call([])
    assert result.system is not None and _doc(2) in result.system["content"]
    assert "setWorkingMemory" not in result.system["content"] and result.add == ()


@pytest.mark.parametrize("held", [None, 5, [["id"]], "wm:r:u1:v1", b"wm:r:u1:v1", [1]])
async def test_held_ids_that_are_not_message_ids_are_bad_input(redis: Redis, keys: Keys, held: object) -> None:
    """``before_model_call`` took ``held_ids`` as it came: None or a number raised a bare
    TypeError, and a bare id string was split into characters, so the loop re-sent the
    snapshot it held (a version twice in the window). It is InvalidInputError now."""
    agent = AgentWorkingMemory(redis, keys, resource_id="u1")
    await agent.start()
    with pytest.raises(InvalidInputError, match="held_ids must"):
        await agent.before_model_call(held)  # type: ignore[arg-type]


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"thread_id": ""}, "thread id must be a non-empty string"),
    ({"thread_id": "a{b}"}, "thread id 'a{b}' is invalid"),
    ({"keys": None}, "keys must be a Keys"),
    ({"config": {"scope": "thread"}}, "config must be a WorkingMemoryConfig, not dict"),
])
async def test_loop_arguments_are_checked_when_it_is_built(redis: Redis, keys: Keys, kwargs: dict[str, object],
                                                          needle: str) -> None:
    """A thread id of "" made a loop with no delivery log that claimed the thread named ""
    for its resource; no keys or a config dict raised a bare AttributeError at ``start()``.
    Each is InvalidInputError naming the argument, when the loop is built."""
    args: dict[str, object] = {"keys": keys, "resource_id": "u1", **kwargs}
    with pytest.raises(InvalidInputError, match=re.escape(needle)):
        AgentWorkingMemory(redis, **args)  # type: ignore[arg-type]


@pytest.mark.parametrize("coalesce", [True, False])
async def test_a_backlog_longer_than_one_read_reaches_the_next_model_call(redis_server: RedisServer, redis: Redis,
                                                                          keys: Keys, coalesce: bool) -> None:
    """More new signals between two model calls than one read returns (500): the call took
    the first read as the whole backlog, so the model could rebuild only an older version
    while a newer one was stored and signalled (a lane retaining that many: a large
    ``retain_signals`` or a ``retain_age``, and a bulk import). Every call now reads the
    lane to its end."""
    store = WorkingMemoryStore(redis, keys=keys)
    agent = AgentWorkingMemory(redis, keys, resource_id="bulk", coalesce=coalesce)
    await agent.start()
    writes = agent.subscription.count + 30
    async with running_workers(redis_server.url, keys, 1, retain_signals=2 * writes):
        await store.replace("bulk", _doc(0))
        await wait_caught_up(redis, keys)
        first = await agent.before_model_call([])
        assert [a.version for a in first.add] == [1]
        for n in range(1, writes + 1):
            await store.replace("bulk", _doc(n))
        await wait_caught_up(redis, keys)
        result = await agent.before_model_call([a.id for a in first.add])
    assert agent.subscription.version == writes + 1 and agent.subscription.value == _doc(writes)
    assert result.add and result.add[-1].version == writes + 1
    assert len(result.add) == (1 if coalesce else writes)
