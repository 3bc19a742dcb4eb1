"""Line diff that reproduces jsdiff 8.0.4 ``structuredPatch(..., {context: 0})``.

What it does: tokenises two texts into lines (split on ``\\n`` only; a line keeps its
terminator, so ``"a"`` and ``"a\\n"`` are different lines), runs the same greedy Myers
variant as jsdiff (diagonal pruning at the edges of the edit graph, the same tie-break
between an insertion and a deletion, so the same copy of a repeated line is reported),
and renders the result the way Mastra does: ``@@ -A,B +C,D @@`` headers with raw
counts (a zero-length side is not decremented), ``-``/``+`` lines without their
terminator, everything joined with ``\\n``, no file header and no
``\\ No newline at end of file`` markers.

It also applies such a patch to the prior text (:func:`apply_patch`), refusing with
:class:`~signals.errors.PatchError` when a hunk does not fit.

Cost: the Myers search costs about E^2 / 2 steps for E line insertions plus deletions, so
a long document rewritten wholesale (its lines shuffled) would take minutes. Given a
limit (``max_edits``; ``search_edits`` for :func:`compact_patch`) the search gives up
past it, after at most (E + 1)(E + 2) / 2 steps, and the result is ``None``; the
processor's budget turns that into a snapshot. Within the budget the result
is exactly the unbounded one (jsdiff's). Mastra calls jsdiff with no limit: this budget
is the one place where the ``mastra`` policy deviates from it.

What it does not do: no I/O, no context lines (context is always 0), no fuzzy apply.
Texts are expected not to end with ``\\n`` (working memory is trimmed), which is what
makes the hunks-only form unambiguous to apply.
"""

from __future__ import annotations

import contextlib
import re
from itertools import compress
from operator import ne
from typing import NamedTuple, cast

from signals.errors import PatchError

__all__ = (
    "Hunk",
    "apply_patch",
    "compact_patch",
    "diff_hunks",
    "parse_patch",
    "render_hunks",
    "unified_patch",
)

_COMMON, _ADDED, _REMOVED = 0, 1, 2
#: A hunk header: ASCII digits only, at most 16 a number (no document has 10**16 lines).
#: Patches are read from Redis and from files: ``\d`` would take other scripts' digits, and
#: ``int()`` of a number past 4300 digits raises ValueError, which no reader of a patch
#: catches; a header outside this form is a PatchError (the patch does not apply).
_HEADER = re.compile(r"@@ -([0-9]{1,16}),([0-9]{1,16}) \+([0-9]{1,16}),([0-9]{1,16}) @@")
_FAR = 1 << 62
_SHORT_RUN = 8  # the Myers loop follows common runs up to this long itself
_CHUNK = 16  # then _snake compares this many lines at a time
_GALLOP_AFTER = 256  # and past this many, galloping slices
_FEW_LINES = 4  # in-place edits up to this many lines skip the Myers search


class Hunk(NamedTuple):
    """One change region: 1-based starts, line counts and the ``-``/``+`` lines in order."""

    old_start: int
    old_lines: int
    new_start: int
    new_lines: int
    lines: tuple[str, ...]


class _Abandoned(Exception):
    """The edit script exceeded the caller's ``max_edits`` budget."""


Token = str | tuple[str]
_OLD_END: Token = ("\n",)  # ends the search appends: no line equals them (none holds a
_NEW_END: Token = ("\n\n",)  # \n), nor do they equal each other


def tokenize(text: str) -> list[Token]:
    """Split ``text`` into jsdiff's line tokens.

    A line that ends with ``\n`` is represented by its text without the terminator; a
    final line without one by a 1-tuple, so that it never equals a terminated line with
    the same text (jsdiff compares ``"a"`` and ``"a\n"`` as different lines). The split
    runs in C, which matters for 2,000-line documents.
    """
    if not text:
        return []
    parts: list[Token] = list(text.split("\n"))
    if parts[-1] == "":
        parts.pop()
    else:
        parts[-1] = (cast(str, parts[-1]),)
    return parts


def _text(token: Token) -> str:
    return token if isinstance(token, str) else token[0]


_Path = tuple[int, int, object] | None  # (count, kind, previous component): jsdiff's lastComponent chain


