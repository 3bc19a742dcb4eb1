"""The Google ADK callback and tool, driven through ADK's real ``Runner`` and session service.

The model is a custom ``BaseLlm`` (scripted, recording every ``LlmRequest``'s contents and
system instruction); the history limit is ADK's own event compaction
(``App(events_compaction_config=...)``, with a scripted summariser), which replaces old
events with a summary, the snapshot's anchor among them. Real Redis, a real worker
process, a second writer in another process. ADK marks event compaction experimental and
says so with a ``UserWarning`` once per process: the tests that use it ignore that one
warning (the suite turns warnings into errors).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from typing import Any

import pytest
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.apps._configs import EventsCompactionConfig
from google.adk.apps.base_events_summarizer import BaseEventsSummarizer
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions, EventCompaction
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.sessions import InMemorySessionService
from google.genai import types
from redis.asyncio import Redis

from signals.agent import AgentWorkingMemory
from signals.core.memory import WorkingMemoryConfig
from signals.core.models import Attributes
from signals.core.render import signal_markup
from signals.core.system_message import working_memory_system_message
from signals.errors import InvalidInputError
from signals.integrations._core import is_working_memory_text
from signals.integrations.adk import WorkingMemory, WorkingMemoryTool, _Codec, is_working_memory_message
from signals.streams.deliveries import DeliveryLog
from signals.streams.keys import Keys
from signals.streams.progress import wait_caught_up
from signals.streams.store import WorkingMemoryStore
from tests.adapters.support import Audit, CallRecord, next_memory, worker_process, write_from_other_process
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis,
              pytest.mark.filterwarnings(r"ignore:\[EXPERIMENTAL\]:UserWarning")]
SYSTEM = "You are a helpful assistant. Be brief."
TURNS = 22
TOOL_TURNS = {2, 5, 9, 12, 16, 20}
OTHER_PROCESS_TURNS = {7, 14}


def markups_of(contents: list[types.Content]) -> list[str]:
    """The working-memory blocks a request carried, in order."""
    return [p.text for c in contents for p in c.parts or [] if p.text is not None and is_working_memory_text(p.text)]


def check_placement(contents: list[types.Content]) -> None:
    """A function call is answered by the next content, whose function responses come first."""
    for k, c in enumerate(contents):
        parts = c.parts or []
        kinds = ["response" if p.function_response else "wm" if is_working_memory_message(p) else "other"
                 for p in parts]
        if "response" in kinds:
            assert kinds[:kinds.count("response")] == ["response"] * kinds.count("response"), kinds
            assert k > 0 and any(p.function_call for p in contents[k - 1].parts or [])


class ScriptedModel(BaseLlm):
    """The scripted LLM: records each call; on a tool turn writes what it rebuilt plus a fact."""

    model: str = "scripted"
    audit: Any = None
    store: Any = None
    turn: int = 0
    requests: list[list[types.Content]] = []  # noqa: RUF012 - a pydantic field, copied per instance
    systems: list[str] = []  # noqa: RUF012
    tools_seen: list[set[str]] = []  # noqa: RUF012

    async def generate_content_async(self, llm_request: LlmRequest,
                                     stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        contents = [c.model_copy(deep=True) for c in llm_request.contents]
        self.requests.append(contents)
        system = llm_request.config.system_instruction
        assert isinstance(system, str)
        self.systems.append(system)
        self.tools_seen.append(set(llm_request.tools_dict))
        check_placement(contents)
        markups = markups_of(contents)
        self.audit.calls.append(CallRecord(markups, await self.audit.expect(self.store, "u"), system))
        answering = any(p.function_response for p in contents[-1].parts or [])
        if self.turn in TOOL_TURNS and not answering and "setWorkingMemory" in self.tools_seen[-1]:
            call = types.FunctionCall(name="setWorkingMemory", args={"memory": next_memory(markups, self.turn)})
            parts = [types.Part(text="noting that"), types.Part(function_call=call)]
        else:
            parts = [types.Part(text=f"reply {self.turn}")]
        yield LlmResponse(content=types.Content(role="model", parts=parts))


class Summariser(BaseEventsSummarizer):
    """ADK compaction's summariser, scripted: one summary content per compacted range."""

    def __init__(self) -> None:
        self.calls = 0

    async def maybe_summarize_events(self, *, events: list[Event]) -> Event | None:
        self.calls += 1
        summary = types.Content(role="model", parts=[types.Part(text=f"summary number {self.calls}")])
        return Event(author="user", actions=EventActions(compaction=EventCompaction(
            start_timestamp=events[0].timestamp, end_timestamp=events[-1].timestamp, compacted_content=summary)))


