"""Framework adapters: the time each adds to one model call, beside the same loop without wm-signals.

Per adapter, a scripted conversation runs through the framework's real loop (the SDK is
real; the model is scripted, or only the HTTP server is, so no network), once with the
adapter and once without it, call by call in alternation so that the host's load falls
on both. Each call of the adapter's hook (``prepare``, or the input filter) is timed:
that is the added time per model call, Redis round trip included (every hook polls the
lane and, when it adds a message, appends to the delivery log). Memory changes every
10th call (a write; the bench then waits for the worker, a process of its own as in
production, outside the timed part) and the loop keeps its last 8 messages, so the
snapshot is trimmed and re-injected as in a long conversation.

Printed beside it: the hook's CPU time in this thread (what the adapter itself costs,
whatever the host's load), the loop's time per call with and without the adapter, and
one Redis PING round trip measured in the same iterations: on a loaded host that round
trip, not the adapter's work, is most of the added wall time.

Adding an adapter is one function in :data:`CASES`: given the client, the key layout,
whether to use wm-signals and the :class:`Hook` timer, return a coroutine function that
performs one model call of the loop, with the adapter's hook inside ``with hook:``.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

from signals.agent import AgentWorkingMemory
from signals.streams.client import Client, connect
from signals.streams.keys import Keys
from signals.streams.progress import wait_caught_up
from signals.streams.store import WorkingMemoryStore
from workers.runtime import connect as runtime
from workers.runtime.embedded import RedisServer

KEEP = 8
DOC = "# User\n" + "\n".join(f"- fact {i}: something the agent remembers about the user" for i in range(12))


class Hook:
    """Times the adapter's hook: wall and this thread's CPU, summed over one model call."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0
        self._start = (0.0, 0.0)

    def reset(self) -> None:
        self.wall = self.cpu = 0.0

    def __enter__(self) -> None:
        self._start = (time.perf_counter(), time.thread_time())

    def __exit__(self, *exc: tuple[type[BaseException] | None, BaseException | None, TracebackType | None]) -> None:
        self.wall += time.perf_counter() - self._start[0]
        self.cpu += time.thread_time() - self._start[1]


Turn = Callable[[int], Awaitable[None]]
Case = Callable[[Client, Keys, bool, Hook], Awaitable[Turn]]


def _agent(redis: Client, keys: Keys) -> AgentWorkingMemory:
    return AgentWorkingMemory(redis, keys, resource_id="u", thread_id=f"t-{uuid.uuid4().hex[:8]}")


def _mock(reply: Callable[[dict[str, Any]], dict[str, Any]]) -> Any:
    import httpx2  # noqa: PLC0415 - comes with the SDK extras

    return httpx2.AsyncClient(transport=httpx2.MockTransport(
        lambda request: httpx2.Response(200, json=reply(json.loads(request.content)))))


async def anthropic_case(redis: Client, keys: Keys, use_wm: bool, hook: Hook) -> Turn:
    """A hand-rolled Anthropic Messages loop (the SDK over a scripted HTTP server)."""
    import anthropic  # noqa: PLC0415 - an optional extra

    from signals.integrations.anthropic import AnthropicWorkingMemory  # noqa: PLC0415

    client = anthropic.AsyncAnthropic(api_key="bench", base_url="http://anthropic.invalid", http_client=_mock(
        lambda body: {"id": "m", "type": "message", "role": "assistant", "model": body["model"], "stop_reason":
                      "end_turn", "stop_sequence": None, "content": [{"type": "text", "text": "ok"}],
                      "usage": {"input_tokens": 1, "output_tokens": 1}}))
    wm = AnthropicWorkingMemory(_agent(redis, keys))
    history: list[Any] = []

    async def turn(n: int) -> None:
        nonlocal history
        history.append({"role": "user", "content": f"user message {n}"})
        if use_wm:
            with hook:
                history = await wm.prepare(history)
        response = await client.messages.create(model="m", max_tokens=10, system=wm.system("sys") if use_wm
                                                else "sys", messages=history, tools=wm.tools() if use_wm else [])
        history.append({"role": "assistant", "content": response.content})
        history = history[-KEEP:]

    return turn