def _edit_script(  # noqa: C901 - a faithful port of one algorithm reads best as one function
    old: list[Token], new: list[Token], max_edits: int | None
) -> list[tuple[int, int]]:
    """Return jsdiff's component list as ``(kind, count)`` pairs, oldest first.

    jsdiff's ``diffWithOptionsObj`` loop, statement for statement, with its ``bestPath``
    array split in two lists indexed by ``diagonal + shift``: ``reach`` (the furthest
    old position reached on the diagonal, ``_FAR`` where jsdiff has ``undefined``, which
    makes both "can add" and "can remove" tests fail without a separate check) and
    ``paths`` (the component chain). The loop bound ``min(max_diag, edit)`` is kept in
    ``top``, lowered where jsdiff lowers ``maxDiagonalToConsider``.

    Cost: edit length ``e`` visits at most ``e + 1`` diagonals, so a search abandoned
    at ``max_edits`` E made at most ``(E + 1)(E + 2) / 2`` visits; the common runs it
    followed are C-level slice compares (see :func:`_snake`).

    Raises:
        _Abandoned: no edit script of at most ``max_edits`` insertions plus deletions.
    """
    n_old, n_new = len(old), len(new)
    old, new = [*old, _OLD_END], [*new, _NEW_END]  # different ends: no common run crosses them
    start = _snake(old, new, 0, 0) - 1
    head: _Path = (start + 1, _COMMON, None) if start >= 0 else None
    if start + 1 >= n_old and start + 1 >= n_new:
        return _components(head)

    limit = n_old + n_new if max_edits is None else max(0, min(n_old + n_new, max_edits))
    shift = limit + 1  # diagonals -limit-1 .. limit+1 are read
    reach = [_FAR] * (2 * limit + 3)
    paths: list[_Path] = [None] * (2 * limit + 3)
    reach[shift], paths[shift] = start, head
    min_diag, max_diag = -_FAR, _FAR
    for edit in range(1, limit + 1):
        diag = max(min_diag, -edit)
        top = min(max_diag, edit)
        while diag <= top:
            at = diag + shift
            remove_at, add_at = reach[at - 1], reach[at + 1]
            reach[at - 1] = _FAR  # jsdiff drops the remove path once it is used
            can_remove = remove_at + 1 < n_old
            if diag <= add_at < n_new + diag and (not can_remove or remove_at < add_at):
                old_pos, last, kind = add_at, paths[at + 1], _ADDED
            elif can_remove:
                old_pos, last, kind = remove_at + 1, paths[at - 1], _REMOVED
            else:
                reach[at] = _FAR
                diag += 2
                continue
            paths[at - 1] = None
            path: _Path = (1, kind, last) if last is None or last[1] != kind else (last[0] + 1, kind, last[2])
            new_pos = old_pos - diag
            if old[old_pos + 1] == new[new_pos + 1]:  # the end markers keep both indexes in range
                common = 1  # most common runs are short: follow them here (no call)
                while common < _SHORT_RUN and old[old_pos + 1 + common] == new[new_pos + 1 + common]:
                    common += 1
                if common == _SHORT_RUN:
                    common += _snake(old, new, old_pos + 1 + common, new_pos + 1 + common)
                old_pos += common
                new_pos += common
                path = (common, _COMMON, path)
            if old_pos + 1 >= n_old:
                if new_pos + 1 >= n_new:
                    return _components(path)
                max_diag = min(max_diag, diag - 1)
                top = min(top, max_diag)
            if new_pos + 1 >= n_new:
                min_diag = max(min_diag, diag + 1)
            reach[at], paths[at] = old_pos, path
            diag += 2
    raise _Abandoned


def _snake(old: list[Token], new: list[Token], i: int, j: int) -> int:
    """Length of the common run of ``old[i:]`` and ``new[j:]`` (jsdiff's extractCommon).

    Compares ``_CHUNK``-line slices (one C-level compare each) and finishes line by line;
    a run longer than ``_GALLOP_AFTER`` lines gallops (doubling slices, then halving), so
    that even a 60,000-line run costs a few dozen slice compares.
    """
    limit = min(len(old) - i, len(new) - j)
    low = 0
    while low + _CHUNK <= limit and old[i + low : i + low + _CHUNK] == new[j + low : j + low + _CHUNK]:
        low += _CHUNK
        if low >= _GALLOP_AFTER:
            return low + _gallop(old, new, i + low, j + low, limit - low)
    while low < limit and old[i + low] == new[j + low]:
        low += 1
    return low