def _model(audit: Audit, store: WorkingMemoryStore, turn: int = 0) -> ScriptedModel:
    return ScriptedModel(audit=audit, store=store, turn=turn, requests=[], systems=[], tools_seen=[])


async def _say(runner: Runner, session_id: str, text: str) -> None:
    message = types.Content(role="user", parts=[types.Part(text=text)])
    async for _ in runner.run_async(user_id="u", session_id=session_id, new_message=message):
        pass


async def test_conversation(redis_server: RedisServer, redis: Redis, keys: Keys) -> None:
    """22 turns: tool writes, another process writes, compaction drops the snapshot; audited from requests."""
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name="app", user_id="u")
    store = WorkingMemoryStore(redis, keys=keys)
    await store.create_thread(session.id, "u")
    audit = Audit(redis, keys, session.id)
    model = _model(audit, store)
    wm = WorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u", thread_id=session.id))

    async def caught_up(callback_context: Any, llm_request: LlmRequest) -> None:
        """Test machinery, first: the worker has caught up, so the stored document is the latest version."""
        await wait_caught_up(redis, keys)

    agent = LlmAgent(name="assistant", model=model, instruction=SYSTEM, tools=wm.tools(),
                     before_model_callback=[caught_up, wm.before_model_callback])
    summariser = Summariser()
    app = App(name="app", root_agent=agent, events_compaction_config=EventsCompactionConfig(
        summarizer=summariser, compaction_interval=3, overlap_size=0))
    runner = Runner(app=app, session_service=sessions)
    async with worker_process(redis_server.url, keys):
        for turn in range(1, TURNS + 1):
            model.turn = turn
            if turn in OTHER_PROCESS_TURNS:
                current = await audit.expect(store, "u")
                write_from_other_process(redis_server.url, keys, "u", f"{current}\n- another process, turn {turn}")
            await _say(runner, session.id, f"user says {turn}")
    records = await audit.check()
    assert summariser.calls >= 2
    assert sum(r.reason == "reinject" for r in records) >= 2
    assert any(r.mode == "delta" for r in records)
    assert len(set(model.systems)) == 1 and model.systems[0].startswith(SYSTEM)
    final = await audit.expect(store, "u")
    for turn in TOOL_TURNS:
        assert f"item number {turn}" in final
    for turn in OTHER_PROCESS_TURNS:
        assert f"another process, turn {turn}" in final
    assert len(model.requests) == TURNS + len(TOOL_TURNS)
    # a merged turn: the write's new version in the user content carrying the function response, after it
    assert any(p.function_response for r in model.requests for c in r for p in c.parts or []
               if markups_of([c]))
    # nothing of ours is in the session's events
    stored = await sessions.get_session(app_name="app", user_id="u", session_id=session.id)
    assert stored is not None and not markups_of([e.content for e in stored.events if e.content])
    # another session's model never sees this session's memory
    other = await sessions.create_session(app_name="app", user_id="u")
    with pytest.raises(InvalidInputError, match="make one per session"):
        await _say(runner, other.id, "hello")


async def test_read_only_and_system_message(redis_server: RedisServer, redis: Redis, keys: Keys) -> None:
    """A read-only agent gets no tool and cannot write; system-message delivery sends Mastra's system message."""
    store = WorkingMemoryStore(redis, keys=keys)
    await store.replace("u", "# Notes\n- likes tea")
    sessions = InMemorySessionService()
    first = await sessions.create_session(app_name="app", user_id="u")
    second = await sessions.create_session(app_name="app", user_id="u")
    audit = Audit(redis, keys, first.id)
    read_only = WorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u", thread_id=first.id, read_only=True))
    system = WorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u", thread_id=second.id,
                                              delivery="system-message"))
    async with worker_process(redis_server.url, keys):
        await wait_caught_up(redis, keys)
        assert read_only.tools() == []
        with pytest.raises(InvalidInputError, match="read-only"):
            WorkingMemoryTool(read_only.memory)
        model = _model(audit, store, turn=2)
        agent = LlmAgent(name="assistant", model=model, instruction=SYSTEM, tools=read_only.tools(),
                         before_model_callback=read_only.before_model_callback)
        await _say(Runner(agent=agent, app_name="app", session_service=sessions), first.id, "hi")
        assert model.tools_seen == [set()] and len(markups_of(model.requests[0])) == 1
        refused = await read_only.memory.call_tool({"memory": "# Notes\n- forged"})
        assert not refused["success"] and "read-only" in refused["error"]
        model = _model(audit, store, turn=3)
        agent = LlmAgent(name="assistant", model=model, instruction=SYSTEM, tools=system.tools(),
                         before_model_callback=system.before_model_callback)
        runner = Runner(agent=agent, app_name="app", session_service=sessions)
        for step in range(2):
            await _say(runner, second.id, f"hi {step}")
            doc = await store.get("u")
            assert doc is not None
            expected = working_memory_system_message(WorkingMemoryConfig(), doc.data)["content"]
            assert model.systems[-1].startswith(SYSTEM) and model.systems[-1].endswith(f"\n\n{expected}")
            assert markups_of(model.requests[-1]) == []
            assert model.tools_seen[-1] == {"setWorkingMemory"}
    assert (await store.get("u")).data == "# Notes\n- likes tea"  # type: ignore[union-attr]
    assert [r.mode for r in await DeliveryLog(redis, keys).read(second.id)] == ["snapshot"]


