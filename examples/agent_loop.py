"""A runnable agent loop with a deterministic scripted model (no network).

It shows the three agent-side pieces working together: a subscription to the lane's
signals, the context-window tracker (which re-injects a snapshot when the loop's
trimming drops it) and the delivery log. Run it with::

    .venv/bin/python examples/agent_loop.py            # embedded Redis
    .venv/bin/python examples/agent_loop.py redis://127.0.0.1:6379/0

To plug in a real chat client, replace ``ScriptedModel.reply`` with your client's call:
pass ``messages`` (the ``user``-role ``<working-memory>`` messages are ordinary chat
messages) and ``wm.tools()`` as the tools, and route a ``setWorkingMemory`` tool call to
``await wm.call_tool(arguments)``, e.g. with the OpenAI SDK::

    response = await client.chat.completions.create(model=..., messages=messages, tools=wm.tools())
"""

from __future__ import annotations

import sys
import uuid
from typing import Any

import anyio

from signals import AgentWorkingMemory, Keys, connect
from signals.streams.progress import wait_caught_up
from workers.embedded import RedisServer
from workers.logging import configure_logging
from workers.settings import Settings
from workers.supervisor import run_worker

PROFILE = "# User Information\n- **First Name**: Ada\n- **Location**: London\n- **Interests**: engines"


class ScriptedModel:
    """Stands in for an LLM: replies, and sometimes calls setWorkingMemory."""

    def __init__(self) -> None:
        self.memory = PROFILE

    def reply(self, turn: int, messages: list[dict[str, Any]]) -> tuple[str, dict[str, Any] | None]:
        seen = sum(1 for m in messages if m["content"].startswith("<working-memory"))
        text = f"reply {turn} (I can see {seen} working-memory message(s))"
        if turn in (1, 4, 7):
            self.memory = self.memory.replace("London", "Paris") if turn == 4 else self.memory
            if turn == 7:
                self.memory += "\n- **Goals**: finish the notes on the engine"
            return text, {"memory": self.memory}
        return text, None


async def main(url: str) -> None:
    keys = Keys(f"example-{uuid.uuid4().hex[:6]}", 4)
    redis = connect(url)
    stop = anyio.Event()
    settings = Settings(redis_url=url, namespace=keys.namespace, partitions=4, block_ms=20)
    async with anyio.create_task_group() as tg:
        await tg.start(lambda task_status: run_worker(redis, settings, name="example", stop=stop,
                                                      handle_signals=False, task_status=task_status))
        wm = AgentWorkingMemory(redis, keys, resource_id="ada", thread_id="chat-1")
        await wm.start()
        model = ScriptedModel()
        messages: list[dict[str, Any]] = []
        ids: list[str | None] = []  # parallel to messages: the wm injection id, if any
        for turn in range(1, 10):
            await wait_caught_up(redis, keys)  # the example waits for the worker to keep its output stable
            result = await wm.before_model_call({i for i in ids if i})
            keep = [k for k, i in enumerate(ids) if i not in result.drop]
            messages, ids = [messages[k] for k in keep], [ids[k] for k in keep]
            for inj in result.add:
                messages.append(inj.message)
                ids.append(inj.id)
                print(f"turn {turn}: + v{inj.version} {inj.mode} ({inj.reason})")
            messages.append({"role": "user", "content": f"user message {turn}"})
            ids.append(None)
            text, tool_call = model.reply(turn, messages)
            if tool_call is not None:
                print(f"turn {turn}: model calls setWorkingMemory -> {await wm.call_tool(tool_call)}")
            messages.append({"role": "assistant", "content": text})
            ids.append(None)
            messages, ids = messages[-5:], ids[-5:]  # the loop keeps a 5-message window
        view = await wm.log.view_at("chat-1", 9) if wm.log else None
        print("what the model could rebuild at step 9:", view.version if view else None)
        print(view.text if view else "")
        stop.set()
    await redis.aclose()


if __name__ == "__main__":
    configure_logging("console", "warning")
    if len(sys.argv) > 1:
        anyio.run(main, sys.argv[1])
    else:
        with RedisServer() as server:
            anyio.run(main, server.url)
