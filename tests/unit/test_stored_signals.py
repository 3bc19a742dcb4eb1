"""What a signal's stream entry stores (each text once) and how it decodes (Mastra-shaped)."""

from __future__ import annotations

import pytest

from signals.core.codec import decode_signal, encode_json, encode_signal
from signals.core.lane import LaneOptions, LaneTracking, advance
from signals.core.models import Signal, WriteEvent

DOC = "# Profile\n" + "\n".join(f"- fact {i}: some words about it" for i in range(12))


def _signals(*, omit: bool, scope: str = "resource", fmt: str = "markdown") -> list[Signal]:
    """A snapshot then a delta, as a worker emits them."""
    options = LaneOptions(omit_delta_value=omit)
    lane = "r:u1" if scope == "resource" else "t:th1"
    texts = [DOC, DOC.replace("fact 3", "fact 33")] if fmt == "markdown" else ['{"a":1,"b":[1,2]}', '{"a":2,"b":[1,2]}']
    tracking, out = LaneTracking(), []
    for version, text in enumerate(texts, 1):
        event = WriteEvent(lane=lane, scope=scope, format=fmt, version=version, data=text, op="replace",  # type: ignore[arg-type]
                           resource_id="u1", thread_id="th1" if scope == "thread" else None)
        tracking, signal = advance(tracking, event, options, now="2026-12-03T00:00:00.000Z")
        assert signal is not None
        out.append(signal)
    return out


@pytest.mark.parametrize("omit", [True, False])
@pytest.mark.parametrize(("scope", "fmt"), [("resource", "markdown"), ("thread", "json")])
def test_a_stored_signal_decodes_to_the_signal(omit: bool, scope: str, fmt: str) -> None:
    """Every field comes back, Mastra's included (a delta's value only when it was stored)."""
    for signal in _signals(omit=omit, scope=scope, fmt=fmt):
        assert decode_signal(encode_signal(signal)) == signal


def test_each_text_is_stored_once() -> None:
    """A snapshot's value and a delta's delta (equal to contents) are not stored; neither
    are tagName and the ids the lane names; a delta's value only without omit_delta_value."""
    snapshot, delta = _signals(omit=True)
    stored = encode_signal(snapshot)
    assert stored.count("fact 0: some words") == 1 and '"value"' not in stored and '"tagName"' not in stored
    assert '"resourceId"' not in stored
    assert stored.startswith('{"id":"working-memory","mode":"snapshot",')  # what the commit script's retention reads
    stored = encode_signal(delta)
    assert stored.count("fact 33") == 1 and '"delta":' not in stored and '"value"' not in stored
    _, kept = _signals(omit=False)
    assert encode_signal(kept).count("fact 0: some words") == 1  # the delta's value, not its patch


def test_a_thread_lane_keeps_its_owner() -> None:
    """A thread lane's resourceId (its owner) is stored; its threadId (the lane) is not."""
    snapshot, _ = _signals(omit=True, scope="thread", fmt="json")
    stored = encode_signal(snapshot)
    assert '"resourceId":"u1"' in stored and '"threadId"' not in stored


def test_an_entry_with_every_field_decodes_as_it_is() -> None:
    """An entry written whole (Mastra's shape, as encode_json writes it) reads the same."""
    for signal in _signals(omit=False):
        assert decode_signal(encode_json(signal)) == signal


def test_the_mastra_shape_is_unchanged() -> None:
    """encode_json of a decoded entry is Mastra's shape: both texts of a snapshot."""
    snapshot, _ = _signals(omit=True)
    whole = encode_json(decode_signal(encode_signal(snapshot)))
    assert whole == encode_json(snapshot)
    assert '"tagName":"working-memory"' in whole and whole.count("fact 0: some words") == 2


def test_the_tracking_stores_its_cache_key_without_the_prefix() -> None:
    """64 characters keep the tracking hash in Redis's compact encoding; both forms parse."""
    key = "sha256:" + "ab" * 32
    tracking = LaneTracking(version=3, cache_key=key, mode="delta", write_version=4, since_snapshot=2)
    fields = tracking.fields()
    assert fields[fields.index("ck") + 1] == "ab" * 32
    for stored in ("ab" * 32, key):
        parsed = LaneTracking.parse(["3", stored, "delta", "4", "2", "", "", ""], "trk")
        assert parsed.cache_key == key
