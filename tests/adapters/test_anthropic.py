"""The Anthropic Messages helper, driven through the real ``anthropic`` SDK.

Only the HTTP server is scripted (``httpx2.MockTransport``): the SDK builds and sends real
requests, and the fake records their exact bodies and answers like the Messages API
(checking its ordering rules: tool results first in the user turn after the tool use).
Real Redis, a real worker process, a second writer in another process.
"""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx2
import pytest
from redis.asyncio import Redis

from signals.agent import AgentWorkingMemory
from signals.core.memory import WorkingMemoryConfig
from signals.core.system_message import working_memory_system_message
from signals.integrations._core import is_working_memory_text
from signals.integrations.anthropic import (
    AnthropicCodec,
    AnthropicWorkingMemory,
    is_working_memory_message,
    strip_working_memory,
)
from signals.streams.deliveries import DeliveryLog
from signals.streams.keys import Keys
from signals.streams.progress import wait_caught_up
from signals.streams.store import WorkingMemoryStore
from tests.adapters.support import Audit, CallRecord, next_memory, worker_process, write_from_other_process
from tests.integration.helpers import running_workers
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]
SYSTEM = "You are a helpful assistant. Be brief."
TURNS = 22
TOOL_TURNS = {2, 5, 9, 12, 16, 20}
OTHER_PROCESS_TURNS = {7, 14}
KEEP = 6  # the loop's history limit, in messages


def markups_of(body: dict[str, Any]) -> list[str]:
    """The working-memory blocks a request carried, in order."""
    out: list[str] = []
    for message in body["messages"]:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        out += [b["text"] for b in blocks if b["type"] == "text" and is_working_memory_text(b["text"])]
    return out


def check_request(body: dict[str, Any]) -> None:
    """The Messages API's ordering rules the placement must keep."""
    messages = body["messages"]
    assert messages[0]["role"] == "user"
    for k, message in enumerate(messages):
        content = message["content"]
        if message["role"] != "user" or isinstance(content, str):
            continue
        kinds = [b["type"] for b in content]
        results = [b for b in content if b["type"] == "tool_result"]
        assert kinds[:len(results)] == ["tool_result"] * len(results), f"tool results not first: {kinds}"
        if results:
            assert k > 0 and messages[k - 1]["role"] == "assistant"
            uses = {b["id"] for b in messages[k - 1]["content"] if b["type"] == "tool_use"}
            assert {b["tool_use_id"] for b in results} == uses


class FakeMessagesAPI:
    """The scripted server: records each request body, replies with text or a setWorkingMemory call."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.turn = 0

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        check_request(body)
        last = body["messages"][-1]["content"]
        answering_tool = isinstance(last, list) and any(b["type"] == "tool_result" for b in last)
        content: list[dict[str, Any]]
        if self.turn in TOOL_TURNS and not answering_tool and any(t["name"] == "setWorkingMemory"
                                                                 for t in body.get("tools", [])):
            content = [{"type": "text", "text": "noting that"},
                       {"type": "tool_use", "id": f"toolu_{len(self.bodies)}", "name": "setWorkingMemory",
                        "input": {"memory": next_memory(markups_of(body), self.turn)}}]
            stop = "tool_use"
        else:
            content, stop = [{"type": "text", "text": f"reply {self.turn}"}], "end_turn"
        return httpx2.Response(200, json={
            "id": f"msg_{len(self.bodies)}", "type": "message", "role": "assistant", "model": body["model"],
            "content": content, "stop_reason": stop, "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5}})


def _client(fake: FakeMessagesAPI) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(api_key="test-key", base_url="http://anthropic.test",
                                    http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(fake.handler)),
                                    max_retries=0)


def _trim(history: list[Any]) -> list[Any]:
    """Keep the last KEEP messages, starting at a user turn that is not a tool result."""
    start = max(0, len(history) - KEEP)
    while start < len(history):
        message = history[start]
        content = message["content"]
        if message["role"] == "user" and not (isinstance(content, list) and any(
                (b.get("type") if isinstance(b, dict) else b.type) == "tool_result" for b in content)):
            break
        start += 1
    return history[start:]


async def test_conversation(redis_server: RedisServer, redis: Redis, keys: Keys) -> None:
    """22 turns: tool writes, another process writes, the history limit drops the snapshot; audited from requests."""
    store = WorkingMemoryStore(redis, keys=keys)
    await store.create_thread("t1", "u")
    wm = AnthropicWorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1"))
    fake = FakeMessagesAPI()
    client = _client(fake)
    audit = Audit(redis, keys, "t1")
    history: list[Any] = []
    async with worker_process(redis_server.url, keys):
        for turn in range(1, TURNS + 1):
            fake.turn = turn
            if turn in OTHER_PROCESS_TURNS:  # the second time, two writes land before the next call
                current = await audit.expect(store, "u")
                for n in range(1 if turn == min(OTHER_PROCESS_TURNS) else 2):
                    current += f"\n- another process, turn {turn}, write {n}"
                    write_from_other_process(redis_server.url, keys, "u", current)
                    await wait_caught_up(redis, keys)
            history.append({"role": "user", "content": f"user says {turn}"})
            for _ in range(3):  # a call, and one more after a tool call
                await wait_caught_up(redis, keys)
                expected = await audit.expect(store, "u")
                history = await wm.prepare(history)
                response = await client.messages.create(model="claude-test", max_tokens=100,
                                                        system=wm.system(SYSTEM), messages=history, tools=wm.tools())
                audit.calls.append(CallRecord(markups_of(fake.bodies[-1]), expected, fake.bodies[-1]["system"]))
                history.append({"role": "assistant", "content": response.content})
                results = [r for b in response.content if (r := await wm.handle_tool_use(b)) is not None]
                if not results:
                    break
                assert all(json.loads(r["content"])["success"] for r in results)
                history.append({"role": "user", "content": results})
            history = _trim(history)
    records = await audit.check()
    assert sum(r.reason == "reinject" for r in records) >= 2
    assert any(r.mode == "delta" for r in records)
    assert {c.system for c in audit.calls} == {SYSTEM}
    final = await audit.expect(store, "u")
    for turn in TOOL_TURNS:
        assert f"item number {turn}" in final
    for turn in OTHER_PROCESS_TURNS:
        assert f"another process, turn {turn}, write 0" in final
    assert len(fake.bodies) == TURNS + len(TOOL_TURNS)
    # a merged turn: the working memory came after the tool results, in the same user turn
    merged = [m for b in fake.bodies for m in b["messages"] if m["role"] == "user" and isinstance(m["content"], list)
              and m["content"][0]["type"] == "tool_result" and markups_of({"messages": [m]})]
    assert merged
    await client.close()


async def test_read_only_and_system_message(redis_server: RedisServer, redis: Redis, keys: Keys) -> None:
    """A read-only agent gets no tool and cannot write; system-message delivery sends Mastra's system message."""
    store = WorkingMemoryStore(redis, keys=keys)
    await store.replace("u", "# Notes\n- likes tea")
    fake = FakeMessagesAPI()
    client = _client(fake)
    read_only = AnthropicWorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1",
                                                          read_only=True))
    system = AnthropicWorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t2",
                                                       delivery="system-message"))
    async with worker_process(redis_server.url, keys):
        await wait_caught_up(redis, keys)
        fake.turn = 2  # a tool turn: the fake calls the tool when it is offered
        messages = await read_only.prepare([{"role": "user", "content": "hi"}])
        await client.messages.create(model="m", max_tokens=10, system=read_only.system(SYSTEM), messages=messages,
                                     tools=read_only.tools())
        assert not fake.bodies[-1].get("tools") and len(markups_of(fake.bodies[-1])) == 1
        refused = await read_only.handle_tool_use({"type": "tool_use", "id": "x", "name": "setWorkingMemory",
                                                   "input": {"memory": "# Notes\n- forged"}})
        assert refused is not None and refused["is_error"] and "read-only" in refused["content"]
        for step in range(2):
            messages = await system.prepare([{"role": "user", "content": f"hi {step}"}])
            await client.messages.create(model="m", max_tokens=10, system=system.system(SYSTEM), messages=messages,
                                         tools=system.tools())
            doc = await store.get("u")
            assert doc is not None
            expected = working_memory_system_message(WorkingMemoryConfig(), doc.data)["content"]
            assert fake.bodies[-1]["system"] == f"{SYSTEM}\n\n{expected}"
            assert markups_of(fake.bodies[-1]) == []
            await wait_caught_up(redis, keys)
    assert (await store.get("u")).data.endswith("likes tea")  # type: ignore[union-attr]
    assert [r.mode for r in await DeliveryLog(redis, keys).read("t2")] == ["snapshot"]
    await client.close()


