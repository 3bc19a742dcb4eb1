"""LangChain (``create_agent``) with working memory as state signals: a runnable, offline example.

The model is a scripted ``BaseChatModel`` (no network, no keys); LangChain's own
``SummarizationMiddleware`` (with a scripted summariser) keeps the history short, so the
snapshot falls out of the window and comes back. Run it with::

    .venv/bin/python examples/langchain_loop.py            # embedded Redis
    .venv/bin/python examples/langchain_loop.py redis://127.0.0.1:6379/0

It prints, for every model call, the working-memory messages the model received. With a
real model, pass e.g. ``init_chat_model("openai:gpt-4.1")`` to ``create_agent``: nothing
else changes.
"""

from __future__ import annotations

import uuid
from typing import Any

import _offline  # noqa: F401 - first: no network, no tracing, whatever the environment says
from _run import print_rebuilt, run_example
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, SummarizationMiddleware
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langgraph.checkpoint.memory import InMemorySaver

from signals import AgentWorkingMemory, Keys, connect
from signals.integrations.langchain import WorkingMemoryMiddleware, is_working_memory_message
from workers import InProcessWorker, worker_in_process

PROFILE = "# User Information\n- **First Name**: Ada\n- **Location**: London\n- **Interests**: engines"
WRITES = {1: PROFILE, 4: PROFILE.replace("London", "Paris"),
          7: PROFILE.replace("London", "Paris") + "\n- **Goals**: finish the notes on the engine"}


class ScriptedModel(BaseChatModel):
    """Stands in for an LLM: prints what it received, sometimes calls setWorkingMemory."""

    turn: int = 0
    calls: list[list[str]] = []  # noqa: RUF012 - the working-memory blocks of every call

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
        return self.bind(tools=tools, **kwargs)

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        blocks = [str(m.content) for m in messages if is_working_memory_message(m)]
        new = [b for b in blocks if b not in (self.calls[-1] if self.calls else [])]
        self.calls.append(blocks)
        print(f"call {len(self.calls)} (turn {self.turn}): {len(messages)} messages, {len(blocks)} "
              f"working-memory block(s), {len(new)} new:")
        for block in new:
            print("   ", block.replace("\n", "\n    "))
        answering = isinstance([m for m in messages if not is_working_memory_message(m)][-1], ToolMessage)
        if self.turn in WRITES and not answering:
            message = AIMessage(content="", tool_calls=[{"name": "setWorkingMemory", "args": {
                "memory": WRITES[self.turn]}, "id": f"call-{self.turn}", "type": "tool_call"}])
        else:
            message = AIMessage(content=f"reply {self.turn}")
        return ChatResult(generations=[ChatGeneration(message=message)])


class Summariser(BaseChatModel):
    """The summarisation middleware's model, scripted."""

    @property
    def _llm_type(self) -> str:
        return "summariser"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                  **kwargs: Any) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=AIMessage(content="(a summary of earlier turns)"))])


class WorkerCaughtUp(AgentMiddleware):
    """Waits for the worker before every model call, only so that the output is the same on every run."""

    def __init__(self, worker: InProcessWorker) -> None:
        self.worker = worker

    async def abefore_model(self, state: Any, runtime: Any) -> None:
        await self.worker.caught_up()


async def main(url: str) -> None:
    keys = Keys(f"example-{uuid.uuid4().hex[:6]}", 4)
    redis = connect(url)
    async with worker_in_process(url, namespace=keys.namespace, partitions=keys.partitions, name="example",
                                 block_ms=20) as worker:
        wm = WorkingMemoryMiddleware(AgentWorkingMemory(redis, keys, resource_id="ada", thread_id="chat-1"))
        model = ScriptedModel(calls=[])
        summarise = SummarizationMiddleware(Summariser(), trigger=("messages", 8), keep=("messages", 4))
        agent = create_agent(model, system_prompt="You are a helpful assistant.", checkpointer=InMemorySaver(),
                             middleware=[WorkerCaughtUp(worker), summarise, wm])  # wm last: sees the request
        for turn in range(1, 10):
            model.turn = turn
            await agent.ainvoke({"messages": [HumanMessage(f"user message {turn}")]},
                                {"configurable": {"thread_id": "chat-1"}})
        await print_rebuilt(wm.memory)
    await redis.aclose()


if __name__ == "__main__":
    run_example(main)
