"""The context-window tracker: what to add, when to re-inject, what to drop."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from signals.core.codec import encode_json
from signals.core.lane import LaneOptions, LaneTracking, advance
from signals.core.models import Attributes, WriteEvent
from signals.core.processor import Policy
from signals.core.render import anthropic_message, render_markup
from signals.core.window import Injection, StepResult, WindowTracker, trim_window
from signals.errors import InvalidInputError

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


def test_a_burst_is_one_coalesced_delta() -> None:
    """Three compact signals between two model calls: one delta from the held version to
    the latest, in the contract's markup, holding versions 2..4."""
    loop = Loop()
    loop.write(_doc())
    loop.step()
    loop.write(_doc((2, "- a")))
    loop.write(_doc((2, "- b")))
    loop.write(_doc((2, "- b"), (5, "- c")))
    (inj,) = loop.step().add
    assert (inj.mode, inj.reason, inj.version, inj.base_version, inj.versions) == ("delta", "new", 4, 1, range(2, 5))
    assert inj.markup.startswith('<working-memory format="markdown" scope="resource" patch="unified-diff">')
    assert loop.tracker.rebuild(loop.held) == _doc((2, "- b"), (5, "- c"))
    assert inj.delivery(thread_id="t", lane="r:u", at=None).base_version == 1


def test_mastra_signals_keep_one_message_each() -> None:
    """Signals of the mastra policy carry no policy: by default each is its own message."""
    loop = Loop(policy="mastra")
    loop.write(_doc())
    loop.step()
    loop.write(_doc((2, "- a")))
    loop.write(_doc((3, "- b")))
    assert [(a.mode, a.version, a.base_version) for a in loop.step().add] == [("delta", 2, None), ("delta", 3, None)]


def test_coalescing_can_be_forced_on_for_mastra_signals() -> None:
    """coalesce=True on mastra signals: one jsdiff delta in Mastra's patch format."""
    loop = Loop(policy="mastra", coalesce=True)
    loop.write(_doc())
    loop.step()
    loop.write(_doc((2, "- a")))
    loop.write(_doc((2, "- a"), (3, "- b")))
    (inj,) = loop.step().add
    assert (inj.mode, inj.version, inj.base_version) == ("delta", 3, 1)
    assert loop.tracker.rebuild(loop.held) == _doc((2, "- a"), (3, "- b"))


def test_a_rewrite_catches_up_with_a_snapshot_when_smaller() -> None:
    """When the delta from the held text would outweigh the latest text, the catch-up is a
    snapshot of the latest (one message, no duplicate versions)."""
    loop = Loop()
    loop.write(_doc())
    loop.step()
    loop.write("# Notes\n- short")
    loop.write("# Other\n- tiny")
    (inj,) = loop.step().add
    assert (inj.mode, inj.version, inj.base_version) == ("snapshot", 3, None)
    assert loop.tracker.rebuild(loop.held) == "# Other\n- tiny"


def test_coalescing_never_costs_more_than_the_signals() -> None:
    """A burst whose per-signal messages are smaller than any one catch-up keeps them."""
    loop = Loop()
    loop.write(_doc())
    loop.step()
    loop.write(_doc((2, "- a")))
    loop.write(_doc())  # back to version 1's text: a snapshot or a delta from v2...
    result = loop.step()
    per_signal = Loop(coalesce=False)
    per_signal.write(_doc())
    per_signal.step()
    per_signal.write(_doc((2, "- a")))
    per_signal.write(_doc())
    cost = sum(len(a.markup) for a in per_signal.step().add)
    assert sum(len(a.markup) for a in result.add) <= cost
    assert loop.tracker.rebuild(loop.held) == _doc()


def test_a_trimmed_coalesced_delta_is_caught_up_again() -> None:
    """Trimming a coalesced delta loses its whole range: the next step catches up from the
    snapshot still held, again in one message."""
    loop = Loop()
    loop.write(_doc())
    loop.step()
    loop.write(_doc((2, "- a")))
    loop.write(_doc((2, "- a"), (3, "- b")))
    (first,) = loop.step().add
    loop.held.remove(first.id)
    (again,) = loop.step().add
    assert (again.mode, again.base_version, again.version, again.reason) == ("delta", 1, 3, "reinject")
    assert loop.tracker.rebuild(loop.held) == _doc((2, "- a"), (3, "- b"))


def test_a_gap_is_caught_up_from_the_held_chain_and_off_chain_deltas_dropped() -> None:
    """A middle delta trimmed: instead of a snapshot, one delta from the chain still held;
    the held delta that no longer chains is dropped (it would repeat a version)."""
    loop = Loop()
    loop.write(_doc())
    loop.step()
    loop.write(_doc((1, "- a")))
    loop.step()
    loop.write(_doc((1, "- a"), (4, "- b")))
    (third,) = loop.step().add
    loop.held = [h for h in loop.held if loop.tracker.injection(h).version != 2]  # type: ignore[union-attr]
    result = loop.step()
    (inj,) = result.add
    assert (inj.mode, inj.base_version, inj.version) == ("delta", 1, 3)
    assert result.drop == (third.id,)
    assert loop.tracker.rebuild(loop.held) == _doc((1, "- a"), (4, "- b"))