def test_recognising_working_memory_turns() -> None:
    """A turn made only of working memory is one; a tool-result turn carrying some is stripped of it."""
    markup = '<working-memory format="markdown" scope="resource">x</working-memory>'
    assert is_working_memory_message({"role": "user", "content": markup})
    assert is_working_memory_message({"role": "user", "content": [{"type": "text", "text": markup}]})
    mixed = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": "ok"},
                                         {"type": "text", "text": markup}]}
    assert not is_working_memory_message(mixed)
    assert strip_working_memory(mixed) == {"role": "user", "content": [mixed["content"][0]]}
    assert not is_working_memory_message({"role": "assistant", "content": markup})


def test_codec_places_blocks_after_tool_results() -> None:
    """Blocks join the user turn after its tool results (a string turn becomes blocks), or follow an assistant."""
    codec = AnthropicCodec()
    markup = '<working-memory format="markdown" scope="resource">x</working-memory>'
    result = {"type": "tool_result", "tool_use_id": "a", "content": "ok"}
    assert codec.join({"role": "user", "content": [result]}, [markup]) == [
        {"role": "user", "content": [result, {"type": "text", "text": markup}]}]
    assert codec.join({"role": "user", "content": "hi"}, [markup]) == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": markup}]}]
    prefill = {"role": "assistant", "content": "The answer is"}
    assert codec.join(prefill, [markup]) == [prefill, {"role": "user", "content": [{"type": "text", "text": markup}]}]
    turn = codec.join({"role": "user", "content": [result]}, [markup])[0]
    assert codec.split(turn) == ({"role": "user", "content": [result]}, [markup])


async def test_in_place_edits_of_a_merged_turn_are_kept(redis_server: RedisServer, redis: Redis, keys: Keys) -> None:
    """A turn carrying working memory that the loop then edits in place keeps the edit on the next prepare."""
    store = WorkingMemoryStore(redis, keys=keys)
    wm = AnthropicWorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1"))
    async with running_workers(redis_server.url, keys, 1):
        await store.replace("u", "# Notes\n- likes tea")
        await wait_caught_up(redis, keys)
        history = await wm.prepare([{"role": "user", "content": "hi"}])
        assert len(markups_of({"messages": history})) == 1
        assert (await wm.prepare(history))[-1] is history[-1]  # nothing new: the same turn object
        history[-1]["content"].append({"type": "text", "text": "and one more thing"})
        await store.replace("u", "# Notes\n- likes tea\n- and biscuits")
        await wait_caught_up(redis, keys)
        again = await wm.prepare(history)  # the new delivery joins that same turn
    texts = [b["text"] for b in again[-1]["content"]]
    assert texts[:2] == ["hi", "and one more thing"] and len(markups_of({"messages": again})) == 2
