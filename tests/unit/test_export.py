"""The lane export file (``wm-signals export`` / ``replay --file``): its bytes and its reader."""

from __future__ import annotations

from pathlib import Path

import pytest

from signals.core.models import Attributes, Delivery, Signal
from signals.errors import InvalidInputError
from signals.streams.export import LaneExport, decode_export, encode_export, read_export, write_export

_ATTRS = Attributes(format="markdown", scope="resource")
_SIGNAL = Signal(id="working-memory", mode="snapshot", cache_key="sha256:ab", tag_name="working-memory",
                 contents="# Über\n- tea", value="# Über\n- tea", attributes=_ATTRS, version=1, lane="r:u",
                 resource_id="u", write_version=1)
_DELIVERY = Delivery(thread_id="t", step=1, lane="r:u", version=1, mode="snapshot", reason="bootstrap",
                     cache_key="sha256:ab", contents="# Über\n- tea", attributes=_ATTRS)


def test_the_format_is_pinned() -> None:
    """One compact JSON line per record, signals then deliveries, every field named (files
    written by earlier versions must still read, and these bytes are what they wrote)."""
    assert encode_export([("1-0", _SIGNAL)], [_DELIVERY]) == (
        '{"kind":"signal","entryId":"1-0","signal":{"id":"working-memory","mode":"snapshot",'
        '"cacheKey":"sha256:ab","tagName":"working-memory","contents":"# Über\\n- tea","value":"# Über\\n- tea",'
        '"attributes":{"format":"markdown","scope":"resource"},"version":1,"lane":"r:u","resourceId":"u",'
        '"writeVersion":1},"delivery":null}\n'
        '{"kind":"delivery","entryId":null,"signal":null,"delivery":{"threadId":"t","step":1,"lane":"r:u",'
        '"version":1,"mode":"snapshot","reason":"bootstrap","cacheKey":"sha256:ab","contents":"# Über\\n- tea",'
        '"attributes":{"format":"markdown","scope":"resource"}}}\n'
    )
    # earlier versions wrote ``"at":null`` for an unstamped delivery (fields at their
    # default are now left out, like ``baseVersion``): such files still read
    old = encode_export([], [_DELIVERY]).replace('"scope":"resource"}}}', '"scope":"resource"},"at":null}}')
    assert decode_export(old.encode()).deliveries == [_DELIVERY]


def test_a_file_reads_back_as_written(tmp_path: Path) -> None:
    """write_export then read_export gives the same signals (with their ids) and deliveries."""
    path = tmp_path / "lane.jsonl"
    write_export(path, [("1-0", _SIGNAL), ("2-0", _SIGNAL)], [_DELIVERY])
    assert read_export(path) == LaneExport([("1-0", _SIGNAL), ("2-0", _SIGNAL)], [_DELIVERY])


def test_blank_lines_are_skipped_and_a_missing_id_is_the_line_number() -> None:
    """A hand-edited file may hold blank lines and signals without ``entryId``."""
    line = encode_export([("1-0", _SIGNAL)], []).replace('"entryId":"1-0"', '"entryId":null')
    assert decode_export(("\n  \n" + line).encode()).signals == [("3", _SIGNAL)]


@pytest.mark.parametrize(("line", "problem"), [
    (b"not json", "not an export record"),
    (b'{"kind":"signal","signal":{"id":1}}', "not an export record"),
    (b"[" * 5000 + b"]" * 5000, "not an export record"),
    (b'{"kind":"window"}', "unknown record kind 'window'"),
    (b'{"kind":"signal"}', "unknown record kind 'signal'"),
])
def test_a_bad_line_is_refused_naming_the_file_and_line(line: bytes, problem: str) -> None:
    """Anything but an export record raises InvalidInputError with the source and line number."""
    with pytest.raises(InvalidInputError, match=f"^in.jsonl line 2: {problem}"):
        decode_export(encode_export([("1-0", _SIGNAL)], []).encode() + line, source="in.jsonl")


def test_an_unreadable_file_raises_oserror(tmp_path: Path) -> None:
    """File errors are left to the caller (the CLI names its option in the message)."""
    with pytest.raises(OSError, match="No such file"):
        read_export(tmp_path / "missing.jsonl")
