"""The OpenAI Chat Completions helper, driven through the real ``openai`` SDK.

Only the HTTP server is scripted (``httpx2.MockTransport``: the SDK sends with httpx2): the
fake records each request body exactly as the SDK sent it and answers like the API,
checking that every ``tool`` message directly follows the assistant's ``tool_calls``.
Real Redis, a real worker process, a second writer in another process.
"""

from __future__ import annotations

import json
from typing import Any

import httpx2
import openai
import pytest
from redis.asyncio import Redis

from signals.agent import AgentWorkingMemory
from signals.core.memory import WorkingMemoryConfig
from signals.core.system_message import working_memory_system_message
from signals.integrations._core import is_working_memory_text
from signals.integrations.openai_chat import OpenAIChatWorkingMemory, is_working_memory_message
from signals.streams.keys import Keys
from signals.streams.progress import wait_caught_up
from signals.streams.store import WorkingMemoryStore
from tests.adapters.support import Audit, CallRecord, next_memory, worker_process, write_from_other_process
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]
SYSTEM = {"role": "system", "content": "You are a helpful assistant. Be brief."}
TURNS = 21
TOOL_TURNS = {2, 6, 10, 13, 17, 20}
OTHER_PROCESS_TURNS = {8, 15}
KEEP = 6  # the loop's history limit, in messages after the system message


def markups_of(body: dict[str, Any]) -> list[str]:
    """The working-memory messages a request carried, in order."""
    return [m["content"] for m in body["messages"]
            if m["role"] == "user" and isinstance(m["content"], str) and is_working_memory_text(m["content"])]


def check_request(body: dict[str, Any]) -> None:
    """Every tool message directly follows the assistant's tool_calls (or a sibling tool message)."""
    messages = body["messages"]
    pending: set[str] = set()
    for message in messages:
        if message["role"] == "tool":
            assert message["tool_call_id"] in pending, "a tool message that does not answer the call before it"
            pending.discard(message["tool_call_id"])
            continue
        assert not pending, f"{message['role']} message before the tool results {pending}"
        if message["role"] == "assistant":
            pending = {c["id"] for c in message.get("tool_calls") or []}
    assert not pending


class FakeChatAPI:
    """The scripted server: records each request body, replies with text or a setWorkingMemory call."""

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.turn = 0

    def handler(self, request: httpx2.Request) -> httpx2.Response:
        body = json.loads(request.content)
        self.bodies.append(body)
        check_request(body)
        message: dict[str, Any]
        offered = any(t["function"]["name"] == "setWorkingMemory" for t in body.get("tools", []))
        conversation = [m for m in body["messages"] if not is_working_memory_message(m)]
        if self.turn in TOOL_TURNS and conversation[-1]["role"] != "tool" and offered:
            arguments = json.dumps({"memory": next_memory(markups_of(body), self.turn)})
            message = {"role": "assistant", "content": None, "tool_calls": [
                {"id": f"call_{len(self.bodies)}", "type": "function",
                 "function": {"name": "setWorkingMemory", "arguments": arguments}}]}
            finish = "tool_calls"
        else:
            message, finish = {"role": "assistant", "content": f"reply {self.turn}"}, "stop"
        return httpx2.Response(200, json={
            "id": f"chatcmpl-{len(self.bodies)}", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}})


def _client(fake: FakeChatAPI) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(api_key="test-key", base_url="http://openai.test/v1", max_retries=0,
                              http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(fake.handler)))


def _role(message: Any) -> str:
    return str(message["role"] if isinstance(message, dict) else message.role)


def _trim(history: list[Any]) -> list[Any]:
    """The system message, then the last KEEP messages starting at a user message."""
    rest = history[1:]
    start = max(0, len(rest) - KEEP)
    while start < len(rest) and _role(rest[start]) != "user":
        start += 1
    return [history[0], *rest[start:]]


async def test_conversation(redis_server: RedisServer, redis: Redis, keys: Keys) -> None:
    """21 turns: tool writes, another process writes, the history limit drops the snapshot; audited from requests."""
    store = WorkingMemoryStore(redis, keys=keys)
    await store.create_thread("t1", "u")
    wm = OpenAIChatWorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1"))
    fake = FakeChatAPI()
    client = _client(fake)
    audit = Audit(redis, keys, "t1")
    history: list[Any] = [SYSTEM]
    async with worker_process(redis_server.url, keys):
        for turn in range(1, TURNS + 1):
            fake.turn = turn
            if turn in OTHER_PROCESS_TURNS:
                current = await audit.expect(store, "u")
                write_from_other_process(redis_server.url, keys, "u", f"{current}\n- another process, turn {turn}")
            history.append({"role": "user", "content": f"user says {turn}"})
            for _ in range(3):  # a call, and one more after a tool call
                await wait_caught_up(redis, keys)
                expected = await audit.expect(store, "u")
                history = await wm.prepare(history)
                response = await client.chat.completions.create(model="gpt-test", messages=history,
                                                                tools=wm.tools())
                body = fake.bodies[-1]
                audit.calls.append(CallRecord(markups_of(body), expected, json.dumps(body["messages"][0])))
                reply = response.choices[0].message
                history.append(reply)
                results = [r for c in reply.tool_calls or [] if (r := await wm.handle_tool_call(c)) is not None]
                if not results:
                    break
                assert all(json.loads(r["content"])["success"] for r in results)
                history += results
            history = _trim(history)
    records = await audit.check()
    assert sum(r.reason == "reinject" for r in records) >= 2
    assert any(r.mode == "delta" for r in records)
    assert {c.system for c in audit.calls} == {json.dumps(SYSTEM)}
    final = await audit.expect(store, "u")
    for turn in TOOL_TURNS:
        assert f"item number {turn}" in final
    for turn in OTHER_PROCESS_TURNS:
        assert f"another process, turn {turn}" in final
    # working memory right after the tool results answering a call (the API's rule kept)
    after_tool = [b for b in fake.bodies if b["messages"][-2]["role"] == "tool" and markups_of(
        {"messages": b["messages"][-1:]})]
    assert after_tool
    await client.close()


