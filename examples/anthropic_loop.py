"""A hand-rolled Anthropic Messages loop with working memory, offline (no key, no network).

The ``anthropic`` SDK is real; only its HTTP server is scripted (an ``httpx2`` mock
transport that answers like the Messages API and prints what each request carried). The
loop keeps the last 6 messages of its history, so the snapshot is trimmed away and comes
back. Run it with::

    .venv/bin/python examples/anthropic_loop.py            # embedded Redis
    .venv/bin/python examples/anthropic_loop.py redis://127.0.0.1:6379/0

With a real key, drop ``http_client=`` and ``base_url=`` and the loop is unchanged.
"""

from __future__ import annotations

import json
import uuid
from typing import Any

import anthropic
import httpx2
from _run import run_example

from signals import AgentWorkingMemory, Keys, connect
from signals.integrations.anthropic import AnthropicWorkingMemory, is_working_memory_message
from workers import worker_in_process

SYSTEM = "You are a helpful assistant."
WRITES = {1: "# User\n- **Name**: Ada\n- **City**: London", 4: "# User\n- **Name**: Ada\n- **City**: Paris"}


def scripted_server(request: httpx2.Request) -> httpx2.Response:
    """Stands in for the Messages API: prints the working memory it got; writes memory on some turns."""
    body = json.loads(request.content)
    last = body["messages"][-1]["content"]
    wm = [b["text"] for m in body["messages"] if m["role"] == "user" and isinstance(m["content"], list)
          for b in m["content"] if b["type"] == "text" and b["text"].startswith("<working-memory")]
    turn = sum(1 for m in body["messages"] if m["role"] == "user" and not is_working_memory_message(m))
    print(f"  model received {len(body['messages'])} messages, working memory: {wm or 'none'}")
    answering = isinstance(last, list) and any(b["type"] == "tool_result" for b in last)
    user_text = next((b["text"] for b in last if b["type"] == "text"), "") if isinstance(last, list) else last
    number = int(user_text.rsplit(" ", 1)[-1]) if user_text.startswith("user message") else 0
    content: list[dict[str, Any]] = [{"type": "text", "text": f"reply ({turn} user turns in view)"}]
    if number in WRITES and not answering:
        content.append({"type": "tool_use", "id": f"toolu_{number}", "name": "setWorkingMemory",
                        "input": {"memory": WRITES[number]}})
    return httpx2.Response(200, json={"id": "msg", "type": "message", "role": "assistant", "model": body["model"],
                                      "content": content, "stop_reason": "end_turn", "stop_sequence": None,
                                      "usage": {"input_tokens": 1, "output_tokens": 1}})


def trim(history: list[Any], keep: int) -> list[Any]:
    """The loop's own history limit: the last ``keep`` messages, from a user turn that is not a tool result."""
    history = history[-keep:]
    while history and (history[0]["role"] != "user" or any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in history[0]["content"])):
        history = history[1:]
    return history


async def main(url: str) -> None:
    keys = Keys(f"example-{uuid.uuid4().hex[:6]}", 4)
    redis = connect(url)
    client = anthropic.AsyncAnthropic(api_key="offline", base_url="http://anthropic.invalid",
                                      http_client=httpx2.AsyncClient(transport=httpx2.MockTransport(scripted_server)))
    async with worker_in_process(url, namespace=keys.namespace, partitions=keys.partitions, name="example",
                                 block_ms=20) as worker:
        wm = AnthropicWorkingMemory(AgentWorkingMemory(redis, keys, resource_id="ada", thread_id="chat-1"))
        history: list[Any] = []
        for turn in range(1, 11):
            print(f"turn {turn}")
            history.append({"role": "user", "content": f"user message {turn}"})
            for _ in range(2):  # a model call, and one more after a tool call
                await worker.caught_up()  # the example waits for the worker to keep its output stable
                history = await wm.prepare(history)
                for inj in wm.last.result.add if wm.last else ():
                    print(f"  + v{inj.version} {inj.mode} ({inj.reason})")
                response = await client.messages.create(model="claude-offline", max_tokens=256,
                                                        system=wm.system(SYSTEM), messages=history, tools=wm.tools())
                history.append({"role": "assistant", "content": response.content})
                results = [r for b in response.content if (r := await wm.handle_tool_use(b)) is not None]
                if not results:
                    break
                print(f"  model called setWorkingMemory -> {results[0]['content']}")
                history.append({"role": "user", "content": results})
            history = trim(history, 6)
        log = wm.agent.log
        last = wm.last.result if wm.last else None
        view = await log.view_at("chat-1", last.step, window=last.window) if log and last else None
        print("what the model could rebuild at the last call:", view.version if view else None)
        print(view.text if view else "")
    await client.close()
    await redis.aclose()


if __name__ == "__main__":
    run_example(main)
