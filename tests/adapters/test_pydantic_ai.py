"""The PydanticAI capability, driven through PydanticAI's real agent loop.

The model is PydanticAI's own test facility, ``FunctionModel`` (a scripted function that
records every message list the agent sends it); the history limit is a ``ProcessHistory``
capability keeping the last messages, as PydanticAI v2 users trim. Real Redis, a real
worker process, a second writer in another process.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic_ai import Agent
from pydantic_ai.capabilities import AbstractCapability, Hooks, ProcessHistory
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from redis.asyncio import Redis

from signals.agent import AgentWorkingMemory
from signals.core.memory import WorkingMemoryConfig
from signals.core.system_message import working_memory_system_message
from signals.integrations._core import is_working_memory_text
from signals.integrations.pydantic_ai import (
    WorkingMemory,
    is_working_memory_message,
    is_working_memory_part,
    strip_working_memory,
    working_memory_tool,
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
KEEP = 6  # the history limit, in messages


def markups_of(messages: list[ModelMessage]) -> list[str]:
    """The working-memory blocks a request carried, in order."""
    return [p.content for m in messages if isinstance(m, ModelRequest) for p in m.parts
            if isinstance(p, UserPromptPart) and isinstance(p.content, str) and is_working_memory_text(p.content)]


def check_placement(messages: list[ModelMessage]) -> None:
    """Blocks are user parts of a request, after that request's tool results."""
    for m in messages:
        if isinstance(m, ModelRequest):
            kinds = ["wm" if is_working_memory_part(p) else p.part_kind for p in m.parts]
            if "wm" in kinds and "tool-return" in kinds:
                assert max(i for i, k in enumerate(kinds) if k == "tool-return") < kinds.index("wm"), kinds


def trim(messages: list[ModelMessage]) -> list[ModelMessage]:
    """The last KEEP messages, starting at a request that is not (only) tool results."""
    start = max(0, len(messages) - KEEP)
    while start < len(messages) - 1:
        m = messages[start]
        if isinstance(m, ModelRequest) and not any(isinstance(p, ToolReturnPart | RetryPromptPart) for p in m.parts):
            break
        start += 1
    return messages[start:]


@dataclass
class ScriptedModel:
    """The scripted LLM: records each call; on a tool turn writes what it rebuilt plus a fact."""

    audit: Audit
    store: WorkingMemoryStore
    turn: int = 0
    force_tool: bool = False  # call setWorkingMemory even when it is not offered (read-only test)

    def __post_init__(self) -> None:
        self.requests: list[list[ModelMessage]] = []
        self.infos: list[AgentInfo] = []

    async def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        self.requests.append(list(messages))
        self.infos.append(info)
        check_placement(messages)
        markups = markups_of(messages)
        self.audit.calls.append(CallRecord(markups, await self.audit.expect(self.store, "u"), info.instructions))
        last = messages[-1]
        answering = isinstance(last, ModelRequest) and any(
            isinstance(p, ToolReturnPart | RetryPromptPart) for p in last.parts)
        offered = any(t.name == "setWorkingMemory" for t in info.function_tools)
        if self.turn in TOOL_TURNS and not answering and (offered or self.force_tool):
            return ModelResponse(parts=[TextPart("noting that"), ToolCallPart(
                "setWorkingMemory", {"memory": next_memory(markups, self.turn)}, tool_call_id=f"call-{self.turn}")])
        return ModelResponse(parts=[TextPart(f"reply {self.turn}")])


@dataclass
class CaughtUp(AbstractCapability[Any]):
    """Test machinery, first in the capabilities: the worker has caught up before every call,
    so the stored document is the lane's latest version (what the model must rebuild)."""

    redis: Redis
    keys: Keys

    async def before_model_request(self, ctx: Any, request_context: Any) -> Any:
        await wait_caught_up(self.redis, self.keys)
        return request_context


