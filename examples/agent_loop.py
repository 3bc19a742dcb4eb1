"""A runnable agent loop with a deterministic scripted model (no network).

It shows the three agent-side pieces working together: a subscription to the lane's
signals, the context-window tracker (a snapshot first, then a delta for each change, and
the snapshot again when the loop's trimming drops it) and the delivery log. Run it with::

    .venv/bin/python examples/agent_loop.py            # embedded Redis
    .venv/bin/python examples/agent_loop.py redis://127.0.0.1:6379/0
    # against a deployment's workers (deploy/compose.yaml), as its least-privilege agent user:
    .venv/bin/python examples/agent_loop.py redis://wm-agent:SECRET@redis:6379/0 --namespace wm --no-worker

By default it runs a worker inside its own process (``workers.worker_in_process``), on a
namespace of its own. With
``--no-worker`` the deployment's workers do the work; the loop then waits for each write's
signal on the lane's signal stream (``write_version``), which the agent user may read,
instead of the workers' tracking, which it may not.

To plug in a real chat client, replace ``ScriptedModel.reply`` with your client's call:
pass ``messages`` (the ``user``-role ``<working-memory>`` messages are ordinary chat
messages) and ``wm.tools()`` as the tools, and route a ``setWorkingMemory`` tool call to
``await wm.call_tool(arguments)``, e.g. with the OpenAI SDK::

    response = await client.chat.completions.create(model=..., messages=messages, tools=wm.tools())
"""

from __future__ import annotations

import argparse
import uuid
from typing import Any

import anyio

from signals import AgentWorkingMemory, Keys, connect
from workers import InProcessWorker, RedisServer, configure_logging, worker_in_process

PROFILE = "# User Information\n- **First Name**: Ada\n- **Location**: London\n- **Interests**: engines"


class ScriptedModel:
    """Stands in for an LLM: replies, and calls setWorkingMemory at turns 1 (the profile)
    and 3 (Ada moved to Paris)."""

    def __init__(self) -> None:
        self.memory = PROFILE

    def reply(self, turn: int, messages: list[dict[str, Any]]) -> tuple[str, dict[str, Any] | None]:
        seen = sum(1 for m in messages if m["content"].startswith("<working-memory"))
        text = f"reply {turn} (I can see {seen} working-memory message(s))"
        if turn == 1:
            return text, {"memory": self.memory}
        if turn == 3:
            self.memory = self.memory.replace("London", "Paris")
            return text, {"memory": self.memory}
        return text, None


async def wait_signalled(wm: AgentWorkingMemory, version: int) -> None:
    """Take in the lane's signals until one covers the write ``version`` (the deployment's workers)."""
    with anyio.fail_after(60):
        while not any((item.signal.write_version or 0) >= version for item in await wm.poll(block_ms=500)):
            pass


async def converse(wm: AgentWorkingMemory, worker: InProcessWorker | None) -> None:
    """Six turns with a window of the last six messages: the model receives a snapshot
    (bootstrap), then a delta (its own edit), then, once trimming dropped the snapshot,
    the snapshot again (reinject)."""
    model = ScriptedModel()
    messages: list[dict[str, Any]] = []
    ids: list[str | None] = []  # parallel to messages: the wm injection id, if any
    written: int | None = None  # the document version of the model's last write
    for turn in range(1, 7):
        # the example waits for the worker to keep its output stable
        if worker is not None:
            await worker.caught_up()
        elif written is not None:
            await wait_signalled(wm, written)
            written = None
        result = await wm.before_model_call({i for i in ids if i})
        keep = [k for k, i in enumerate(ids) if i not in result.drop]
        messages, ids = [messages[k] for k in keep], [ids[k] for k in keep]
        for inj in result.add:
            messages.append(inj.message)
            ids.append(inj.id)
            print(f"call {turn}: + signal v{inj.version} {inj.mode} ({inj.reason})")
            print("    " + inj.message["content"].replace("\n", "\n    "))
        messages.append({"role": "user", "content": f"user message {turn}"})
        ids.append(None)
        text, tool_call = model.reply(turn, messages)
        if tool_call is not None:
            outcome = await wm.call_tool(tool_call)
            print(f"call {turn}: model called setWorkingMemory -> document version {outcome.get('version')}")
            written = outcome.get("version", written)
        messages.append({"role": "assistant", "content": text})
        ids.append(None)
        messages, ids = messages[-6:], ids[-6:]  # the loop keeps a 6-message window


async def main(url: str, namespace: str | None = None, partitions: int | None = None, worker: bool = True) -> None:
    run = uuid.uuid4().hex[:6]
    keys = Keys(namespace or f"example-{run}", partitions or (16 if namespace else 4))
    redis = connect(url)
    thread = f"chat-{run}"  # ids of this run: a shared namespace keeps earlier runs' lanes
    wm = AgentWorkingMemory(redis, keys, resource_id=f"ada-{run}", thread_id=thread)
    if worker:
        async with worker_in_process(url, namespace=keys.namespace, partitions=keys.partitions, name="example",
                                     block_ms=20) as running:
            await wm.start()
            await converse(wm, running)
    else:
        await wm.start()
        await converse(wm, None)
    view = await wm.log.view_at(thread, wm.last_step, window=wm.window.window_id) if wm.log else None
    if view is not None:
        print(f"delivery log: at call {wm.last_step} the model could rebuild signal version {view.version}:")
        print(view.text)
    await redis.aclose()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="A scripted agent loop over wm-signals.")
    parser.add_argument("url", nargs="?", help="Redis URL (default: an embedded Redis)")
    parser.add_argument("--namespace", help="a deployment's namespace (default: one of its own)")
    parser.add_argument("--partitions", type=int, help="its partition count (default 16 with --namespace, else 4)")
    parser.add_argument("--no-worker", dest="worker", action="store_false",
                        help="run no worker here: the deployment's workers do the work")
    args = parser.parse_args()
    configure_logging("console", "warning")
    if args.url:
        anyio.run(main, args.url, args.namespace, args.partitions, args.worker)
    else:
        with RedisServer() as server:
            anyio.run(main, server.url, args.namespace, args.partitions, args.worker)
