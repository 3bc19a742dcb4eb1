"""jsdiff 8.0.4's line diff search: greedy Myers over line tokens, statement for statement.

What it does: tokenises a text into lines the way jsdiff does (split on ``\\n`` only; a
line keeps its terminator, so ``"a"`` and ``"a\\n"`` are different lines) and finds the
edit script between two token lists with the same greedy Myers variant as jsdiff
(diagonal pruning at the edges of the edit graph, the same tie-break between an insertion
and a deletion, so the same copy of a repeated line is reported).

Cost: the search costs about E^2 / 2 steps for E line insertions plus deletions, so a long
document rewritten wholesale (its lines shuffled) would take minutes. Given a limit
(``max_edits``) the search gives up past it, after at most (E + 1)(E + 2) / 2 steps, by
returning ``None``. Within the limit the result is exactly the unbounded one
(jsdiff's).

What it does not do: no I/O, no hunks and no rendering (:mod:`signals.core.diff` turns an
edit script into hunks, :mod:`signals.core.patch` renders, parses and applies them).
"""

from __future__ import annotations

from typing import cast

__all__ = ("ADDED", "COMMON", "REMOVED", "Token", "common_run", "edit_script", "token_text", "tokenize")

#: Kinds of an edit script's components: lines both texts share, lines added, lines removed.
COMMON, ADDED, REMOVED = 0, 1, 2
_FAR = 1 << 62
_SHORT_RUN = 8  # the Myers loop follows common runs up to this long itself
_CHUNK = 16  # then common_run compares this many lines at a time
_GALLOP_AFTER = 256  # and past this many, galloping slices


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


def token_text(token: Token) -> str:
    """The line a token stands for, without its terminator."""
    return token if isinstance(token, str) else token[0]


_Path = tuple[int, int, object] | None  # (count, kind, previous component): jsdiff's lastComponent chain


def edit_script(  # noqa: C901 - a faithful port of one algorithm reads best as one function
    old: list[Token], new: list[Token], max_edits: int | None
) -> list[tuple[int, int]] | None:
    """Return jsdiff's component list as ``(kind, count)`` pairs, oldest first; ``None``
    when no edit script has at most ``max_edits`` insertions plus deletions (the search
    gives up).

    jsdiff's ``diffWithOptionsObj`` loop, statement for statement, with its ``bestPath``
    array split in two lists indexed by ``diagonal + shift``: ``reach`` (the furthest
    old position reached on the diagonal, ``_FAR`` where jsdiff has ``undefined``, which
    makes both "can add" and "can remove" tests fail without a separate check) and
    ``paths`` (the component chain). The loop bound ``min(max_diag, edit)`` is kept in
    ``top``, lowered where jsdiff lowers ``maxDiagonalToConsider``.

    Cost: edit length ``e`` visits at most ``e + 1`` diagonals, so a search abandoned
    at ``max_edits`` E made at most ``(E + 1)(E + 2) / 2`` visits; the common runs it
    followed are C-level slice compares (see :func:`common_run`).
    """
    n_old, n_new = len(old), len(new)
    old, new = [*old, _OLD_END], [*new, _NEW_END]  # different ends: no common run crosses them
    start = common_run(old, new, 0, 0) - 1
    head: _Path = (start + 1, COMMON, None) if start >= 0 else None
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
                old_pos, last, kind = add_at, paths[at + 1], ADDED
            elif can_remove:
                old_pos, last, kind = remove_at + 1, paths[at - 1], REMOVED
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
                    common += common_run(old, new, old_pos + 1 + common, new_pos + 1 + common)
                old_pos += common
                new_pos += common
                path = (common, COMMON, path)
            if old_pos + 1 >= n_old:
                if new_pos + 1 >= n_new:
                    return _components(path)
                max_diag = min(max_diag, diag - 1)
                top = min(top, max_diag)
            if new_pos + 1 >= n_new:
                min_diag = max(min_diag, diag + 1)
            reach[at], paths[at] = old_pos, path
            diag += 2
    return None


def common_run(old: list[Token], new: list[Token], i: int, j: int) -> int:
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
    """:func:`common_run` for long runs: ``limit`` is how far both lists go."""
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
