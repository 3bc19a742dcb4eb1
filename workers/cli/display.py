"""Terminal output of signals for the CLI (rich on a tty, plain text or JSON lines otherwise).

Everything shown comes from Redis or an export file, so none of it is trusted: a field
printed inside console markup is escaped (:func:`field`: a lane named ``[/]`` is shown as
itself, not parsed as a closing tag), and no control character but a document's newlines
and tabs reaches the terminal (:func:`body`: an escape sequence in a document is shown as
``\x1b``, not run by the terminal), nor a bidirectional-text control that would show the
text in another order than it has. JSON lines (:func:`json_line`) carry the same strings
with those characters as ``\\u`` escapes: a program reading them gets the text as it is,
a terminal showing them runs nothing.
"""

from __future__ import annotations

import re
import sys

from rich.console import Console
from rich.markup import escape

from signals.core.codec import encode_json
from signals.core.render import signal_markup
from signals.core.tokens import approx_tokens
from signals.streams.replay import Materialised

__all__ = ("OutputConsole", "body", "field", "json_line", "literal", "print_signal", "signal_record")


class OutputConsole(Console):
    """The CLI's console: a reader that went away (``| head``) is a ``BrokenPipeError``,
    which the CLI reports as every command's (exit 141, nothing on stderr), where rich's
    own handling exits 1."""

    def on_broken_pipe(self) -> None:
        """Stop writing, then raise (rich would exit with status 1)."""
        self.quiet = True
        raise BrokenPipeError


_console = OutputConsole(highlight=False, soft_wrap=True)
#: Bidirectional-text controls (they reorder what a terminal shows: "Trojan Source").
_BIDI = "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069"
_CONTROL = re.compile(f"[\x00-\x08\x0b-\x1f\x7f-\x9f{_BIDI}]")
#: What JSON leaves raw but a terminal acts on: C1 controls and the bidi controls.
_JSON_UNSAFE = re.compile(f"[\x7f-\x9f{_BIDI}]")


def json_line(value: object) -> str:
    """``value`` as one JSON line (no newline) safe to print: C1 and bidi controls escaped."""
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", encode_json(value))


def literal(text: str) -> str:
    """``text`` when it is printable, else its escaped form (one line, no control character)."""
    return text if text.isprintable() else repr(text)[1:-1]


def field(text: str) -> str:
    """``text`` for a one-line field inside console markup: escaped, then markup-escaped."""
    return escape(literal(text))


def body(text: str) -> str:
    """A document or patch for the terminal (printed with ``markup=False``): its newlines
    and tabs kept, every other control character escaped."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def signal_record(item: Materialised) -> dict[str, object]:
    """The JSON line of a signal: its wire fields plus the rebuilt ``value``."""
    s = item.signal
    return {"entryId": item.entry_id, "version": s.version, "mode": s.mode, "cacheKey": s.cache_key,
            "contents": s.contents, "value": item.value, "attributes": {
                "format": s.attributes.format, "scope": s.attributes.scope, "patch": s.attributes.patch},
            "baseVersion": s.base_version, "writeVersion": s.write_version, "emittedAt": s.emitted_at,
            "size": len(s.contents.encode()), "tokens": approx_tokens(s.contents)}


def print_signal(item: Materialised, *, as_json: bool) -> None:
    """Print one signal: a JSON line, or a header plus the markup the model reads."""
    if as_json:
        sys.stdout.write(json_line(signal_record(item)) + "\n")
        sys.stdout.flush()
        return
    s = item.signal
    _console.print(f"[bold]v{s.version}[/] {field(s.mode)} {field(s.cache_key[:19])}… "
                   f"{len(s.contents.encode())} B ~{approx_tokens(s.contents)} tok {field(s.emitted_at or '')}")
    _console.print(body(signal_markup(s.contents, s.attributes)), markup=False)
