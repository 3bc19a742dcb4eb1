"""The OpenAI Agents SDK adapter, driven through the real ``Runner.run`` loop, and through
``Runner.run_streamed`` (the SDK's streamed loop, which calls the model's
``stream_response``).

The model is a scripted ``agents.Model`` subclass that records every input it received
(instructions, items, tools) and answers with text or a ``setWorkingMemory`` function
call (streamed: as the one ``response.completed`` event that carries that answer);
everything else is the SDK's own loop: the ``call_model_input_filter``, the
function tool, a ``SQLiteSession`` whose ``SessionSettings(limit=...)`` is the history
limit. Real Redis, a real worker process, a second writer in another process.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from agents import Agent, FunctionTool, Model, ModelResponse, Runner, SQLiteSession, Usage
from agents.memory import SessionSettings
from agents.run_config import CallModelData, ModelInputData
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)
from redis.asyncio import Redis

from signals.agent import AgentWorkingMemory
from signals.core.memory import WorkingMemoryConfig
from signals.core.system_message import working_memory_system_message
from signals.integrations.openai_agents import OpenAIAgentsWorkingMemory, is_working_memory_message
from signals.streams.keys import Keys
from signals.streams.progress import wait_caught_up
from signals.streams.store import WorkingMemoryStore
from tests.adapters.support import Audit, CallRecord, next_memory, worker_process, write_from_other_process
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]
SYSTEM = "You are a helpful assistant. Be brief."
TURNS = 22
TOOL_TURNS = {2, 6, 9, 13, 17, 20}
OTHER_PROCESS_TURNS = {8, 15}
KEEP = 5  # the session's history limit, in items


def _plain(item: Any) -> dict[str, Any]:
    return item if isinstance(item, dict) else item.model_dump(exclude_unset=True)


class ScriptedModel(Model):
    """Stands in for an LLM: records every input; calls setWorkingMemory on the tool turns."""

    def __init__(self) -> None:
        self.calls: list[tuple[str | None, list[dict[str, Any]], list[str]]] = []
        self.turns: list[int] = []  # the turn of each call
        self.turn = 0
        self.streamed = 0  # calls that came through stream_response

    async def get_response(self, system_instructions: str | None, input: str | list[Any],
                           model_settings: Any, tools: list[Any], output_schema: Any, handoffs: list[Any],
                           tracing: Any, *, previous_response_id: str | None, conversation_id: str | None,
                           prompt: Any) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else [_plain(i) for i in input]
        names = [t.name for t in tools]
        self.calls.append((system_instructions, json.loads(json.dumps(items)), names))
        self.turns.append(self.turn)
        n = len(self.calls)
        conversation = [i for i in items if not is_working_memory_message(i)]
        output: list[Any]
        if self.turn in TOOL_TURNS and conversation[-1].get("type") != "function_call_output" and \
                "setWorkingMemory" in names:
            arguments = json.dumps({"memory": next_memory(markups_of(items), self.turn)})
            output = [ResponseFunctionToolCall(id=f"fc_{n}", call_id=f"call_{n}", type="function_call",
                                               name="setWorkingMemory", arguments=arguments, status="completed")]
        else:
            output = [ResponseOutputMessage(id=f"msg_{n}", type="message", role="assistant", status="completed",
                                            content=[ResponseOutputText(type="output_text", text=f"reply {n}",
                                                                        annotations=[])])]
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    async def stream_response(self, system_instructions: str | None, input: str | list[Any],
                              model_settings: Any, tools: list[Any], output_schema: Any, handoffs: list[Any],
                              tracing: Any, *, previous_response_id: str | None, conversation_id: str | None,
                              prompt: Any) -> AsyncIterator[Any]:
        """The same answer as :meth:`get_response`, as the stream's terminal event (the
        SDK builds the turn's items from it, as from a streamed provider response)."""
        self.streamed += 1
        answer = await self.get_response(system_instructions, input, model_settings, tools, output_schema, handoffs,
                                         tracing, previous_response_id=previous_response_id,
                                         conversation_id=conversation_id, prompt=prompt)
        response = Response.model_construct(id=f"resp_{len(self.calls)}", object="response", created_at=0.0,
                                            model="scripted", output=answer.output, parallel_tool_calls=False,
                                            tool_choice="auto", tools=[], usage=None)
        yield ResponseCompletedEvent(type="response.completed", sequence_number=0, response=response)


def markups_of(items: list[dict[str, Any]]) -> list[str]:
    """The working-memory messages an input carried, in order."""
    return [i["content"] for i in items if is_working_memory_message(i)]


class CatchUp:
    """An ``inner`` filter for the test: waits for the worker, then notes what the model must rebuild."""

    def __init__(self, redis: Redis, keys: Keys, store: WorkingMemoryStore, audit: Audit) -> None:
        self.redis, self.keys, self.store, self.audit = redis, keys, store, audit
        self.expected: list[str] = []

    async def __call__(self, data: CallModelData[Any]) -> ModelInputData:
        await wait_caught_up(self.redis, self.keys)
        self.expected.append(await self.audit.expect(self.store, "u"))
        return data.model_data


