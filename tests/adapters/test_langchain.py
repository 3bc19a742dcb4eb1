"""The LangChain middleware, driven through ``create_agent``'s real graph (LangGraph, a checkpointer).

The model is a scripted ``BaseChatModel`` (langchain-core's fake chat models cannot bind
tools, so this one does and records every message list it is sent); the history limit
is LangChain's own ``SummarizationMiddleware`` (with a scripted summariser), which
rewrites the graph state and so drops old messages, the snapshot's anchor among them.
Real Redis, a real worker process, a second writer in another process.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest, ModelResponse, SummarizationMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.utils.function_calling import convert_to_openai_tool
from langgraph.checkpoint.memory import InMemorySaver
from redis.asyncio import Redis

from signals.agent import AgentWorkingMemory
from signals.core.memory import WorkingMemoryConfig
from signals.core.system_message import working_memory_system_message
from signals.errors import InvalidInputError
from signals.integrations._core import is_working_memory_text
from signals.integrations.langchain import WorkingMemoryMiddleware, is_working_memory_message, working_memory_tool
from signals.streams.deliveries import DeliveryLog
from signals.streams.keys import Keys
from signals.streams.progress import wait_caught_up
from signals.streams.store import WorkingMemoryStore
from tests.adapters.support import Audit, CallRecord, next_memory, worker_process, write_from_other_process
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]
SYSTEM = "You are a helpful assistant. Be brief."
TURNS = 22
TOOL_TURNS = {2, 5, 9, 12, 16, 20}
OTHER_PROCESS_TURNS = {7, 14}


def markups_of(messages: list[BaseMessage]) -> list[str]:
    """The working-memory blocks a request carried, in order."""
    return [m.content for m in messages if isinstance(m, HumanMessage) and isinstance(m.content, str)
            and is_working_memory_text(m.content)]


def check_placement(messages: list[BaseMessage]) -> None:
    """An AIMessage's tool calls are followed by their ToolMessages, never by a working-memory block."""
    for k, m in enumerate(messages):
        if isinstance(m, AIMessage) and m.tool_calls:
            ids = {c["id"] for c in m.tool_calls}
            following = messages[k + 1:k + 1 + len(ids)]
            assert all(isinstance(f, ToolMessage) for f in following), [type(f).__name__ for f in following]
            assert {f.tool_call_id for f in following if isinstance(f, ToolMessage)} == ids


def _tool_names(kwargs: dict[str, Any]) -> set[str]:
    return {getattr(t, "name", None) or t["function"]["name"] for t in kwargs.get("tools") or []}


class ScriptedModel(BaseChatModel):
    """The scripted LLM: records each call; on a tool turn writes what it rebuilt plus a fact."""

    audit: Any
    store: Any
    turn: int = 0
    requests: list[list[BaseMessage]] = []  # noqa: RUF012 - a pydantic field, copied per instance
    tools_seen: list[set[str]] = []  # noqa: RUF012

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        """Tools as call arguments (what a provider model's bind_tools does, minus the conversion)."""
        return self.bind(tools=tools, **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        raise NotImplementedError("the test drives the agent with ainvoke")

    async def _agenerate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                         **kwargs: Any) -> ChatResult:
        self.requests.append(list(messages))
        self.tools_seen.append(_tool_names(kwargs))
        check_placement(messages)
        markups = markups_of(messages)
        system = messages[0].content if isinstance(messages[0], SystemMessage) else None
        self.audit.calls.append(CallRecord(markups, await self.audit.expect(self.store, "u"), system))
        conversation = [m for m in messages if not is_working_memory_message(m)]
        answering = isinstance(conversation[-1], ToolMessage)
        if self.turn in TOOL_TURNS and not answering and "setWorkingMemory" in self.tools_seen[-1]:
            message = AIMessage(content="noting that", tool_calls=[{
                "name": "setWorkingMemory", "args": {"memory": next_memory(markups, self.turn)},
                "id": f"call-{self.turn}", "type": "tool_call"}])
        else:
            message = AIMessage(content=f"reply {self.turn}")
        return ChatResult(generations=[ChatGeneration(message=message)])


