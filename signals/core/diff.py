"""Line diff that reproduces jsdiff 8.0.4 ``structuredPatch(..., {context: 0})``, rendered as Mastra does.

What it does: turns the edit script of :mod:`signals.core.myers` (jsdiff's search,
statement for statement) into context-0 hunks (:func:`diff_hunks`) and renders them in
the hunks-only format of :mod:`signals.core.patch` (:func:`unified_patch`); for the
``compact`` policy, :func:`compact_patch` computes a patch in the same format for speed
rather than jsdiff parity. The format's names (:class:`Hunk`, :func:`render_hunks`,
:func:`parse_patch`, :func:`apply_patch`) are importable from here too: this module is
the diff's one entry point.

Cost: the Myers search costs about E^2 / 2 steps for E line insertions plus deletions, so
a long document rewritten wholesale (its lines shuffled) would take minutes. Given a
limit (``max_edits``; ``search_edits`` for :func:`compact_patch`) the search gives up
past it, after at most (E + 1)(E + 2) / 2 steps, and the result is ``None``; the
processor's budget turns that into a snapshot. Within the budget the result
is exactly the unbounded one (jsdiff's). Mastra calls jsdiff with no limit: this budget
is the one place where the ``mastra`` policy deviates from it.

What it does not do: no I/O, no context lines (context is always 0).
"""

from __future__ import annotations

from itertools import compress
from operator import ne

from signals.core.myers import ADDED, COMMON, Token, common_run, edit_script, token_text, tokenize
from signals.core.patch import Hunk, apply_patch, parse_patch, render_hunks

__all__ = (
    "Hunk",
    "apply_patch",
    "compact_patch",
    "diff_hunks",
    "parse_patch",
    "render_hunks",
    "unified_patch",
)

_FEW_LINES = 4  # in-place edits up to this many lines skip the Myers search


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
    script = edit_script(old_tokens, new_tokens, max_edits)
    return None if script is None else _hunks(script, old_tokens, new_tokens, 0)


def _hunks(script: list[tuple[int, int]], old: list[Token], new: list[Token], offset: int) -> list[Hunk]:
    """Context-0 hunks from an edit script; ``offset`` lines precede both token lists."""
    hunks: list[Hunk] = []
    old_line = new_line = 1
    pending: list[str] = []
    old_start = new_start = 0
    for kind, count in [*script, (COMMON, 0)]:
        if kind == COMMON:
            if pending:
                hunks.append(Hunk(old_start + offset, old_line - old_start, new_start + offset,
                                  new_line - new_start, tuple(pending)))
                pending = []
            old_line += count
            new_line += count
            continue
        if not pending:
            old_start, new_start = old_line, new_line
        if kind == ADDED:
            pending.extend("+" + token_text(t) for t in new[new_line - 1 : new_line - 1 + count])
            new_line += count
        else:
            pending.extend("-" + token_text(t) for t in old[old_line - 1 : old_line - 1 + count])
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
    old: list[Token] = prior.split("\n")  # type: ignore[assignment]  # str tokens: token_text is the identity
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
    head = common_run(old, new, 0, 0)
    stop = head - 1 if head else None
    tail = common_run(old[:stop:-1], new[:stop:-1], 0, 0)
    mid_old, mid_new = old[head : len(old) - tail], new[head : len(new) - tail]
    script = edit_script(mid_old, mid_new, min(limits, default=None))
    if script is not None:
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
        if token_text(t) in nxt:  # a candidate: now the exact test, once
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
        lines = tuple(["-" + token_text(t) for t in old[first:stop]] + ["+" + token_text(t) for t in new[first:stop]])
        hunks.append(Hunk(offset + first + 1, stop - first, offset + first + 1, stop - first, lines))
    return hunks


def unified_patch(prior: str, nxt: str, *, max_edits: int | None = None) -> str | None:
    """Hunks-only unified diff from ``prior`` to ``nxt`` (``None`` past ``max_edits``)."""
    hunks = diff_hunks(prior, nxt, max_edits=max_edits)
    return None if hunks is None else render_hunks(hunks)