def test_json_bursts_coalesce_into_one_merge_patch() -> None:
    """JSON under compact: a burst is one RFC 7396 merge patch from the held object."""
    tracker = WindowTracker("r:u")
    lane = LaneTracking()
    held: list[str] = []
    docs = ['{"name":"Ada","city":"London","notes":"prefers trains and tea, allergic to peanuts"}',
            '{"name":"Ada","city":"Paris","notes":"prefers trains and tea, allergic to peanuts"}',
            '{"name":"Ada","city":"Rome","notes":"prefers trains and tea, allergic to peanuts"}',
            '{"name":"Ada","city":"Rome","notes":"prefers trains and tea, allergic to peanuts","n":1}']
    for i, doc in enumerate(docs, 1):
        event = WriteEvent(lane="r:u", scope="resource", format="json", version=i, data=doc, op="replace",
                           resource_id="u")
        lane, signal = advance(lane, event, LaneOptions(policy="compact"))
        assert signal is not None
        tracker.offer(signal, lane.value)  # type: ignore[arg-type]
        if i in (1, 4):
            held += [a.id for a in tracker.step(held).add]
    last = tracker.injection(held[-1])
    assert last is not None
    assert (last.mode, last.attributes.patch, last.base_version, last.contents) == (
        "delta", "json-merge-patch", 1, '{"city":"Rome","n":1}')
    assert tracker.rebuild(held) == docs[-1]


# Generated histories (no Redis): bursts of writes between model calls, a worker that
# loses its delta base (crash: the next signal is a repair snapshot), a subscriber that
# misses a signal, windows trimmed oldest first or anywhere, coalescing on or off.
_LINE = st.sampled_from(["- fact a", "- fact b: é", "- fact c 😀", "- note d", "- x\r", ""])
_EDIT = st.tuples(st.sampled_from(["set", "insert", "delete", "same"]), st.integers(0, 20), _LINE)
_HISTORY = st.fixed_dictionaries({
    "policy": st.sampled_from(["compact", "mastra"]),
    "coalesce": st.sampled_from([None, True, False]),
    "format": st.sampled_from(["markdown", "json"]),
    "snapshot_every": st.integers(1, 8),
    "steps": st.lists(st.tuples(
        st.lists(_EDIT, max_size=4),                  # the burst before this model call
        st.sampled_from(["none", "oldest", "any"]),    # how the loop trims its window after it
        st.integers(0, 2**16),                         # which messages it trims
        st.sampled_from(["ok", "ok", "ok", "crash", "miss"]),
    ), min_size=1, max_size=12),
})


def _apply_edit(lines: list[str], edit: tuple[str, int, str]) -> list[str]:
    kind, at, text = edit
    lines = list(lines)
    if kind == "set" and lines:
        lines[at % len(lines)] = text
    elif kind == "insert":
        lines.insert(at % (len(lines) + 1), text)
    elif kind == "delete" and len(lines) > 1:
        del lines[at % len(lines)]
    return lines


def _render(fmt: str, lines: list[str]) -> str:
    if fmt == "json":
        return encode_json({f"k{i}": line for i, line in enumerate(lines) if line})
    return "# Notes\n" + "\n".join(lines)


@settings(max_examples=150, deadline=None)
@given(history=_HISTORY)
def test_generated_histories_keep_the_invariant(history: dict[str, Any]) -> None:
    """After every model call the held window rebuilds the latest lane text, no version is
    held twice (a coalesced delta holds its whole range)."""
    tracker = WindowTracker("r:u", coalesce=history["coalesce"])
    options = LaneOptions(policy=history["policy"], snapshot_every=history["snapshot_every"])
    lane = LaneTracking()
    lines = [f"- fact {i}: seed" for i in range(4)]
    held: list[str] = []
    write = 0
    for burst, trim, which, fault in history["steps"]:
        signals = []
        for n, edit in enumerate(burst):
            lines = _apply_edit(lines, edit)
            write += 1
            if fault == "crash" and n == 0:
                lane = msgspec.structs.replace(lane, value=None)  # the next signal is a repair snapshot
            event = WriteEvent(lane="r:u", scope="resource", format=history["format"], version=write,
                               data=_render(history["format"], lines), op="replace", resource_id="u")
            lane, signal = advance(lane, event, options, now="t")
            if signal is not None:
                signals.append((signal, lane.value))
        for n, (signal, value) in enumerate(signals):
            if not (fault == "miss" and n == 0 and len(signals) > 1):  # the subscriber never saw it
                tracker.offer(signal, value)  # type: ignore[arg-type]
        result = tracker.step(held)
        held = [h for h in held if h not in result.drop] + [a.id for a in result.add]
        if lane.version:
            assert tracker.rebuild(held) == lane.value
            assert tracker.rebuildable(held) == lane.version
        ranges = [v for h in held for v in tracker.injection(h).versions]  # type: ignore[union-attr]
        assert len(ranges) == len(set(ranges)), ranges
        if trim == "oldest" and held:
            held = held[which % len(held):]
        elif trim == "any" and held:
            del held[which % len(held)]


