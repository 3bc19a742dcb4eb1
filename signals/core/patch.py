"""The hunks-only patch format Mastra renders: ``@@ -A,B +C,D @@`` headers and ``-``/``+`` lines.

What it does: renders hunks the way Mastra does (raw counts: a zero-length side is not
decremented; ``-``/``+`` lines without their terminator; everything joined with ``\\n``;
no file header and no ``\\ No newline at end of file`` markers), parses such a patch
checking every header against its lines, and applies it to the prior text
(:func:`apply_patch`), refusing with :class:`~signals.errors.PatchError` when it is
malformed or a hunk does not fit.

What it does not do: no I/O, no context lines (context is always 0), no fuzzy apply.
Texts are expected not to end with ``\\n`` (working memory is trimmed), which is what
makes the hunks-only form unambiguous to apply.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from signals.errors import PatchError

__all__ = ("Hunk", "apply_patch", "parse_patch", "render_hunks")

#: A hunk header: ASCII digits only, at most 16 a number (no document has 10**16 lines).
#: Patches are read from Redis and from files: ``\d`` would take other scripts' digits, and
#: ``int()`` of a number past 4300 digits raises ValueError, which no reader of a patch
#: catches; a header outside this form is a PatchError (the patch does not apply).
_HEADER = re.compile(r"@@ -([0-9]{1,16}),([0-9]{1,16}) \+([0-9]{1,16}),([0-9]{1,16}) @@")


class Hunk(NamedTuple):
    """One change region: 1-based starts, line counts and the ``-``/``+`` lines in order."""

    old_start: int
    old_lines: int
    new_start: int
    new_lines: int
    lines: tuple[str, ...]


def render_hunks(hunks: list[Hunk]) -> str:
    """Render hunks the way Mastra's ``renderHunksOnly`` does."""
    return "\n".join(
        "\n".join(
            (f"@@ -{h.old_start},{h.old_lines} +{h.new_start},{h.new_lines} @@", *h.lines)
        )
        for h in hunks
    )


def parse_patch(patch: str) -> list[Hunk]:
    """Parse a hunks-only patch, checking every header against the lines that follow."""
    if patch == "":
        return []
    lines = patch.split("\n")
    hunks: list[Hunk] = []
    i = 0
    while i < len(lines):
        match = _HEADER.fullmatch(lines[i])
        if match is None:
            raise PatchError(f"line {i + 1} of the patch: expected a '@@ -A,B +C,D @@' header")
        old_start, old_count, new_start, new_count = (int(g) for g in match.groups())
        body = lines[i + 1 : i + 1 + old_count + new_count]
        if len(body) != old_count + new_count:
            raise PatchError(f"hunk {len(hunks) + 1}: header promises more lines than the patch has")
        removed = sum(1 for line in body if line.startswith("-"))
        added = sum(1 for line in body if line.startswith("+"))
        if removed != old_count or added != new_count:
            raise PatchError(
                f"hunk {len(hunks) + 1}: header says -{old_count} +{new_count}, "
                f"body has -{removed} +{added}"
            )
        hunks.append(Hunk(old_start, old_count, new_start, new_count, tuple(body)))
        i += 1 + old_count + new_count
    return hunks


def apply_patch(prior: str, patch: str) -> str:
    """Apply a hunks-only patch to ``prior`` and return the new text.

    Raises:
        PatchError: the patch is malformed, a hunk is out of order or out of range,
            or a removed line differs from the prior text.
    """
    old = prior.split("\n") if prior else []
    out: list[str] = []
    cursor = 0
    offset = 0
    for number, hunk in enumerate(parse_patch(patch), start=1):
        start = hunk.old_start - 1
        if start < cursor or start + hunk.old_lines > len(old):
            raise PatchError(f"hunk {number}: old range {hunk.old_start},{hunk.old_lines} does not fit")
        if hunk.new_start != hunk.old_start + offset:
            raise PatchError(f"hunk {number}: new start {hunk.new_start} is inconsistent")
        expected = old[start : start + hunk.old_lines]
        got = [line[1:] for line in hunk.lines if line[0] == "-"]
        if got != expected:
            bad = next(k for k, (a, b) in enumerate(zip(got, expected, strict=True)) if a != b)
            raise PatchError(
                f"hunk {number}: removed line {hunk.old_start + bad} does not match the prior text"
            )
        out.extend(old[cursor:start])
        out.extend(line[1:] for line in hunk.lines if line[0] == "+")
        cursor = start + hunk.old_lines
        offset += hunk.new_lines - hunk.old_lines
    out.extend(old[cursor:])
    return "\n".join(out)