def _gallop(old: list[Token], new: list[Token], i: int, j: int, limit: int) -> int:
    """:func:`_snake` for long runs: ``limit`` is how far both lists go."""
    low, step = 0, _CHUNK
    while low < limit:
        size = min(step, limit - low)
        if old[i + low : i + low + size] != new[j + low : j + low + size]:
            hi = low + size  # the first difference is in old[i+low:i+hi]: halve the window
            while hi - low > 1:
                mid = (low + hi) // 2
                if old[i + low : i + mid] == new[j + low : j + mid]:
                    low = mid
                else:
                    hi = mid
            return low
        low += size
        step *= 2
    return low


def _components(last: tuple[int, int, object] | None) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    node = last
    while node is not None:
        count, kind, prev = node
        out.append((kind, count))
        node = cast(tuple[int, int, object] | None, prev)
    out.reverse()
    return out


def diff_hunks(prior: str, nxt: str, *, max_edits: int | None = None) -> list[Hunk] | None:
    """Compute jsdiff's context-0 hunks from ``prior`` to ``nxt``.

    Args:
        prior: the text the patch starts from.
        nxt: the new text.
        max_edits: give up (return ``None``) when the edit script needs more line
            insertions plus deletions than this; ``None`` means no limit (jsdiff's
            behaviour, as Mastra calls it).
    """
    old_tokens, new_tokens = tokenize(prior), tokenize(nxt)
    try:
        script = _edit_script(old_tokens, new_tokens, max_edits)
    except _Abandoned:
        return None

    return _hunks(script, old_tokens, new_tokens, 0)


def _hunks(script: list[tuple[int, int]], old: list[Token], new: list[Token], offset: int) -> list[Hunk]:
    """Context-0 hunks from an edit script; ``offset`` lines precede both token lists."""
    hunks: list[Hunk] = []
    old_line = new_line = 1
    pending: list[str] = []
    old_start = new_start = 0
    for kind, count in [*script, (_COMMON, 0)]:
        if kind == _COMMON:
            if pending:
                hunks.append(Hunk(old_start + offset, old_line - old_start, new_start + offset,
                                  new_line - new_start, tuple(pending)))
                pending = []
            old_line += count
            new_line += count
            continue
        if not pending:
            old_start, new_start = old_line, new_line
        if kind == _ADDED:
            pending.extend("+" + _text(t) for t in new[new_line - 1 : new_line - 1 + count])
            new_line += count
        else:
            pending.extend("-" + _text(t) for t in old[old_line - 1 : old_line - 1 + count])
            old_line += count
    return hunks