def test_recognising_working_memory_messages() -> None:
    """Blocks and the system-message text are recognised, as parts and as contents; user text is not."""
    markup = '<working-memory format="markdown" scope="resource">x</working-memory>'
    system = working_memory_system_message(WorkingMemoryConfig(), "# Notes")["content"]
    assert is_working_memory_message(types.Content(role="user", parts=[types.Part(text=markup)]))
    assert is_working_memory_message(types.Part(text=system))
    assert not is_working_memory_message(types.Content(role="user", parts=[types.Part(text="hi"),
                                                                           types.Part(text=markup)]))
    assert not is_working_memory_message(types.Content(role="user", parts=[types.Part(text=f"{markup} and more")]))
    assert not is_working_memory_message(types.Content(role="user", parts=[]))


SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}, "age": {"type": "integer"}}}


async def test_schema_mode_tool(redis: Redis, keys: Keys) -> None:
    """Schema mode: the model is offered the schema's fields and its writes merge; a bad one comes back as a result."""
    config = WorkingMemoryConfig(scope="thread", schema=SCHEMA)
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name="app", user_id="u")
    store = WorkingMemoryStore(redis, keys=keys, config=config)
    await store.create_thread(session.id, "u")
    wm = WorkingMemory(AgentWorkingMemory(redis, keys, resource_id="u", thread_id=session.id, config=config))
    writes = iter([{"city": "Paris", "age": "old"}, {"city": "Paris"}, {"age": 36}])
    seen: list[LlmRequest] = []

    class Writer(BaseLlm):
        model: str = "writer"

        async def generate_content_async(self, llm_request: LlmRequest,
                                         stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
            seen.append(llm_request.model_copy(update={"tools_dict": {}}))
            write = next(writes, None)
            part = types.Part(function_call=types.FunctionCall(name="setWorkingMemory", args=write)) if write \
                else types.Part(text="done")
            yield LlmResponse(content=types.Content(role="model", parts=[part]))

    agent = LlmAgent(name="assistant", model=Writer(), tools=wm.tools(), before_model_callback=wm.before_model_callback)
    await _say(Runner(agent=agent, app_name="app", session_service=sessions), session.id, "hi")
    declaration = seen[0].config.tools[0].function_declarations[0]  # type: ignore[index,union-attr]
    assert set(declaration.parameters_json_schema["properties"]) == {"city", "age"}  # type: ignore[index]
    results = [p.function_response.response for c in seen[-1].contents for p in c.parts or [] if p.function_response]
    assert not results[0]["success"] and "age" in results[0]["error"]  # type: ignore[index]
    assert [r["success"] for r in results[1:]] == [True, True]  # type: ignore[index]
    doc = await store.get("u", session.id)
    assert doc is not None and json.loads(doc.data) == {"city": "Paris", "age": 36}


def test_identity_of_a_content_json_cannot_encode() -> None:
    """A content holding a lone surrogate (Python's json makes one of a client's ``"\\ud800"``)
    has an identity, equal for an equal content, not a PydanticSerializationError."""
    def content() -> types.Content:
        return types.Content(role="user", parts=[types.Part(text="broken \ud800 text")])

    assert _Codec().identity(content()) == _Codec().identity(content())
    assert _Codec().identity(content()) != _Codec().identity(types.Content(role="user", parts=[types.Part(text="x")]))


def test_a_model_reply_that_echoes_a_block_is_the_models_own() -> None:
    """A model turn whose text is a working-memory markup (the model quoting its memory) is
    conversation: it stays in the request and is not working memory; a user turn is."""
    markup = signal_markup("# Notes\n- likes tea", Attributes(format="markdown", scope="resource"))
    reply = types.Content(role="model", parts=[types.Part(text=markup)])
    assert _Codec().split(reply) == (reply, []) and not is_working_memory_message(reply)
    block = types.Content(role="user", parts=[types.Part(text=markup)])
    assert _Codec().split(block) == (None, [markup]) and is_working_memory_message(block)