def test_tracker_options_are_checked_when_it_is_built() -> None:
    """``coalesce="false"`` was accepted and coalesced (a string is truthy), and
    ``count_tokens=None`` failed with a bare TypeError at the first burst."""
    with pytest.raises(InvalidInputError, match="coalesce is True, False or None"):
        WindowTracker("r:u", coalesce="false")  # type: ignore[arg-type]
    with pytest.raises(InvalidInputError, match="count_tokens is a function"):
        WindowTracker("r:u", count_tokens=None)  # type: ignore[arg-type]



def test_two_trackers_of_a_lane_never_make_the_same_message_id() -> None:
    """A restarted agent's tracker (same lane, same signals, same steps) makes new ids: a
    message the loop kept from the first process is not taken for one of the second's."""
    ids = []
    for _ in range(2):
        loop = Loop()
        loop.write(_doc())
        for _ in range(3):
            loop.held = []  # the window lost everything: the snapshot again, a new message
            ids += [a.id for a in loop.step().add]
    assert len(ids) == len(set(ids)) == 6


def test_resume_numbers_steps_after_the_given_one() -> None:
    """resume(n): the next step is n + 1 (never lower than the tracker's own count)."""
    loop = Loop()
    loop.write(_doc())
    loop.tracker.resume(41)
    assert loop.step().step == 42
    loop.tracker.resume(3)
    assert loop.step().step == 43


@pytest.mark.parametrize("bad", [-1, 1.5, "3", True, None, 2**52 + 1])
def test_resume_refuses_what_is_not_a_step(bad: Any) -> None:
    """A step number is an int from 0 to MAX_RESUME_STEP (past it, steps would soon leave
    the range the delivery log's readers accept)."""
    with pytest.raises(InvalidInputError, match="resume takes a step number"):
        WindowTracker("r:u").resume(bad)


def test_every_step_and_message_names_the_window() -> None:
    """The window's name is in each step result (the delivery log records it) and in each
    message id; a given name is kept, a bad one refused."""
    tracker = WindowTracker("r:u", window_id="pod-7.run_2")
    loop = Loop()
    loop.tracker = tracker
    loop.write(_doc())
    result = loop.step()
    assert result.window == "pod-7.run_2" and ":pod-7.run_2." in result.add[0].id
    assert result.add[0].delivery(thread_id="t", lane="r:u", at=None, window=result.window).window == "pod-7.run_2"
    for bad in ("", "a b", "x" * 65, "a/b", 7):
        with pytest.raises(InvalidInputError, match="window_id"):
            WindowTracker("r:u", window_id=bad)  # type: ignore[arg-type]


def test_a_message_kept_from_an_earlier_window_is_dropped() -> None:
    """A loop that kept its messages over a restart passes the earlier process's ids too:
    the new tracker ignored them, so after its bootstrap snapshot the window held the same
    version twice (once from each window). They are now dropped, at every step until gone;
    ids of another lane (one whose name starts with this lane's), or of anything else, are
    left alone."""
    first = Loop()
    first.write(_doc())
    first.write(_doc((0, "- changed")))
    first.step()
    kept = list(first.held)
    assert kept and all(i.startswith("wm:r:u:v") for i in kept)
    kept.append("wm:r:u:v2:x.0")  # any other window's message of this lane
    others = ["user-msg-1", "wm:r:u2:v1:abc.0", "wm:r:u:v9:a:b.0", "wm:r:u:vX:abc.0"]  # not this lane's form
    second = Loop()
    second.write(_doc())
    second.write(_doc((0, "- changed")))
    second.held = kept + others
    result = second.step()
    assert sorted(result.drop) == sorted(kept) and [a.version for a in result.add] == [2]
    assert second.held == [*others, result.add[0].id]
    second.held = [*kept, *second.held]  # the loop did not drop them: asked again, nothing added
    again = second.step()
    assert sorted(again.drop) == sorted(kept) and again.add == ()
    trimmed = result.add[0].id  # one of its own ids, trimmed, then put back: it is not held any more
    second.held = [h for h in second.held if h != trimmed]
    readd = second.step()
    second.held.append(trimmed)
    assert readd.add and second.step().drop == (trimmed,)
