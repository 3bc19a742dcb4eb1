"""PydanticAI with working memory as state signals: a runnable, offline example.

The model is PydanticAI's ``FunctionModel`` with a scripted function (no network, no
keys); the history is trimmed to the last six messages by a ``ProcessHistory``
capability, so the snapshot falls out of the window and comes back. Run it with::

    .venv/bin/python examples/pydantic_ai_loop.py            # embedded Redis
    .venv/bin/python examples/pydantic_ai_loop.py redis://127.0.0.1:6379/0

It prints, for every model call, the working-memory messages the model received. With a
real model, replace ``FunctionModel(scripted)`` by e.g. ``"openai:gpt-4.1"``: nothing else
changes.
"""

from __future__ import annotations

import uuid

import _offline  # noqa: F401 - first: no network, no tracing, whatever the environment says
from _run import print_rebuilt, run_example
from pydantic_ai import Agent
from pydantic_ai.capabilities import Hooks, ProcessHistory
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from signals import AgentWorkingMemory, Keys, connect
from signals.integrations.pydantic_ai import WorkingMemory, is_working_memory_part
from workers import worker_in_process

PROFILE = "# User Information\n- **First Name**: Ada\n- **Location**: London\n- **Interests**: engines"
WRITES = {1: PROFILE, 4: PROFILE.replace("London", "Paris"),
          7: PROFILE.replace("London", "Paris") + "\n- **Goals**: finish the notes on the engine"}
turn = 0
calls: list[list[str]] = []  # the working-memory blocks of every call


async def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Stands in for an LLM: prints what it received, sometimes calls setWorkingMemory."""
    blocks = [str(p.content) for m in messages if isinstance(m, ModelRequest) for p in m.parts
              if is_working_memory_part(p)]
    new = [b for b in blocks if b not in (calls[-1] if calls else [])]
    calls.append(blocks)
    print(f"call {len(calls)} (turn {turn}): {len(messages)} messages, {len(blocks)} working-memory block(s), "
          f"{len(new)} new:")
    for block in new:
        print("   ", block.replace("\n", "\n    "))
    answering = any(isinstance(p, ToolReturnPart) for p in messages[-1].parts)
    if turn in WRITES and not answering:
        return ModelResponse(parts=[ToolCallPart("setWorkingMemory", {"memory": WRITES[turn]})])
    return ModelResponse(parts=[TextPart(f"reply {turn}")])


async def main(url: str) -> None:
    global turn
    keys = Keys(f"example-{uuid.uuid4().hex[:6]}", 4)
    redis = connect(url)
    async with worker_in_process(url, namespace=keys.namespace, partitions=keys.partitions, name="example",
                                 block_ms=20) as worker:
        wm = WorkingMemory(AgentWorkingMemory(redis, keys, resource_id="ada", thread_id="chat-1"))
        agent = Agent(FunctionModel(scripted), instructions="You are a helpful assistant.")
        keep_last_six = ProcessHistory(lambda messages: messages[-6:])

        async def worker_caught_up(ctx: object, request_context: object) -> object:
            await worker.caught_up()  # only so that the output is the same on every run
            return request_context

        caught_up = Hooks(before_model_request=worker_caught_up)
        history: list[ModelMessage] | None = None
        for turn in range(1, 10):
            result = await agent.run(f"user message {turn}", message_history=history,
                                     capabilities=[caught_up, keep_last_six, wm])  # wm last: sees the trimming
            history = result.all_messages()
        await print_rebuilt(wm.memory)
    await redis.aclose()


if __name__ == "__main__":
    run_example(main)