def compact_patch(
    prior: str, nxt: str, *, max_edits: int | None = None, search_edits: int | None = None
) -> str | None:
    """A hunks-only patch in the same format, computed for speed rather than jsdiff parity.

    For the ``compact`` policy, where any patch that :func:`apply_patch` applies is
    correct. Lines are the ``\n``-separated pieces (what :func:`apply_patch` splits on).
    When both texts have as many lines (lines edited in place, the usual working-memory
    update) each run of differing lines becomes one hunk in linear time; unless a single
    line differs or no removed line occurs in the new text (then no patch has fewer
    edits: see :func:`_moved`), the common prefix and suffix are then skipped with C-level comparisons
    and the Myers search runs on the middle only (bounded by the in-place patch's edit
    count when at most a few lines differ: it can only win with fewer edits, as when one
    line was removed and another added further down, shifting those between), and the
    smaller patch wins.

    Args:
        prior: the text the patch starts from.
        nxt: the new text.
        max_edits: the largest patch wanted, in ``-`` plus ``+`` lines; ``None`` past it.
        search_edits: the Myers search gives up past this many edits (its cost grows
            with their square); the linear in-place candidate is not limited by it.
            ``None`` when neither candidate is within the limits.
    """
    old: list[Token] = prior.split("\n")  # type: ignore[assignment]  # str tokens: _text is the identity
    new: list[Token] = nxt.split("\n")  # type: ignore[assignment]
    candidates: list[list[Hunk]] = []
    limits = [limit for limit in (max_edits, search_edits) if limit is not None]
    if len(old) == len(new):
        differing = list(compress(range(len(old)), map(ne, old, new)))
        if len(differing) == 1:  # the usual update, one line rewritten: its hunk, rendered at once
            if max_edits is not None and max_edits < 2:  # one line out, one in
                return None
            line = differing[0]
            return f"@@ -{line + 1},1 +{line + 1},1 @@\n-{old[line]}\n+{new[line]}"
        in_place = _in_place(old, new, 0, differing)
        changed = sum(h.old_lines for h in in_place)
        if changed <= 1 or not _moved(in_place, old, new, nxt):
            return _within(in_place, max_edits)  # no alignment has fewer edits (see _moved)
        candidates.append(in_place)  # maybe the lines shifted (one removed, one added): compare with Myers
        if changed <= _FEW_LINES:
            limits.append(2 * changed - 1)  # Myers only wins with fewer edits: a search of a few steps
    head = _snake(old, new, 0, 0)
    stop = head - 1 if head else None
    tail = _snake(old[:stop:-1], new[:stop:-1], 0, 0)
    mid_old, mid_new = old[head : len(old) - tail], new[head : len(new) - tail]
    with contextlib.suppress(_Abandoned):
        script = _edit_script(mid_old, mid_new, min(limits, default=None))
        candidates.append(_hunks(script, mid_old, mid_new, head))
    patches = [p for p in (_within(c, max_edits) for c in candidates) if p is not None]
    return min(patches, key=len) if patches else None


def _moved(in_place: list[Hunk], old: list[Token], new: list[Token], nxt: str) -> bool:
    """Whether a line the in-place hunks remove occurs anywhere in ``new`` (the lines of
    ``nxt``; a line that is not even a substring of ``nxt`` is not one of them).

    Otherwise no alignment beats the in-place one: it matches every line that stayed in
    place, and any alignment matching more lines would match some removed line with an
    equal line of ``new``. The Myers search is then skipped (the usual update: lines
    rewritten in place, none of them moved).
    """
    removed = [t for h in in_place for t in old[h.old_start - 1 : h.old_start - 1 + h.old_lines]]
    for t in removed:
        if _text(t) in nxt:  # a candidate: now the exact test, once
            present = set(new)
            return any(r in present for r in removed)
    return False


def _within(hunks: list[Hunk], max_edits: int | None) -> str | None:
    if max_edits is not None and sum(h.old_lines + h.new_lines for h in hunks) > max_edits:
        return None
    return render_hunks(hunks)


def _in_place(old: list[Token], new: list[Token], offset: int, differing: list[int] | None = None) -> list[Hunk]:
    """Hunks for two equally long token lists: each run of differing lines is one hunk
    (``differing``: the indexes of the lines that differ, when the caller has them)."""
    if differing is None:
        differing = list(compress(range(len(old)), map(ne, old, new)))
    hunks: list[Hunk] = []
    k, n = 0, len(differing)
    while k < n:
        first = last = differing[k]
        k += 1
        while k < n and differing[k] == last + 1:
            last = differing[k]
            k += 1
        stop = last + 1
        lines = tuple(["-" + _text(t) for t in old[first:stop]] + ["+" + _text(t) for t in new[first:stop]])
        hunks.append(Hunk(offset + first + 1, stop - first, offset + first + 1, stop - first, lines))
    return hunks


def render_hunks(hunks: list[Hunk]) -> str:
    """Render hunks the way Mastra's ``renderHunksOnly`` does."""
    return "\n".join(
        "\n".join(
            (f"@@ -{h.old_start},{h.old_lines} +{h.new_start},{h.new_lines} @@", *h.lines)
        )
        for h in hunks
    )


def unified_patch(prior: str, nxt: str, *, max_edits: int | None = None) -> str | None:
    """Hunks-only unified diff from ``prior`` to ``nxt`` (``None`` past ``max_edits``)."""
    hunks = diff_hunks(prior, nxt, max_edits=max_edits)
    return None if hunks is None else render_hunks(hunks)


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