async def test_conversation(redis_server: RedisServer, redis: Redis, keys: Keys) -> None:
    """22 turns: tool writes, another process writes, the history limit drops the snapshot; audited from requests."""
    store = WorkingMemoryStore(redis, keys=keys)
    await store.create_thread("t1", "u")
    audit = Audit(redis, keys, "t1")
    model = ScriptedModel(audit, store)
    wm = WorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1"))
    agent = Agent(FunctionModel(model), instructions=SYSTEM)
    capabilities = [CaughtUp(redis, keys), ProcessHistory(trim), wm]
    history: list[ModelMessage] | None = None
    async with worker_process(redis_server.url, keys):
        for turn in range(1, TURNS + 1):
            model.turn = turn
            if turn in OTHER_PROCESS_TURNS:
                current = await audit.expect(store, "u")
                write_from_other_process(redis_server.url, keys, "u", f"{current}\n- another process, turn {turn}")
            result = await agent.run(f"user says {turn}", message_history=history, capabilities=capabilities)
            history = result.all_messages()
            # the blocks persist in the run's history (what the application stores and passes back)
            assert turn < min(TOOL_TURNS) or any(
                is_working_memory_part(p) for m in history if isinstance(m, ModelRequest) for p in m.parts)
    records = await audit.check()
    assert sum(r.reason == "reinject" for r in records) >= 2
    assert any(r.mode == "delta" for r in records)
    assert {c.system for c in audit.calls} == {SYSTEM}
    final = await audit.expect(store, "u")
    for turn in TOOL_TURNS:
        assert f"item number {turn}" in final
    for turn in OTHER_PROCESS_TURNS:
        assert f"another process, turn {turn}" in final
    assert len(model.requests) == TURNS + len(TOOL_TURNS)
    # a merged turn: working memory in the request that carries the tool's result, after it
    assert any(isinstance(m, ModelRequest) and any(isinstance(p, ToolReturnPart) for p in m.parts)
               and any(is_working_memory_part(p) for p in m.parts) for r in model.requests for m in r)


async def test_read_only_and_system_message(redis_server: RedisServer, redis: Redis, keys: Keys) -> None:
    """A read-only agent gets no tool and cannot write; system-message delivery sends Mastra's system message."""
    store = WorkingMemoryStore(redis, keys=keys)
    await store.replace("u", "# Notes\n- likes tea")
    audit = Audit(redis, keys, "t1")
    model = ScriptedModel(audit, store, turn=2, force_tool=True)
    agent = Agent(FunctionModel(model), instructions=SYSTEM)
    read_only = WorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1", read_only=True))
    system = WorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t2", delivery="system-message"))
    async with worker_process(redis_server.url, keys):
        await wait_caught_up(redis, keys)
        assert read_only.get_toolset() is None and working_memory_tool(read_only.memory) is None
        await agent.run("hi", capabilities=[read_only])
        assert not model.infos[0].function_tools
        assert len(markups_of(model.requests[0])) == 1
        # the model called setWorkingMemory anyway: PydanticAI knows no such tool, nothing is written
        refused = [p for p in model.requests[1][-1].parts if isinstance(p, ToolReturnPart)]
        assert refused and "Unknown tool name: 'setWorkingMemory'" in str(refused[0].content)
        assert (await store.get("u")).data == "# Notes\n- likes tea"  # type: ignore[union-attr]
        model.turn, model.force_tool = 3, False
        history: list[ModelMessage] | None = None
        for step in range(2):
            result = await agent.run(f"hi {step}", message_history=history, capabilities=[system])
            history = result.all_messages()
            doc = await store.get("u")
            assert doc is not None
            expected = working_memory_system_message(WorkingMemoryConfig(), doc.data)["content"]
            assert model.infos[-1].instructions == f"{SYSTEM}\n\n{expected}"
            assert markups_of(model.requests[-1]) == []
            assert any(t.name == "setWorkingMemory" for t in model.infos[-1].function_tools)
    assert [r.mode for r in await DeliveryLog(redis, keys).read("t2")] == ["snapshot"]


def test_recognising_working_memory_messages() -> None:
    """Blocks and the system-message text are recognised, as parts and as whole requests; user text is not."""
    markup = '<working-memory format="markdown" scope="resource">x</working-memory>'
    system = working_memory_system_message(WorkingMemoryConfig(), "# Notes")["content"]
    assert is_working_memory_part(UserPromptPart(markup))
    assert is_working_memory_part(SystemPromptPart(system))
    assert is_working_memory_message(ModelRequest(parts=[UserPromptPart(markup)]))
    assert not is_working_memory_message(ModelRequest(parts=[UserPromptPart("hi"), UserPromptPart(markup)]))
    assert not is_working_memory_message(ModelRequest(parts=[UserPromptPart(f"{markup} and more")]))
    assert not is_working_memory_message(ModelResponse(parts=[TextPart(markup)]))
    history: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart("hi"), UserPromptPart(markup)]),
                                   ModelResponse(parts=[TextPart("hello")]),
                                   ModelRequest(parts=[UserPromptPart(markup)])]
    stripped = strip_working_memory(history)
    assert len(stripped) == 2 and [p.content for p in stripped[0].parts] == ["hi"] and stripped[1] is history[1]


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "age": {"type": "integer"}}}