class Summariser(BaseChatModel):
    """The summarisation middleware's model: a fixed summary per call."""

    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "summariser"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        self.calls += 1
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content=f"summary number {self.calls}"))])


class CaughtUp(AgentMiddleware):
    """Test machinery, outermost: the worker has caught up before every call, so the stored
    document is the lane's latest version (what the model must rebuild)."""

    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis, self.keys = redis, keys

    async def awrap_model_call(self, request: ModelRequest,
                               handler: Callable[[ModelRequest], Awaitable[ModelResponse]]) -> ModelResponse:
        await wait_caught_up(self.redis, self.keys)
        return await handler(request)


def _model(audit: Audit, store: WorkingMemoryStore, turn: int = 0) -> ScriptedModel:
    return ScriptedModel(audit=audit, store=store, turn=turn, requests=[], tools_seen=[])


async def test_conversation(redis_server: RedisServer, redis: Redis, keys: Keys) -> None:
    """22 turns: tool writes, another process writes, summarisation drops the snapshot; audited from requests."""
    store = WorkingMemoryStore(redis, keys=keys)
    await store.create_thread("t1", "u")
    audit = Audit(redis, keys, "t1")
    model = _model(audit, store)
    summariser = Summariser()
    wm = WorkingMemoryMiddleware(AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1"))
    agent = create_agent(model, system_prompt=SYSTEM, checkpointer=InMemorySaver(), middleware=[
        CaughtUp(redis, keys), SummarizationMiddleware(summariser, trigger=("messages", 10), keep=("messages", 4)),
        wm])
    config: Any = {"configurable": {"thread_id": "t1"}}
    async with worker_process(redis_server.url, keys):
        for turn in range(1, TURNS + 1):
            model.turn = turn
            if turn in OTHER_PROCESS_TURNS:
                current = await audit.expect(store, "u")
                write_from_other_process(redis_server.url, keys, "u", f"{current}\n- another process, turn {turn}")
            state = await agent.ainvoke({"messages": [HumanMessage(f"user says {turn}")]}, config)
            # nothing of ours is written to the graph state (the checkpointed history)
            assert not any(is_working_memory_message(m) for m in state["messages"])
    records = await audit.check()
    assert summariser.calls >= 2
    assert sum(r.reason == "reinject" for r in records) >= 2
    assert any(r.mode == "delta" for r in records)
    assert {c.system for c in audit.calls} == {SYSTEM}
    final = await audit.expect(store, "u")
    for turn in TOOL_TURNS:
        assert f"item number {turn}" in final
    for turn in OTHER_PROCESS_TURNS:
        assert f"another process, turn {turn}" in final
    assert len(model.requests) == TURNS + len(TOOL_TURNS)
    # a block right after a tool result (the write's new version, pushed into the next call)
    assert any(isinstance(r[k], ToolMessage) and is_working_memory_message(r[k + 1])
               for r in model.requests for k in range(len(r) - 1))
    # another thread's model never sees this conversation's memory
    with pytest.raises(InvalidInputError, match="make one per conversation"):
        await agent.ainvoke({"messages": [HumanMessage("hello")]}, {"configurable": {"thread_id": "other"}})


async def test_read_only_and_system_message(redis_server: RedisServer, redis: Redis, keys: Keys) -> None:
    """A read-only agent gets no tool and cannot write; system-message delivery sends Mastra's system message."""
    store = WorkingMemoryStore(redis, keys=keys)
    await store.replace("u", "# Notes\n- likes tea")
    audit = Audit(redis, keys, "t1")
    read_only = WorkingMemoryMiddleware(AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1",
                                                           read_only=True))
    system = WorkingMemoryMiddleware(AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t2",
                                                        delivery="system-message"))
    async with worker_process(redis_server.url, keys):
        await wait_caught_up(redis, keys)
        assert read_only.tools == [] and working_memory_tool(read_only.memory) is None
        model = _model(audit, store, turn=2)
        agent = create_agent(model, system_prompt=SYSTEM, middleware=[read_only])
        await agent.ainvoke({"messages": [HumanMessage("hi")]})
        assert model.tools_seen == [set()] and len(markups_of(model.requests[0])) == 1
        refused = await read_only.memory.call_tool({"memory": "# Notes\n- forged"})
        assert not refused["success"] and "read-only" in refused["error"]
        model = _model(audit, store, turn=3)
        agent = create_agent(model, system_prompt=SYSTEM, middleware=[system], checkpointer=InMemorySaver())
        for step in range(2):
            await agent.ainvoke({"messages": [HumanMessage(f"hi {step}")]}, {"configurable": {"thread_id": "t2"}})
            doc = await store.get("u")
            assert doc is not None
            expected = working_memory_system_message(WorkingMemoryConfig(), doc.data)["content"]
            assert model.requests[-1][0].content == f"{SYSTEM}\n\n{expected}"
            assert markups_of(model.requests[-1]) == []
            assert model.tools_seen[-1] == {"setWorkingMemory"}
    assert (await store.get("u")).data == "# Notes\n- likes tea"  # type: ignore[union-attr]
    assert [r.mode for r in await DeliveryLog(redis, keys).read("t2")] == ["snapshot"]


