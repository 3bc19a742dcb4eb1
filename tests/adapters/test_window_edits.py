"""Generated framework-history edits over the adapter core's two windows, on real Redis.

The test plays the worker: it computes each lane signal with the worker's own pure step
(:func:`signals.core.lane.advance`) and appends it to the lane's signal stream, so each
example costs a few Redis round trips and no worker process. Between model calls the
"framework" edits its history the ways frameworks do: trims from the front or the middle,
summarises (a new message replaces the oldest ones), reorders two messages, duplicates a
message, edits one in place, restores an older history, or loses a call (the model call
raised, so the list ``prepare`` returned was never kept). After every ``prepare`` the
model's input, read the way a model reads it (the last snapshot, then the deltas after
it, in order), rebuilds the lane's latest text, and no lane version is held twice.
"""

from __future__ import annotations

import uuid
from typing import Any

import anyio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from signals.agent import AgentWorkingMemory
from signals.core.codec import FIELD, encode_json
from signals.core.lane import LaneOptions, LaneTracking, advance
from signals.core.models import WriteEvent
from signals.integrations._core import is_working_memory_text
from signals.integrations._windows import EphemeralWindow, PersistentWindow
from signals.streams.client import connect
from signals.streams.keys import Keys
from tests.adapters.support import rebuild
from tests.adapters.test_core import DictCodec, Msg
from workers.runtime.embedded import RedisServer

_EDITS = ["none", "front", "middle", "summary", "swap", "duplicate", "edit", "restore", "fail"]
PLAN = st.fixed_dictionaries({
    "ephemeral": st.booleans(),
    "policy": st.sampled_from(["compact", "compact", "mastra"]),
    "snapshot_every": st.integers(1, 5),
    "calls": st.lists(st.tuples(
        st.integers(0, 3),                # writes before this model call (a burst when > 1)
        st.sampled_from(_EDITS),          # what the framework does to its history after it
        st.integers(0, 2**16),            # where
    ), min_size=2, max_size=10),
})


def _text(write: int) -> str:
    lines = [f"- fact {i}: a line long enough that a delta is smaller than a snapshot" for i in range(6)]
    lines[write % 6] = f"- fact {write % 6}: changed at write {write}"
    return "# Notes\n" + "\n".join(lines)


def _edit(history: list[Msg], older: list[Msg], kind: str, at: int) -> list[Msg]:
    """The framework's edit of the list it keeps (a new list: the old one may be restored)."""
    out = list(history)
    n = len(out)
    if n < 2 or kind == "none":
        return out
    i, j = at % n, (at // n) % n
    if kind == "front":
        return out[i:] or out[-1:]
    if kind == "middle":
        return out[:i] + out[i + 1:]
    if kind == "summary":
        return [{"role": "user", "content": f"summary of {i + 1} messages"}, *out[i + 1:]]
    if kind == "swap":
        out[i], out[j] = out[j], out[i]
    elif kind == "duplicate":
        out.insert(j, out[i])
    elif kind == "edit":
        out[i] = {**out[i], "content": out[i]["content"] + " (edited)"}
    elif kind == "restore" and older:
        return list(older)
    return out


async def _scenario(url: str, plan: dict[str, Any]) -> None:
    keys = Keys("g" + uuid.uuid4().hex[:10], 4)
    redis = connect(url)
    agent = AgentWorkingMemory(redis, keys, resource_id="u", thread_id="t1", log_deliveries=False)
    window = EphemeralWindow(agent, DictCodec()) if plan["ephemeral"] else PersistentWindow(agent, DictCodec())
    options = LaneOptions(policy=plan["policy"], snapshot_every=plan["snapshot_every"])
    lane, write = LaneTracking(), 0
    history: list[Msg] = []
    saved: list[list[Msg]] = []  # earlier histories, for "restore"
    try:
        for turn, (writes, kind, at) in enumerate(plan["calls"]):
            for _ in range(writes):
                write += 1
                event = WriteEvent(lane="r:u", scope="resource", format="markdown", version=write,
                                   data=_text(write), op="replace", resource_id="u")
                lane, signal = advance(lane, event, options, now="t")
                if signal is not None:
                    await redis.xadd(keys.signals("r:u"), {FIELD: encode_json(signal)})
            history.append({"role": "user", "content": f"user {turn}"})
            sent = (await window.prepare(history)).messages
            markups = [m["content"] for m in sent if is_working_memory_text(m["content"])]
            if lane.version:
                assert rebuild(markups) == lane.value, (turn, markups)
            held = window._held if isinstance(window, PersistentWindow) else [p.inj_id for p in window._placed]
            assert markups == [agent.window.injection(h).markup for h in held]  # type: ignore[union-attr]
            versions = [v for h in held for v in agent.window.injection(h).versions]  # type: ignore[union-attr]
            assert len(versions) == len(set(versions)), versions
            if kind != "fail" and not plan["ephemeral"]:
                history = sent  # a persistent window's list is the history the framework keeps
            history = [*history, {"role": "assistant", "content": f"reply {turn}"}]
            saved.append(history)
            history = _edit(history, saved[at % len(saved)], kind, at)
    finally:
        await redis.aclose()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=PLAN)
def test_history_edits_keep_the_invariant(redis_server: RedisServer, plan: dict[str, Any]) -> None:
    """Any framework edit of its history: the model can rebuild the latest version and holds none twice."""
    anyio.run(_scenario, redis_server.url, plan)
