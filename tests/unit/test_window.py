"""The context-window tracker: what to add, when to re-inject, what to drop."""

from __future__ import annotations

from signals.core.codec import encode_json
from signals.core.lane import LaneOptions, LaneTracking, advance
from signals.core.models import Attributes, WriteEvent
from signals.core.processor import Policy
from signals.core.render import anthropic_message, render_markup
from signals.core.window import Injection, StepResult, WindowTracker, trim_window

BASE = [f"- fact {i}: a line long enough that a delta is smaller than the snapshot" for i in range(8)]


def _doc(*changes: tuple[int, str]) -> str:
    lines = list(BASE)
    for i, text in changes:
        lines[i] = text
    return "# Notes\n" + "\n".join(lines)


class Loop:
    """A minimal agent loop: applies step results to a list of held message ids."""

    def __init__(self, *, coalesce: bool | None = None, policy: Policy = "compact") -> None:
        self.tracker = WindowTracker("r:u", coalesce=coalesce)
        self.policy: Policy = policy
        self.lane = LaneTracking()
        self.held: list[str] = []
        self.version = 0

    def write(self, text: str) -> None:
        self.version += 1
        event = WriteEvent(lane="r:u", scope="resource", format="markdown", version=self.version,
                           data=text, op="replace", resource_id="u")
        self.lane, signal = advance(self.lane, event, LaneOptions(policy=self.policy, snapshot_every=100))
        if signal is not None:
            self.tracker.offer(signal, self.lane.value)

    def step(self) -> StepResult:
        result = self.tracker.step(self.held)
        self.held = [h for h in self.held if h not in result.drop] + [a.id for a in result.add]
        return result


def test_first_step_bootstraps_a_snapshot() -> None:
    """The first step adds a snapshot of the latest version (reason bootstrap)."""
    loop = Loop()
    loop.write(_doc())
    result = loop.step()
    assert [(a.mode, a.reason, a.version) for a in result.add] == [("snapshot", "bootstrap", 1)]
    assert loop.tracker.rebuild(loop.held) == _doc()


def test_nothing_new_adds_nothing() -> None:
    """No new signal and the chain held: nothing is added."""
    loop = Loop()
    loop.write(_doc())
    loop.step()
    assert loop.step().add == ()


def test_new_signals_are_added_as_deltas() -> None:
    """With the snapshot held and coalescing off, new versions arrive as the worker's deltas."""
    loop = Loop(coalesce=False)
    loop.write(_doc())
    loop.step()
    loop.write(_doc((2, "- changed")))
    loop.write(_doc((2, "- changed"), (5, "- also")))
    result = loop.step()
    assert [(a.mode, a.reason, a.version) for a in result.add] == [("delta", "new", 2), ("delta", "new", 3)]
    assert loop.tracker.rebuild(loop.held) == _doc((2, "- changed"), (5, "- also"))


def test_trimmed_snapshot_is_reinjected_and_orphans_dropped() -> None:
    """When the snapshot leaves the window, a snapshot of the latest version comes back and
    the orphaned deltas are reported for dropping, so no version is held twice."""
    loop = Loop()
    loop.write(_doc())
    loop.step()
    loop.write(_doc((1, "- x")))
    loop.step()
    loop.held = loop.held[1:]  # the loop trimmed the snapshot
    result = loop.step()
    assert [(a.mode, a.reason, a.version) for a in result.add] == [("snapshot", "reinject", 2)]
    assert len(result.drop) == 1
    versions = [loop.tracker.injection(h).version for h in loop.held]  # type: ignore[union-attr]
    assert versions == [2]
    assert loop.tracker.rebuild(loop.held) == _doc((1, "- x"))


def test_missing_intermediate_version_gives_a_snapshot() -> None:
    """If a needed version is unknown to the tracker, it sends a snapshot instead of a broken chain."""
    loop = Loop(coalesce=False)
    loop.write(_doc())
    loop.step()
    loop.write(_doc((1, "- a")))
    loop.tracker._known.pop(2)  # as if the subscriber never saw version 2
    loop.write(_doc((1, "- a"), (2, "- b")))
    result = loop.step()
    assert [(a.mode, a.version) for a in result.add] == [("snapshot", 3)]


def test_injection_message_is_a_user_turn_with_markup() -> None:
    """Injections render Mastra's markup in a user-role message."""
    loop = Loop()
    loop.write(_doc())
    inj = loop.step().add[0]
    assert inj.message == {"role": "user", "content": render_markup(_doc(), {"format": "markdown",
                                                                            "scope": "resource"})}


def test_trim_window_by_count_and_tokens() -> None:
    """Trimming keeps the newest messages: by count, then by token budget (newest always kept)."""
    window: list[tuple[str | None, str]] = [(None, "x" * 40), ("a", "y" * 40), (None, "z" * 8)]
    assert trim_window(window, max_messages=2) == window[1:]
    assert trim_window(window, max_tokens=12) == window[1:]
    assert trim_window(window, max_tokens=1) == window[2:]


def test_injection_as_an_anthropic_user_turn() -> None:
    """The same markup fits the Anthropic Messages API as a user text block."""
    loop = Loop()
    loop.write(_doc())
    inj = loop.step().add[0]
    assert anthropic_message(inj.markup) == {"role": "user", "content": [{"type": "text", "text": inj.markup}]}


def test_delivery_record_of_an_injection_keeps_the_log_wire_format() -> None:
    """The delivery-log record of an injection: its fields in the log's order, camelCase;
    the message id and the full text stay out of the log."""
    inj = Injection(id="wm:r:u:v2:1", step=3, version=2, mode="delta", reason="new", cache_key="sha256:" + "0" * 64,
                    contents="@@ -2,1 +2,1 @@\n-- a\n+- b", value="# N\n- b",
                    attributes=Attributes(format="markdown", scope="resource", patch="unified-diff"))
    record = inj.delivery(thread_id="t1", lane="r:u", at="2025-01-01T00:00:00.000Z")
    assert encode_json(record) == (
        '{"threadId":"t1","step":3,"lane":"r:u","version":2,"mode":"delta","reason":"new",'
        '"cacheKey":"sha256:' + "0" * 64 + '","contents":"@@ -2,1 +2,1 @@\\n-- a\\n+- b",'
        '"attributes":{"format":"markdown","scope":"resource","patch":"unified-diff"},'
        '"at":"2025-01-01T00:00:00.000Z"}'
    )
