"""The invariant, end to end, with generated histories, real Redis and a real worker.

For any interleaving of replace/merge writes from several writers, worker crashes and
restarts, policies, coalescing on or off, and any trimming of the agent's window (by
message count or by token budget), once the worker has caught up: the working memory
rebuilt from the window (last snapshot plus the deltas after it) equals the stored one,
lane versions only increase, and no version is in the window twice (a coalesced catch-up
delta holds its whole range). The delivery log gives back every message the model was
given, byte for byte, and what it could rebuild at each step.
"""

from __future__ import annotations

import random
import uuid
from typing import Any

import anyio
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from signals.agent import AgentWorkingMemory
from signals.core.cachekey import js_trim
from signals.core.memory import WorkingMemoryConfig
from signals.core.render import signal_markup
from signals.core.window import trim_window
from signals.streams.client import connect
from signals.streams.keys import Keys
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import running_workers, wait_caught_up
from workers.runtime.embedded import RedisServer

pytestmark = pytest.mark.redis

WRITE = st.tuples(st.integers(0, 2), st.integers(0, 2**31))
PLAN = st.fixed_dictionaries({
    "scope": st.sampled_from(["resource", "thread"]),
    "format": st.sampled_from(["markdown", "json"]),
    "policy": st.sampled_from(["compact", "mastra"]),
    "snapshot_every": st.integers(1, 6),
    "trim": st.one_of(st.tuples(st.just("count"), st.integers(2, 8)),
                      st.tuples(st.just("tokens"), st.integers(60, 400))),
    "steps": st.lists(st.lists(WRITE, max_size=3), min_size=4, max_size=14),
    "crash_at": st.one_of(st.none(), st.integers(1, 10)),
    "coalesce": st.sampled_from([None, True, False]),
})


def _markdown_edit(rng: random.Random, lines: list[str]) -> list[str]:
    lines = list(lines)
    r = rng.random()
    if r < 0.2:
        return lines  # exact repeat
    if r < 0.55 and lines:
        lines[rng.randrange(len(lines))] = f"- fact {rng.randint(0, 9)}: {rng.choice(['a', 'b', 'é', '😀'])}"
    elif r < 0.8:
        lines.insert(rng.randint(0, len(lines)), f"- new {rng.randint(0, 99)}" + ("\r" if rng.random() < 0.1 else ""))
    elif len(lines) > 1:
        del lines[rng.randrange(len(lines))]
    return lines


def _json_update(rng: random.Random) -> dict[str, Any]:
    update: dict[str, Any] = {}
    for _ in range(rng.randint(1, 3)):
        key = rng.choice(["name", "city", "tags", "prefs", "n"])
        update[key] = rng.choice([None, rng.randint(0, 5), ["x", "y"][: rng.randint(0, 2)],
                                  {"a": rng.randint(0, 2), "b": None}, "text"])
    return update


def _trim(window: list[tuple[str | None, str]], trim: tuple[str, int]) -> list[tuple[str | None, str]]:
    kind, limit = trim
    return trim_window(window, max_messages=limit) if kind == "count" else trim_window(window, max_tokens=limit)


async def _scenario(url: str, plan: dict[str, Any]) -> None:
    keys = Keys("inv" + uuid.uuid4().hex[:8], 2)
    cfg = (WorkingMemoryConfig(scope=plan["scope"], schema={"type": "object"}) if plan["format"] == "json"
           else WorkingMemoryConfig(scope=plan["scope"]))
    redis = connect(url)
    writers = [WorkingMemoryStore(connect(url), keys=keys, config=cfg) for _ in range(3)]
    await writers[0].create_thread("th", "res")
    agent = AgentWorkingMemory(redis, keys, resource_id="res", thread_id="th", config=cfg,
                               coalesce=plan["coalesce"])
    seen: list[tuple[int, str]] = []  # (step, markup) of every message the model was given
    views: dict[int, str] = {}  # step -> what the model could rebuild then
    await agent.start()
    rng = random.Random(0)
    lines = [f"- fact {i}: seed" for i in range(6)]
    window: list[tuple[str | None, str]] = []
    last_version = 0
    worker_opts = {"policy": plan["policy"], "snapshot_every": plan["snapshot_every"], "retain_signals": 2}

    async def write(who: int, seed: int) -> None:
        nonlocal lines
        local = random.Random(seed)
        if plan["format"] == "json":
            await writers[who].merge("res", _json_update(local), thread_id="th")
        else:
            lines = _markdown_edit(local, lines)
            await writers[who].replace("res", "# Notes\n" + "\n".join(lines), thread_id="th")

    for index, writes in enumerate(plan["steps"]):
        crash = plan["crash_at"] == index
        async with running_workers(url, keys, 1, crash=crash, **worker_opts):
            async with anyio.create_task_group() as tg:
                for who, seed in writes:
                    tg.start_soon(write, who, seed)
            if crash:  # kill the worker while it may hold read, uncommitted entries
                await anyio.sleep(rng.random() * 0.01)
            else:
                await wait_caught_up(redis, keys, limit_s=30)
        if crash:  # a restarted worker (same consumer name) finishes the work
            async with running_workers(url, keys, 1, **worker_opts):
                await wait_caught_up(redis, keys, limit_s=30)
        held = [mid for mid, _ in window if mid]
        result = await agent.before_model_call(held)
        window = [(mid, text) for mid, text in window if mid not in result.drop]
        window += [(inj.id, inj.markup) for inj in result.add]
        seen += [(result.step, inj.markup) for inj in result.add]
        held = [mid for mid, _ in window if mid]
        doc = await writers[0].get("res", "th")
        expected = js_trim(doc.data) if doc else ""
        if expected:
            assert agent.window.rebuild(held) == expected, (index, plan)
            views[result.step] = expected
        # a coalesced catch-up delta holds every version of its range
        versions = [v for m in held for v in agent.window.injection(m).versions]  # type: ignore[union-attr]
        assert len(versions) == len(set(versions)), f"a version is in the window twice: {versions}"
        assert agent.subscription.version >= last_version
        last_version = agent.subscription.version
        window += [(None, f"user says {index} " * rng.randint(1, 8)), (None, f"assistant {index}")]
        window = _trim(window, plan["trim"])
    # the delivery log rebuilds what the model was given, byte for byte, and what it could
    # rebuild at each step (the window is trimmed oldest first, so the last logged snapshot
    # and the deltas after it are what it holds)
    assert agent.log is not None
    logged = await agent.log.read("th")
    assert [(d.step, signal_markup(d.contents, d.attributes)) for d in logged] == seen
    for step, text in views.items():
        view = await agent.log.view_at("th", step)
        assert view is not None and view.text == text, (step, plan)
    for store in writers:
        await store.aclose()
    await redis.aclose()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=PLAN)
def test_window_rebuilds_stored_memory(redis_server: RedisServer, plan: dict[str, Any]) -> None:
    """Generated histories keep the invariant at every step."""
    anyio.run(_scenario, redis_server.url, plan)
