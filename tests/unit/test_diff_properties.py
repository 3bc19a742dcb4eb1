"""Property tests: applying the produced patch to the prior gives the next text exactly."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from signals.core.cachekey import js_trim
from signals.core.diff import _in_place, _within, apply_patch, compact_patch, diff_hunks, unified_patch
from signals.errors import PatchError

LINE = st.one_of(
    st.sampled_from(["", "a", "b", "a\r", "- item", "é", "😀", "  x", "\u2028", "\ufeff"]),
    st.text(alphabet=st.characters(blacklist_characters="\n"), max_size=6),
)
DOC = st.lists(LINE, max_size=25)
SEP = st.sampled_from(["\n", "\r\n"])


@given(DOC, DOC, SEP)
@settings(max_examples=400, deadline=None)
def test_apply_inverts_diff(old: list[str], new: list[str], sep: str) -> None:
    """For any trimmed prior and next text, apply(prior, patch) == next."""
    prior, nxt = js_trim(sep.join(old)), js_trim(sep.join(new))
    if not prior or not nxt:
        return
    assert apply_patch(prior, unified_patch(prior, nxt) or "") == nxt


@given(DOC, DOC, SEP)
@settings(max_examples=400, deadline=None)
def test_compact_patch_applies(old: list[str], new: list[str], sep: str) -> None:
    """The compact policy's fast patch also rebuilds the next text exactly."""
    prior, nxt = js_trim(sep.join(old)), js_trim(sep.join(new))
    if not prior or not nxt:
        return
    assert apply_patch(prior, compact_patch(prior, nxt) or "") == nxt


@given(st.lists(st.text(alphabet="ab\r ", max_size=4), min_size=1, max_size=12), st.data(),
       st.one_of(st.none(), st.integers(0, 4)))
@settings(max_examples=400, deadline=None)
def test_one_line_rewritten_is_its_in_place_hunk(lines: list[str], data: st.DataObject, max_edits: int | None) -> None:
    """One line rewritten (the usual update) is rendered at once: the same text as the
    in-place hunk rendered, ``None`` past ``max_edits`` alike, and it applies."""
    at = data.draw(st.integers(0, len(lines) - 1))
    replacement = data.draw(st.text(alphabet="abc\r ", max_size=4).filter(lambda t: t != lines[at]))
    changed = [*lines[:at], replacement, *lines[at + 1:]]
    prior, nxt = "\n".join(lines), "\n".join(changed)
    expected = _within(_in_place(prior.split("\n"), nxt.split("\n"), 0), max_edits)  # type: ignore[arg-type]
    assert compact_patch(prior, nxt, max_edits=max_edits) == expected
    if expected is not None and prior and nxt:  # an empty text has no lines to patch (never a document)
        assert apply_patch(prior, expected) == nxt


def test_compact_patch_edits_in_place() -> None:
    """Lines edited in place give one small hunk per run (Myers, bounded by its edit count, cannot beat it)."""
    prior = "\n".join(f"l{i}" for i in range(10))
    nxt = prior.replace("l2", "X").replace("l7", "Y")
    assert compact_patch(prior, nxt) == "@@ -3,1 +3,1 @@\n-l2\n+X\n@@ -8,1 +8,1 @@\n-l7\n+Y"


def test_compact_patch_sees_a_shift_through_a_few_changed_lines() -> None:
    """One line removed and one appended (the lines between shift up, as many lines as
    before): two edits, not every shifted line removed and re-added."""
    old = "\n".join(["# Facts", "- a", "- b", "- c", "- d"])
    new = "\n".join(["# Facts", "- b", "- c", "- d", "- e"])
    patch = compact_patch(old, new)
    assert patch is not None and patch.count("\n") == 3, patch  # two hunks of one line each
    assert apply_patch(old, patch) == new


def _edits(patch: str | None) -> int:
    return sum(1 for line in (patch or "").split("\n") if line[:1] in {"-", "+"})


@given(st.lists(st.sampled_from(["a", "b", "c", "- x"]), min_size=1, max_size=12), st.data())
@settings(max_examples=500, deadline=None)
def test_no_alignment_beats_in_place_when_no_removed_line_recurs(old: list[str], data: st.DataObject) -> None:
    """Lines rewritten in place (as many lines before and after, some repeated): where no
    line the in-place patch removes occurs in the new text, the minimal (Myers) patch has
    as many edits as the in-place one, so compact_patch skips the search there."""
    new = list(old)
    for _ in range(data.draw(st.integers(1, 5))):
        new[data.draw(st.integers(0, len(new) - 1))] = data.draw(st.sampled_from(["a", "b", "new", "- y"]))
    removed = [o for o, n in zip(old, new, strict=True) if o != n]
    prior, nxt = "\n".join(old), "\n".join(new)
    in_place = 2 * len(removed)
    minimal = _edits(unified_patch(prior, nxt))
    assert minimal <= in_place
    if not set(removed) & set(new):
        assert minimal == in_place
        assert _edits(compact_patch(prior, nxt)) == in_place


@given(DOC)
def test_identical_texts_have_no_hunks(doc: list[str]) -> None:
    """Equal texts diff to nothing."""
    text = "\n".join(doc)
    assert diff_hunks(text, text) == []


@given(DOC, DOC)
def test_hunk_counts_match_lines(old: list[str], new: list[str]) -> None:
    """Every hunk header's counts equal its ``-`` and ``+`` lines."""
    for hunk in diff_hunks("\n".join(old), "\n".join(new)) or []:
        assert hunk.old_lines == sum(1 for line in hunk.lines if line[0] == "-")
        assert hunk.new_lines == sum(1 for line in hunk.lines if line[0] == "+")


def test_repeated_lines_pick_jsdiffs_copy() -> None:
    """With repeated lines the reported copy is jsdiff's (difflib reports ``-4,2``)."""
    assert unified_patch("x\na\nx\na\nx", "x\na\nx") == "@@ -3,2 +3,0 @@\n-x\n-a"
    assert unified_patch("a\nb\na\nb", "a\nb") == "@@ -2,2 +2,0 @@\n-b\n-a"


def test_max_edits_gives_up() -> None:
    """A budget smaller than the edit script returns None instead of a patch."""
    assert unified_patch("a\nb\nc", "x\ny\nz", max_edits=2) is None


@pytest.mark.parametrize(
    ("prior", "patch", "message"),
    [
        ("a\nb", "@@ -1,1 +1,1 @@\n-x\n+y", "does not match"),
        ("a\nb", "@@ -5,1 +5,1 @@\n-a\n+y", "does not fit"),
        ("a\nb", "@@ -1,1 +1,1 @@\n-a", "promises more lines"),
        ("a\nb", "garbage", "header"),
        ("a\nb", "@@ -1,1 +1,1 @@\n+a\n+b", "body has"),
        ("a\nb", "@@ -1,1 +2,1 @@\n-a\n+y", "inconsistent"),
    ],
)
def test_bad_patches_are_refused(prior: str, patch: str, message: str) -> None:
    """A patch that does not fit is refused with an error naming the hunk."""
    with pytest.raises(PatchError, match=message):
        apply_patch(prior, patch)