async def test_read_only_and_system_message(redis_server: RedisServer, redis: Redis, keys: Keys) -> None:
    """A read-only agent gets no tool and cannot write; system-message delivery sends Mastra's system message."""
    store = WorkingMemoryStore(redis, keys=keys)
    await store.replace("u", "# Notes\n- likes tea")
    fake = FakeChatAPI()
    client = _client(fake)
    read_only = OpenAIChatWorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1",
                                                           read_only=True))
    system = OpenAIChatWorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t2",
                                                        delivery="system-message"))
    async with worker_process(redis_server.url, keys):
        await wait_caught_up(redis, keys)
        fake.turn = 2
        messages = await read_only.prepare([SYSTEM, {"role": "user", "content": "hi"}])
        await client.chat.completions.create(model="m", messages=messages, tools=read_only.tools())
        assert not fake.bodies[-1].get("tools") and len(markups_of(fake.bodies[-1])) == 1
        refused = await read_only.handle_tool_call({"id": "c", "function": {
            "name": "setWorkingMemory", "arguments": json.dumps({"memory": "# Notes\n- forged"})}})
        assert refused is not None and "read-only" in refused["content"]
        history: list[Any] = [SYSTEM]
        for step in range(3):
            if step == 2:
                await store.replace("u", "# Notes\n- likes coffee now")
            history = await system.prepare([*history, {"role": "user", "content": f"hi {step}"}])
            await client.chat.completions.create(model="m", messages=history)
            doc = await store.get("u")
            assert doc is not None
            expected = working_memory_system_message(WorkingMemoryConfig(), doc.data)["content"]
            sent = fake.bodies[-1]["messages"]
            assert sent[0] == SYSTEM and sent[1] == {"role": "system", "content": expected}
            assert sum(is_working_memory_message(m) for m in sent) == 1 and markups_of(fake.bodies[-1]) == []
    assert (await store.get("u")).data.endswith("coffee now")  # type: ignore[union-attr]
    await client.close()


async def test_bad_tool_arguments_come_back_as_an_error(redis: Redis, keys: Keys) -> None:
    """A tool call whose arguments are not JSON is answered with an error for the model; other tools are not ours."""
    wm = OpenAIChatWorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1"))
    answer = await wm.handle_tool_call({"id": "c1", "function": {"name": "setWorkingMemory", "arguments": "{oops"}})
    assert answer is not None and answer["tool_call_id"] == "c1"
    assert json.loads(answer["content"])["success"] is False
    assert await wm.handle_tool_call({"id": "c2", "function": {"name": "search", "arguments": "{}"}}) is None
    assert await WorkingMemoryStore(redis, keys=keys).get("u") is None


async def test_system_message_delivery_with_a_content_parts_system_message(redis: Redis, keys: Keys) -> None:
    """A system message given as content parts (the API allows a list) is the loop's own: under
    system-message delivery it stays, and the working-memory system message follows it."""
    wm = OpenAIChatWorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1",
                                                    delivery="system-message"))
    own = {"role": "system", "content": [{"type": "text", "text": "You are helpful."}]}
    sent = await wm.prepare([own, {"role": "user", "content": "hi"}])
    assert sent[0] is own and is_working_memory_message(sent[1]) and sent[2]["content"] == "hi"
    again = await wm.prepare(sent)
    assert again == sent
    assert not is_working_memory_message({"role": "user", "content": None})


async def test_our_block_written_back_as_one_text_part_is_still_ours(
    redis_server: RedisServer, redis: Redis, keys: Keys
) -> None:
    """A history store may write string contents back as one text part (the API takes both).
    Our block then came back unrecognised: the next call added the snapshot again, one version
    twice in the request. A single text part is read as its text, as the Agents adapter does."""
    store = WorkingMemoryStore(redis, keys=keys)
    await store.replace("u", "# Notes\n- a")
    async with worker_process(redis_server.url, keys):
        await wait_caught_up(redis, keys)
    wm = OpenAIChatWorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1"))
    sent = await wm.prepare([{"role": "user", "content": "hi"}])
    assert sum(is_working_memory_message(m) for m in sent) == 1
    as_parts = [{**m, "content": [{"type": "text", "text": m["content"]}]} for m in sent]
    again = await wm.prepare([*as_parts, {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more"}])
    texts = [m["content"][0]["text"] if isinstance(m["content"], list) else m["content"] for m in again]
    assert sum(is_working_memory_text(t) for t in texts) == 1, again  # the snapshot, once
    assert sum(is_working_memory_message(m) for m in again) == 1
