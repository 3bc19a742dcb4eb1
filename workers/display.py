"""Terminal output of signals for the CLI (rich on a tty, plain text or JSON lines otherwise)."""

from __future__ import annotations

import sys

from rich.console import Console

from signals.core.codec import encode_json
from signals.core.render import signal_markup
from signals.core.tokens import approx_tokens
from signals.streams.replay import Materialised

__all__ = ("print_signal", "signal_record")

_console = Console(highlight=False, soft_wrap=True)


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
        sys.stdout.write(encode_json(signal_record(item)) + "\n")
        sys.stdout.flush()
        return
    s = item.signal
    _console.print(f"[bold]v{s.version}[/] {s.mode} {s.cache_key[:19]}… "
                   f"{len(s.contents.encode())} B ~{approx_tokens(s.contents)} tok {s.emitted_at or ''}")
    _console.print(signal_markup(s.contents, s.attributes), markup=False)