async def test_schema_mode_tool(redis: Redis, keys: Keys) -> None:
    """Schema mode: the model is offered the schema's fields and its writes merge; a bad one comes back as a result."""
    config = WorkingMemoryConfig(scope="thread", schema=SCHEMA)
    store = WorkingMemoryStore(redis, keys=keys, config=config)
    await store.create_thread("t1", "u")
    memory = AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1", config=config)
    writes = iter([{"city": "Paris", "age": "old"}, {"city": "Paris"}, {"age": 36}])
    seen: list[AgentInfo] = []
    results: list[Any] = []

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(info)
        results.extend(p.content for p in messages[-1].parts if isinstance(p, ToolReturnPart))
        write = next(writes, None)
        return ModelResponse(parts=[ToolCallPart("setWorkingMemory", write) if write else TextPart("done")])

    await Agent(FunctionModel(model)).run("hi", capabilities=[WorkingMemory(memory)])
    tool = seen[0].function_tools[0]
    assert tool.name == "setWorkingMemory" and set(tool.parameters_json_schema["properties"]) == {"city", "age"}
    assert not results[0]["success"] and "age" in results[0]["error"]  # the refused write, told to the model
    assert [r["success"] for r in results[1:]] == [True, True]
    doc = await store.get("u", "t1")
    assert doc is not None and json.loads(doc.data) == {"city": "Paris", "age": 36}


@pytest.mark.parametrize("arguments", ["[1, 2]", '"hello"', "null"])
async def test_tool_arguments_that_are_not_an_object_are_a_tool_error_not_a_crash(
    redis: Redis, keys: Keys, arguments: str
) -> None:
    """The tool took any JSON value as its arguments (``Tool.from_schema``) and PydanticAI then
    unpacked it into the function: a model sending a list, a string or null made the whole
    ``agent.run`` raise (TypeError, AssertionError). It comes back to the model as the tool's
    result naming what was wrong, as in every other loop, and nothing is written."""
    memory = AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1")
    results: list[Any] = []

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        results.extend(p.content for p in messages[-1].parts if isinstance(p, ToolReturnPart))
        if results:
            return ModelResponse(parts=[TextPart("done")])
        return ModelResponse(parts=[ToolCallPart("setWorkingMemory", arguments, tool_call_id="c1")])

    result = await Agent(FunctionModel(model)).run("hi", capabilities=[WorkingMemory(memory)])
    assert result.output == "done" and len(results) == 1
    assert results[0]["success"] is False and "JSON" in results[0]["error"], results
    assert await WorkingMemoryStore(redis, keys=keys).get("u") is None


async def test_request_only_changes_stay_out_of_the_history(redis_server: RedisServer, redis: Redis,
                                                            keys: Keys) -> None:
    """An earlier capability's request-only edit is not persisted; the blocks are, and stay held across runs."""
    store = WorkingMemoryStore(redis, keys=keys)
    await store.replace("u", "# Notes\n- likes tea")
    memory = AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1")
    async with running_workers(redis_server.url, keys):
        await wait_caught_up(redis, keys)
    received: list[list[ModelMessage]] = []

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        received.append(messages)
        return ModelResponse(parts=[TextPart("ok")])

    async def redact(ctx: Any, request_context: Any) -> Any:
        request_context.messages = [dataclasses.replace(m, parts=[
            dataclasses.replace(p, content="[redacted]") if isinstance(p, UserPromptPart) and p.content == "secret"
            else p for p in m.parts]) if isinstance(m, ModelRequest) else m for m in request_context.messages]
        return request_context

    agent = Agent(FunctionModel(model))
    capabilities = [Hooks(before_model_request=redact), WorkingMemory(memory)]
    history = (await agent.run("secret", capabilities=capabilities)).all_messages()
    assert [p.content for p in received[0][0].parts] == ["[redacted]", markups_of(received[0])[0]]
    assert [p.content for p in history[0].parts] == ["secret", markups_of(received[0])[0]]
    await agent.run("again", message_history=history, capabilities=capabilities)
    assert markups_of(received[1]) == markups_of(received[0])  # still held: not delivered again
    assert len(await DeliveryLog(redis, keys).read("t1")) == 1


async def test_history_from_another_process(redis_server: RedisServer, redis: Redis, keys: Keys) -> None:
    """A stored history's blocks that this window did not make are removed; a fresh snapshot is delivered once."""
    store = WorkingMemoryStore(redis, keys=keys)
    await store.replace("u", "# Notes\n- likes tea")
    received: list[list[ModelMessage]] = []

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        received.append(messages)
        return ModelResponse(parts=[TextPart("ok")])

    agent = Agent(FunctionModel(model))
    async with running_workers(redis_server.url, keys):
        await wait_caught_up(redis, keys)
        first = WorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1"))
        saved = (await agent.run("hi", capabilities=[first])).all_messages()
        await store.replace("u", "# Notes\n- likes tea\n- lives in Paris")
        await wait_caught_up(redis, keys)
        # another process restores the saved history with a window of its own
        second = WorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1"))
        history = (await agent.run("again", message_history=saved, capabilities=[second])).all_messages()
    blocks = markups_of(received[-1])
    assert len(blocks) == 1 and "lives in Paris" in blocks[0] and 'patch="' not in blocks[0]
    assert markups_of(history) == blocks  # the stale block is gone from the history too
