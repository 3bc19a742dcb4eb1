"""Google ADK with working memory as state signals: a runnable, offline example.

The model is a scripted ``BaseLlm`` (no Gemini client is ever built: no network, no keys);
ADK's own event compaction, with a scripted summariser, replaces old events with a
summary every three invocations, so the snapshot falls out of the window and comes back.
Run it with::

    .venv/bin/python examples/adk_loop.py            # embedded Redis
    .venv/bin/python examples/adk_loop.py redis://127.0.0.1:6379/0

It prints, for every model call, the working-memory messages the model received. With a
real model, pass ``model="gemini-2.5-flash"`` to the ``LlmAgent``: nothing else changes.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator

import _offline  # noqa: F401 - first: no network, no telemetry, whatever the environment says
from _run import print_rebuilt, run_example
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

from signals import AgentWorkingMemory, Keys, connect
from signals.integrations.adk import WorkingMemory, is_working_memory_message
from workers import worker_in_process

PROFILE = "# User Information\n- **First Name**: Ada\n- **Location**: London\n- **Interests**: engines"
WRITES = {1: PROFILE, 4: PROFILE.replace("London", "Paris"),
          7: PROFILE.replace("London", "Paris") + "\n- **Goals**: finish the notes on the engine"}


class ScriptedModel(BaseLlm):
    """Stands in for an LLM: prints what it received, sometimes calls setWorkingMemory."""

    model: str = "scripted"
    turn: int = 0
    calls: list[list[str]] = []  # noqa: RUF012 - the working-memory blocks of every call

    async def generate_content_async(self, llm_request: LlmRequest,
                                     stream: bool = False) -> AsyncGenerator[LlmResponse, None]:
        contents = llm_request.contents
        blocks = [p.text or "" for c in contents for p in c.parts or [] if is_working_memory_message(p)]
        new = [b for b in blocks if b not in (self.calls[-1] if self.calls else [])]
        self.calls.append(blocks)
        print(f"call {len(self.calls)} (turn {self.turn}): {len(contents)} contents, {len(blocks)} "
              f"working-memory block(s), {len(new)} new:")
        for block in new:
            print("   ", block.replace("\n", "\n    "))
        answering = any(p.function_response for p in contents[-1].parts or [])
        if self.turn in WRITES and not answering:
            call = types.FunctionCall(name="setWorkingMemory", args={"memory": WRITES[self.turn]})
            parts = [types.Part(function_call=call)]
        else:
            parts = [types.Part(text=f"reply {self.turn}")]
        usage = types.GenerateContentResponseUsageMetadata(prompt_token_count=0, candidates_token_count=0)
        yield LlmResponse(content=types.Content(role="model", parts=parts), usage_metadata=usage)


class Summariser(BaseEventsSummarizer):
    """ADK compaction's summariser, scripted."""

    async def maybe_summarize_events(self, *, events: list[Event]) -> Event | None:
        summary = types.Content(role="model", parts=[types.Part(text=f"(a summary of {len(events)} events)")])
        return Event(author="user", actions=EventActions(compaction=EventCompaction(
            start_timestamp=events[0].timestamp, end_timestamp=events[-1].timestamp, compacted_content=summary)))


async def main(url: str) -> None:
    keys = Keys(f"example-{uuid.uuid4().hex[:6]}", 4)
    redis = connect(url)
    async with worker_in_process(url, namespace=keys.namespace, partitions=keys.partitions, name="example",
                                 block_ms=20) as worker:
        sessions = InMemorySessionService()
        session = await sessions.create_session(app_name="example", user_id="ada")
        wm = WorkingMemory(AgentWorkingMemory(redis, keys, resource_id="ada", thread_id=session.id))
        model = ScriptedModel(calls=[])

        async def worker_caught_up(callback_context: object, llm_request: LlmRequest) -> None:
            await worker.caught_up()  # only so that the output is the same on every run

        agent = LlmAgent(name="assistant", model=model, instruction="You are a helpful assistant.",
                         tools=wm.tools(), before_model_callback=[worker_caught_up, wm.before_model_callback])
        app = App(name="example", root_agent=agent, events_compaction_config=EventsCompactionConfig(
            summarizer=Summariser(), compaction_interval=3, overlap_size=0))
        runner = Runner(app=app, session_service=sessions)
        for turn in range(1, 10):
            model.turn = turn
            message = types.Content(role="user", parts=[types.Part(text=f"user message {turn}")])
            async for _ in runner.run_async(user_id="ada", session_id=session.id, new_message=message):
                pass
        await print_rebuilt(wm.memory)
    await redis.aclose()


if __name__ == "__main__":
    run_example(main)