@pytest.mark.parametrize("streamed", [False, True], ids=["run", "run_streamed"])
async def test_conversation(redis_server: RedisServer, redis: Redis, keys: Keys, streamed: bool) -> None:
    """22 runs: tool writes, another process writes, the session limit drops the snapshot; audited from inputs.
    Streamed runs go through the same model-input filter: the same audit holds."""
    store = WorkingMemoryStore(redis, keys=keys)
    await store.create_thread("t1", "u")
    audit = Audit(redis, keys, "t1")
    catch_up = CatchUp(redis, keys, store, audit)
    wm = OpenAIAgentsWorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1"), inner=catch_up)
    model = ScriptedModel()
    agent = Agent(name="assistant", instructions=SYSTEM, model=model, tools=wm.tools())
    session = SQLiteSession("t1", session_settings=SessionSettings(limit=KEEP))
    async with worker_process(redis_server.url, keys):
        for turn in range(1, TURNS + 1):
            model.turn = turn
            if turn in OTHER_PROCESS_TURNS:
                current = await audit.expect(store, "u")
                write_from_other_process(redis_server.url, keys, "u", f"{current}\n- another process, turn {turn}")
            config = wm.run_config(tracing_disabled=True)
            if streamed:
                result = Runner.run_streamed(agent, f"user says {turn}", session=session, run_config=config)
                async for _ in result.stream_events():
                    pass
            else:
                result = await Runner.run(agent, f"user says {turn}", session=session, run_config=config)
            assert result.final_output.startswith("reply")
    audit.calls = [CallRecord(markups_of(items), expected, system)
                   for (system, items, _), expected in zip(model.calls, catch_up.expected, strict=True)]
    records = await audit.check()
    assert sum(r.reason == "reinject" for r in records) >= 2
    assert any(r.mode == "delta" for r in records)
    assert {c.system for c in audit.calls} == {SYSTEM}
    final = await audit.expect(store, "u")
    for turn in TOOL_TURNS:
        assert f"item number {turn}" in final
    for turn in OTHER_PROCESS_TURNS:
        assert f"another process, turn {turn}" in final
    assert len(model.calls) == TURNS + len(TOOL_TURNS)
    assert model.streamed == (len(model.calls) if streamed else 0)
    # within a run (a tool call, then the next model call) the input only grows: a byte-stable prefix
    for k in range(len(model.calls) - 1):
        if model.turns[k] == model.turns[k + 1]:
            before, after = model.calls[k][1], model.calls[k + 1][1]
            assert after[:len(before)] == before and len(after) > len(before)
    # the session never stored a working-memory message: the filter's insertions are per call
    assert not any(is_working_memory_message(i) for i in await session.get_items(limit=1000))


async def test_read_only_and_system_message(redis_server: RedisServer, redis: Redis, keys: Keys) -> None:
    """A read-only agent gets no tool and cannot write; system-message delivery sends Mastra's system message."""
    store = WorkingMemoryStore(redis, keys=keys)
    await store.replace("u", "# Notes\n- likes tea")
    model = ScriptedModel()
    model.turn = 2  # a tool turn: the model calls the tool when it is offered
    read_only = OpenAIAgentsWorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1",
                                                             read_only=True))
    assert read_only.tools() == []
    system = OpenAIAgentsWorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t2",
                                                          delivery="system-message"))
    async with worker_process(redis_server.url, keys):
        await wait_caught_up(redis, keys)
        agent = Agent(name="reader", instructions=SYSTEM, model=model, tools=read_only.tools())
        await Runner.run(agent, "hi", run_config=read_only.run_config(tracing_disabled=True))
        instructions, items, names = model.calls[-1]
        assert names == [] and instructions == SYSTEM and len(markups_of(items)) == 1
        refused = await read_only.agent.call_tool({"memory": "# Notes\n- forged"})
        assert not refused["success"]
        writer = Agent(name="writer", instructions=SYSTEM, model=model, tools=system.tools())
        model.turn = 1
        for text in ("# Notes\n- likes tea", "# Notes\n- likes coffee now"):
            await store.replace("u", text)
            await Runner.run(writer, "hi", run_config=system.run_config(tracing_disabled=True))
            instructions, items, names = model.calls[-1]
            expected = working_memory_system_message(WorkingMemoryConfig(), text)["content"]
            assert instructions == f"{SYSTEM}\n\n{expected}" and markups_of(items) == []
            assert names == ["setWorkingMemory"]
    doc = await store.get("u")
    assert doc is not None and doc.data.endswith("coffee now")


async def test_bad_tool_arguments_come_back_as_an_error(redis: Redis, keys: Keys) -> None:
    """Arguments that are not JSON, or not the memory string, are an error result for the model; nothing is stored."""
    wm = OpenAIAgentsWorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1"))
    (tool,) = wm.tools()
    assert isinstance(tool, FunctionTool) and tool.name == "setWorkingMemory"
    for arguments in ("not json", json.dumps({"memory": 42}), "[]"):
        result = json.loads(await tool.on_invoke_tool(None, arguments))  # type: ignore[arg-type]
        assert result["success"] is False and result["error"]
    assert await WorkingMemoryStore(redis, keys=keys).get("u") is None