def test_recognising_working_memory_messages() -> None:
    """Blocks and the system-message text are recognised; user text and AI text are not."""
    markup = '<working-memory format="markdown" scope="resource">x</working-memory>'
    system = working_memory_system_message(WorkingMemoryConfig(), "# Notes")["content"]
    assert is_working_memory_message(HumanMessage(markup))
    assert is_working_memory_message(HumanMessage([{"type": "text", "text": markup}]))
    assert is_working_memory_message(SystemMessage(system))
    assert not is_working_memory_message(HumanMessage(f"{markup} and more"))
    assert not is_working_memory_message(HumanMessage("hi"))
    assert not is_working_memory_message(AIMessage(markup))
    assert not is_working_memory_message(SystemMessage(SYSTEM))


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "age": {"type": "integer"}}}


async def test_schema_mode_tool(redis: Redis, keys: Keys) -> None:
    """Schema mode: the model is offered the schema's fields and its writes merge; a bad one comes back as a result."""
    config = WorkingMemoryConfig(scope="thread", schema=SCHEMA)
    store = WorkingMemoryStore(redis, keys=keys, config=config)
    await store.create_thread("t1", "u")
    memory = AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1", config=config)
    writes = iter([{"city": "Paris", "age": "old"}, {"city": "Paris"}, {"age": 36}])
    seen: list[list[BaseMessage]] = []
    schemas: list[Any] = []

    class Writer(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "writer"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            schemas.extend(convert_to_openai_tool(t)["function"]["parameters"] for t in tools)
            return self.bind(tools=tools, **kwargs)

        def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                      **kwargs: Any) -> ChatResult:
            seen.append(list(messages))
            write = next(writes, None)
            calls = [{"name": "setWorkingMemory", "args": write, "id": f"c{len(seen)}", "type": "tool_call"}]
            message = AIMessage(content="", tool_calls=calls) if write else AIMessage(content="done")
            return ChatResult(generations=[ChatGeneration(message=message)])

    agent = create_agent(Writer(), middleware=[WorkingMemoryMiddleware(memory)])
    await agent.ainvoke({"messages": [HumanMessage("hi")]})
    assert set(schemas[0]["properties"]) == {"city", "age"}
    results = [json.loads(m.content) for m in seen[-1] if isinstance(m, ToolMessage) and isinstance(m.content, str)]
    assert not results[0]["success"] and "age" in results[0]["error"]  # the refused write, told to the model
    assert [r["success"] for r in results[1:]] == [True, True]
    doc = await store.get("u", "t1")
    assert doc is not None and json.loads(doc.data) == {"city": "Paris", "age": 36}
