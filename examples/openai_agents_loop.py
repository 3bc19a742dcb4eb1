"""The OpenAI Agents SDK's own loop (``Runner.run``) with working memory, offline.

The SDK is real; the model is a scripted ``agents.Model`` that prints what each call
received and calls ``setWorkingMemory`` on some turns. The history is a ``SQLiteSession``
limited to its last 4 items, so the snapshot is trimmed away and comes back; the session
itself never stores a working-memory message (the filter inserts them per call). Run::

    .venv/bin/python examples/openai_agents_loop.py            # embedded Redis
    .venv/bin/python examples/openai_agents_loop.py redis://127.0.0.1:6379/0

With a key, drop ``model=`` from the ``Agent`` and the loop is unchanged.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from typing import Any

from _run import run_example
from agents import Agent, Model, ModelResponse, Runner, SQLiteSession, Usage
from agents.memory import SessionSettings
from openai.types.responses import ResponseFunctionToolCall, ResponseOutputMessage, ResponseOutputText

from signals import AgentWorkingMemory, Keys, connect
from signals.integrations.openai_agents import OpenAIAgentsWorkingMemory, is_working_memory_message
from workers import worker_in_process

WRITES = {1: "# User\n- **Name**: Ada\n- **City**: London", 4: "# User\n- **Name**: Ada\n- **City**: Paris"}


class ScriptedModel(Model):
    """Stands in for an LLM: prints its input; calls setWorkingMemory on the turns in WRITES."""

    def __init__(self) -> None:
        self.turn = 0
        self.calls = 0

    async def get_response(self, system_instructions: str | None, input: str | list[Any],  # noqa: PLR0917 - the SDK signature
                           model_settings: Any, tools: list[Any], output_schema: Any, handoffs: list[Any],
                           tracing: Any, **kwargs: Any) -> ModelResponse:
        self.calls += 1
        items = [{"role": "user", "content": input}] if isinstance(input, str) else [
            i if isinstance(i, dict) else i.model_dump(exclude_unset=True) for i in input]
        wm = [i["content"] for i in items if is_working_memory_message(i)]
        print(f"  model received {len(items)} items, working memory: {wm or 'none'}")
        if self.turn in WRITES and items[-1].get("type") != "function_call_output" and \
                not (len(items) > 1 and items[-2].get("type") == "function_call_output"):
            return ModelResponse(output=[ResponseFunctionToolCall(
                id=f"fc_{self.calls}", call_id=f"call_{self.calls}", type="function_call", status="completed",
                name="setWorkingMemory", arguments=json.dumps({"memory": WRITES[self.turn]}))],
                usage=Usage(), response_id=None)
        text = ResponseOutputText(type="output_text", text=f"reply {self.turn}", annotations=[])
        return ModelResponse(output=[ResponseOutputMessage(id=f"msg_{self.calls}", type="message", role="assistant",
                                                           status="completed", content=[text])],
                             usage=Usage(), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("the example runs the non-streamed loop")


async def main(url: str) -> None:
    keys = Keys(f"example-{uuid.uuid4().hex[:6]}", 4)
    redis = connect(url)
    async with worker_in_process(url, namespace=keys.namespace, partitions=keys.partitions, name="example",
                                 block_ms=20) as worker:

        async def caught_up(data: Any) -> Any:  # the example waits for the worker to keep its output stable
            await worker.caught_up()
            return data.model_data

        wm = OpenAIAgentsWorkingMemory(AgentWorkingMemory(redis, keys, resource_id="ada", thread_id="chat-1"),
                                       inner=caught_up)
        model = ScriptedModel()
        agent = Agent(name="assistant", instructions="You are a helpful assistant.", model=model, tools=wm.tools())
        session = SQLiteSession("chat-1", session_settings=SessionSettings(limit=4))
        for turn in range(1, 11):
            print(f"turn {turn}")
            model.turn = turn
            result = await Runner.run(agent, f"user message {turn}", session=session,
                                      run_config=wm.run_config(tracing_disabled=True))
            for inj in wm.last.result.add if wm.last else ():
                print(f"  + v{inj.version} {inj.mode} ({inj.reason})")
            print(f"  -> {result.final_output}")
        log = wm.agent.log
        last = wm.last.result if wm.last else None
        view = await log.view_at("chat-1", last.step, window=last.window) if log and last else None
        print("what the model could rebuild at the last call:", view.version if view else None)
        print(view.text if view else "")
    await redis.aclose()


if __name__ == "__main__":
    run_example(main)