async def openai_chat_case(redis: Client, keys: Keys, use_wm: bool, hook: Hook) -> Turn:
    """A hand-rolled OpenAI Chat Completions loop (the SDK over a scripted HTTP server)."""
    import openai  # noqa: PLC0415 - an optional extra

    from signals.integrations.openai_chat import OpenAIChatWorkingMemory  # noqa: PLC0415

    client = openai.AsyncOpenAI(api_key="bench", base_url="http://openai.invalid/v1", http_client=_mock(
        lambda body: {"id": "c", "object": "chat.completion", "created": 0, "model": body["model"], "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}))
    wm = OpenAIChatWorkingMemory(_agent(redis, keys))
    system = {"role": "system", "content": "sys"}
    history: list[Any] = [system]

    async def turn(n: int) -> None:
        nonlocal history
        history.append({"role": "user", "content": f"user message {n}"})
        if use_wm:
            with hook:
                history = await wm.prepare(history)
        response = await client.chat.completions.create(model="m", messages=history,
                                                        tools=wm.tools() if use_wm else [])
        history.append(response.choices[0].message)
        history = [system, *history[1:][-KEEP:]]

    return turn


async def openai_agents_case(redis: Client, keys: Keys, use_wm: bool, hook: Hook) -> Turn:
    """The OpenAI Agents SDK's ``Runner.run`` with a scripted model and a limited in-memory session."""
    from agents import Agent, Model, ModelResponse, RunConfig, Runner, SQLiteSession, Usage  # noqa: PLC0415
    from agents.memory import SessionSettings  # noqa: PLC0415
    from openai.types.responses import ResponseOutputMessage, ResponseOutputText  # noqa: PLC0415

    from signals.integrations.openai_agents import OpenAIAgentsWorkingMemory  # noqa: PLC0415

    class Scripted(Model):
        async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
            text = ResponseOutputText(type="output_text", text="ok", annotations=[])
            return ModelResponse(output=[ResponseOutputMessage(id=f"msg_{uuid.uuid4().hex}", type="message",
                                                               role="assistant", status="completed", content=[text])],
                                 usage=Usage(), response_id=None)

        def stream_response(self, *args: Any, **kwargs: Any) -> Any:
            raise NotImplementedError

    wm = OpenAIAgentsWorkingMemory(_agent(redis, keys))

    async def timed(data: Any) -> Any:
        with hook:
            return await wm(data)

    agent = Agent(name="bench", instructions="sys", model=Scripted(), tools=wm.tools() if use_wm else [])
    session = SQLiteSession(uuid.uuid4().hex, session_settings=SessionSettings(limit=KEEP))
    config = RunConfig(call_model_input_filter=timed if use_wm else None, tracing_disabled=True)

    async def turn(n: int) -> None:
        await Runner.run(agent, f"user message {n}", session=session, run_config=config)

    return turn


async def pydantic_ai_case(redis: Client, keys: Keys, use_wm: bool, hook: Hook) -> Turn:
    """PydanticAI's ``agent.run`` with a ``FunctionModel`` and a ``ProcessHistory`` keeping the last messages."""
    from pydantic_ai import Agent  # noqa: PLC0415 - an optional extra
    from pydantic_ai.capabilities import ProcessHistory  # noqa: PLC0415
    from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart  # noqa: PLC0415
    from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: PLC0415

    from signals.integrations.pydantic_ai import WorkingMemory  # noqa: PLC0415

    class Timed(WorkingMemory):
        async def before_model_request(self, ctx: Any, request_context: Any) -> Any:
            with hook:
                return await super().before_model_request(ctx, request_context)

    async def reply(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("ok")])

    agent = Agent(FunctionModel(reply), instructions="sys")
    capabilities: list[Any] = [ProcessHistory(lambda messages: messages[-KEEP:])]
    if use_wm:
        capabilities.append(Timed(_agent(redis, keys)))
    history: list[ModelMessage] | None = None

    async def turn(n: int) -> None:
        nonlocal history
        history = (await agent.run(f"user message {n}", message_history=history,
                                   capabilities=capabilities)).all_messages()

    return turn


async def langchain_case(redis: Client, keys: Keys, use_wm: bool, hook: Hook) -> Turn:
    """LangChain's ``create_agent`` graph (checkpointed), a scripted chat model, the state trimmed to KEEP."""
    from langchain.agents import create_agent  # noqa: PLC0415 - an optional extra
    from langchain.agents.middleware import AgentMiddleware  # noqa: PLC0415
    from langchain_core.language_models import BaseChatModel  # noqa: PLC0415
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage  # noqa: PLC0415
    from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: PLC0415
    from langgraph.checkpoint.memory import InMemorySaver  # noqa: PLC0415
    from langgraph.graph.message import REMOVE_ALL_MESSAGES  # noqa: PLC0415

    from signals.integrations.langchain import WorkingMemoryMiddleware  # noqa: PLC0415

    class Scripted(BaseChatModel):
        @property
        def _llm_type(self) -> str:
            return "bench"

        def bind_tools(self, tools: Any, **kwargs: Any) -> Any:
            return self.bind(tools=tools, **kwargs)

        def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None,
                      **kwargs: Any) -> ChatResult:
            return ChatResult(generations=[ChatGeneration(message=AIMessage(content="ok"))])

    class Trim(AgentMiddleware):  # the history limit: the state keeps its last KEEP messages
        async def abefore_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
            messages = state["messages"]
            if len(messages) <= KEEP:
                return None
            return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), *messages[-KEEP:]]}

    middleware: list[Any] = [Trim()]
    if use_wm:
        wm = WorkingMemoryMiddleware(_agent(redis, keys))
        prepare = wm.window.prepare

        async def timed(messages: Any) -> Any:
            with hook:
                return await prepare(messages)

        wm.window.prepare = timed  # type: ignore[method-assign]
        middleware.append(wm)
    agent = create_agent(Scripted(), system_prompt="sys", middleware=middleware, checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": uuid.uuid4().hex}}

    async def turn(n: int) -> None:
        await agent.ainvoke({"messages": [HumanMessage(f"user message {n}")]}, config)

    return turn


async def adk_case(redis: Client, keys: Keys, use_wm: bool, hook: Hook) -> Turn:
    """Google ADK's ``Runner.run_async`` with a scripted ``BaseLlm``; a callback keeps the last contents."""
    from google.adk.agents import LlmAgent  # noqa: PLC0415 - an optional extra
    from google.adk.models.base_llm import BaseLlm  # noqa: PLC0415
    from google.adk.models.llm_request import LlmRequest  # noqa: PLC0415
    from google.adk.models.llm_response import LlmResponse  # noqa: PLC0415
    from google.adk.runners import Runner  # noqa: PLC0415
    from google.adk.sessions import InMemorySessionService  # noqa: PLC0415
    from google.genai import types  # noqa: PLC0415

    from signals.integrations.adk import WorkingMemory  # noqa: PLC0415

    class Scripted(BaseLlm):
        model: str = "bench"

        async def generate_content_async(self, llm_request: LlmRequest, stream: bool = False) -> Any:
            usage = types.GenerateContentResponseUsageMetadata(prompt_token_count=1, candidates_token_count=1)
            yield LlmResponse(content=types.Content(role="model", parts=[types.Part(text="ok")]), usage_metadata=usage)

    def keep_last(callback_context: Any, llm_request: LlmRequest) -> None:
        llm_request.contents = llm_request.contents[-KEEP:]

    callbacks: list[Any] = [keep_last]
    tools: list[Any] = []
    if use_wm:
        wm = WorkingMemory(_agent(redis, keys))
        tools = wm.tools()

        async def timed(callback_context: Any, llm_request: LlmRequest) -> Any:
            with hook:
                return await wm.before_model_callback(callback_context, llm_request)

        callbacks.append(timed)
    agent = LlmAgent(name="bench", model=Scripted(), instruction="sys", tools=tools, before_model_callback=callbacks)
    sessions = InMemorySessionService()
    session = await sessions.create_session(app_name="bench", user_id="u")
    runner = Runner(agent=agent, app_name="bench", session_service=sessions)

    async def turn(n: int) -> None:
        message = types.Content(role="user", parts=[types.Part(text=f"user message {n}")])
        async for _ in runner.run_async(user_id="u", session_id=session.id, new_message=message):
            pass

    return turn


#: One entry per adapter: (name, the function building one model call of its loop).
CASES: list[tuple[str, Case]] = [
    ("Anthropic Messages loop", anthropic_case),
    ("OpenAI Chat Completions loop", openai_chat_case),
    ("OpenAI Agents SDK Runner.run", openai_agents_case),
    ("PydanticAI agent.run", pydantic_ai_case),
    ("LangChain create_agent (ainvoke)", langchain_case),
    ("Google ADK Runner.run_async", adk_case),
]


def _p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


async def _measure(redis: Client, keys: Keys, case: Case, calls: int) -> dict[str, list[float]]:
    """The case's loop with and without the adapter, call by call in alternation (milliseconds)."""
    store = WorkingMemoryStore(redis, keys=keys)
    hook = Hook()
    loops = {True: await case(redis, keys, True, hook), False: await case(redis, keys, False, Hook())}
    out: dict[str, list[float]] = {"added": [], "cpu": [], "with": [], "without": [], "ping": []}
    warmup = 5
    for n in range(warmup + calls):
        if n % 10 == 0:
            await store.replace("u", f"{DOC}\n- counter {n}")
            await wait_caught_up(redis, keys)
        start = time.perf_counter()
        await redis.ping()
        ping = (time.perf_counter() - start) * 1e3
        hook.reset()
        timings = {}
        for use_wm in (True, False):
            start = time.perf_counter()
            await loops[use_wm](n)
            timings[use_wm] = (time.perf_counter() - start) * 1e3
        if n >= warmup:
            out["ping"].append(ping)
            out["with"].append(timings[True])
            out["without"].append(timings[False])
            out["added"].append(hook.wall * 1e3)
            out["cpu"].append(hook.cpu * 1e3)
    return out


async def _run(url: str, keys: Keys, calls: int) -> list[dict[str, Any]]:
    redis = connect(url)
    rows: list[dict[str, Any]] = []
    for name, case in CASES:
        m = await _measure(redis, keys, case, calls)
        rows.append({"adapter": name, "calls": calls, "added_p50": statistics.median(m["added"]),
                     "added_p99": _p99(m["added"]), "cpu_p50": statistics.median(m["cpu"]),
                     "loop_p50": statistics.median(m["with"]), "baseline_p50": statistics.median(m["without"]),
                     "ping_p50": statistics.median(m["ping"])})
    await redis.aclose()
    return rows


def run(calls: int = 1_000) -> list[dict[str, Any]]:
    """Every case in :data:`CASES` on an embedded Redis and a worker process; one row per adapter (ms)."""
    keys = Keys(f"bench-adapters-{uuid.uuid4().hex[:6]}", 4)
    with RedisServer() as server:
        worker = subprocess.Popen([sys.executable, "-m", "workers", "worker", "--redis-url", server.url,
                                   "--namespace", keys.namespace, "--partitions", str(keys.partitions)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            result: list[dict[str, Any]] = runtime.run(_run, server.url, keys, calls)
        finally:
            worker.terminate()
            worker.wait(timeout=30)
        return result


def report(out: Callable[[str], None], *, quick: bool) -> None:
    """The section ``make bench`` prints (``bench/run_all.py``)."""
    rows = run(30 if quick else 1_000)
    out(f"## Framework adapters: time added per model call ({rows[0]['calls']:,} calls per adapter)")
    out("")
    out("| adapter | added p50 ms | added p99 ms | adapter CPU p50 ms | loop p50 ms with | loop p50 ms without "
        "| Redis PING p50 ms |")
    out("|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        out(f"| {r['adapter']} | {r['added_p50']:.2f} | {r['added_p99']:.2f} | {r['cpu_p50']:.2f} | "
            f"{r['loop_p50']:.2f} | {r['baseline_p50']:.2f} | {r['ping_p50']:.2f} |")
    out("")
    out("Added: the adapter's hook before each model call (poll the lane, window step, delivery log, placement), "
        "Redis round trip included; the SDK is real and the model scripted, the two loops run in alternation. "
        "Target: < 1 ms median added per call on a quiet host.")
    out("")


if __name__ == "__main__":
    for row in run(200):
        print(row)
