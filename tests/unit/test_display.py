"""The CLI's output of what it read (untrusted): nothing a terminal acts on gets through."""

from __future__ import annotations

import msgspec
import pytest

from signals.core.models import Attributes, Delivery
from signals.errors import InvalidInputError
from signals.streams.export import decode_export
from workers.cli.display import body, json_line

UNSAFE = "\x1b[31m\u009b31m\u0085\u202eabc\u2066\u200f"


def test_json_lines_escape_c1_and_bidi_controls() -> None:
    """C0 controls are escaped by JSON itself; C1 and bidi controls are escaped too, and a
    JSON reader gets the same text back."""
    line = json_line({"contents": UNSAFE, "plain": "é ü 中"})
    assert not any(0x7F <= ord(c) <= 0x9F or c in "\u202e\u2066\u200f" for c in line)
    assert msgspec.json.decode(line) == {"contents": UNSAFE, "plain": "é ü 中"}


def test_terminal_text_escapes_bidi_controls() -> None:
    """A document's text for the terminal keeps newlines and tabs, escapes the rest."""
    assert body(f"a\n\tb{UNSAFE}") == "a\n\tb\\x1b[31m\\x9b31m\\x85\\u202eabc\\u2066\\u200f"


@pytest.mark.parametrize("window", ["x] step 99 [y", "", "a" * 200, "\u0430bc"])
def test_an_export_file_with_a_window_that_is_no_name_is_refused(window: str) -> None:
    """replay --file shows a record's window as a name: a file's must be one (the line is named)."""
    record = Delivery(thread_id="t1", step=1, lane="r:u", version=1, mode="snapshot", reason="new",
                      cache_key="sha256:" + "0" * 64, contents="x",
                      attributes=Attributes(format="markdown", scope="resource"), window=window)
    line = msgspec.json.encode({"kind": "delivery", "delivery": record})
    with pytest.raises(InvalidInputError, match=r"f line 1: window .* is not a window name"):
        decode_export(line, source="f")
