"""The per-write diff budget: pathological rewrites cost bounded work and become snapshots.

Work is counted, never timed: ``_statements`` counts the Python statements a call runs
(``sys.settrace`` line events), a deterministic measure of the diff's work, and stops the
call once it passes a cap, so a regression fails at once instead of spinning for minutes.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any, TypeVar

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.bench_worst_write import SHAPES
from signals.core.cachekey import js_trim
from signals.core.diff import diff_hunks, render_hunks, unified_patch
from signals.core.memory import DEFAULT_MAX_BYTES
from signals.core.processor import DEFAULT_MAX_DIFF_EDITS, POLICIES, Policy, Proposal, decide

T = TypeVar("T")
LINES = 12_500


class _TooMuchWork(Exception):
    """The traced call ran more statements than its cap."""


def _statements(call: Callable[[], T], cap: int) -> tuple[T, int]:
    """Run ``call`` and count the Python statements it executes; raise past ``cap``."""
    count = 0

    def local(frame: FrameType, event: str, arg: Any) -> Any:
        nonlocal count
        if event == "line":
            count += 1
            if count > cap:
                raise _TooMuchWork(f"over {cap:,} statements")
        return local

    previous = sys.gettrace()
    sys.settrace(lambda frame, event, arg: local)
    try:
        result = call()
    finally:
        sys.settrace(previous)
    return result, count


def _cap(lines: int, budget: int = DEFAULT_MAX_DIFF_EDITS) -> int:
    """Generous statement cap for one ``decide`` on a document of ``lines`` lines.

    A search abandoned at ``budget`` edits visits at most (E + 1)(E + 2) / 2 diagonals,
    each a few dozen statements; the rest of ``decide`` is linear in the lines. Measured:
    15-22 statements per visit and under 10 per line.
    """
    return 40 * (budget + 1) * (budget + 2) // 2 + 20 * lines


_shuffled = SHAPES["12,500 distinct lines, shuffled"]  # issue 10, finding 7 (62,499 bytes)


def _args(prior: str, data: str, policy: Policy) -> dict[str, Any]:
    return {"data": data, "fmt": "markdown", "scope": "resource", "has_snapshot": True,
            "current_cache_key": None, "prior": prior, "policy": policy}


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("shape", list(SHAPES.values()), ids=list(SHAPES))
def test_pathological_rewrite_is_a_snapshot_after_bounded_work(
    shape: Callable[[], tuple[str, str]], policy: Policy
) -> None:
    """A document under the size limit rewritten so that the diff needs thousands of edits:
    ``decide`` gives up at the budget (work quadratic in the budget, linear in the lines,
    not in the edit count) and proposes a snapshot of the new text."""
    prior, data = shape()
    assert len(data.encode()) <= DEFAULT_MAX_BYTES
    proposal, _ = _statements(lambda: decide(**_args(prior, data, policy)), _cap(data.count("\n") + 1))
    assert proposal is not None
    assert (proposal.mode, proposal.value, proposal.delta) == ("snapshot", data, None)


def test_without_the_budget_the_shuffled_document_is_far_more_work() -> None:
    """The same call with no budget (Mastra's behaviour) runs past the cap: the document
    really is pathological, and the cap really measures the diff's work."""
    prior, data = _shuffled()
    with pytest.raises(_TooMuchWork):
        _statements(lambda: decide(**_args(prior, data, "mastra"), max_diff_edits=None), _cap(LINES))


@pytest.mark.parametrize("policy", POLICIES)
def test_ordinary_edits_of_a_large_document_stay_deltas(policy: Policy) -> None:
    """100 lines edited in place and 50 inserted in the 12,500-line document (250 line
    edits, under the default budget): the same delta as with no budget."""
    prior, _ = _shuffled()
    lines = prior.split("\n")
    rng = random.Random(3)
    for i in rng.sample(range(LINES), 100):
        lines[i] = f"- edited {i}"
    for k in range(50):
        lines.insert(rng.randrange(len(lines)), f"- new {k}")
    data = "\n".join(lines)
    proposal = decide(**_args(prior, data, policy))
    assert proposal is not None and proposal.mode == "delta"
    assert proposal == decide(**_args(prior, data, policy), max_diff_edits=None)


@pytest.mark.parametrize("policy", POLICIES)
def test_a_small_budget_turns_a_rewrite_into_a_snapshot(policy: Policy) -> None:
    """The budget is the caller's: 2 line edits are not enough to rewrite 3 lines."""
    proposal = decide(**_args("# A\nb\nc", "# A\nx\ny", policy), max_diff_edits=2)
    assert proposal is not None and proposal.mode == "snapshot"
    assert decide(**_args("# A\nb\nc", "# A\nx\ny", policy), max_diff_edits=4) == decide(
        **_args("# A\nb\nc", "# A\nx\ny", policy), max_diff_edits=None
    )


LINE = st.one_of(
    st.sampled_from(["", "a", "b", "a\r", "- item", "- item", "é", "\ufeff"]),
    st.text(alphabet=st.characters(blacklist_characters="\n"), max_size=4),
)
DOC = st.lists(LINE, max_size=40)


@given(DOC, DOC, st.sampled_from(["\n", "\r\n"]), st.integers(0, 3))
@settings(max_examples=300, deadline=None)
def test_a_budget_at_or_above_the_edit_count_changes_nothing(
    old: list[str], new: list[str], sep: str, extra: int
) -> None:
    """With a budget of at least the true edit count, the patch and the decision equal the
    unbounded ones (byte for byte, both policies); one edit less and the mastra policy
    gives up (jsdiff's Myers search finds a shortest edit script)."""
    prior, data = js_trim(sep.join(old)), js_trim(sep.join(new))
    hunks = diff_hunks(prior, data)
    assert hunks is not None
    edits = sum(h.old_lines + h.new_lines for h in hunks)
    assert unified_patch(prior, data, max_edits=edits + extra) == render_hunks(hunks)
    for policy in POLICIES:
        unbounded = decide(**_args(prior, data, policy), max_diff_edits=None)
        assert decide(**_args(prior, data, policy), max_diff_edits=edits + extra) == unbounded
    if edits:
        assert unified_patch(prior, data, max_edits=edits - 1) is None
        over: Proposal | None = decide(**_args(prior, data, "mastra"), max_diff_edits=edits - 1)
        assert over is None or over.mode == "snapshot"
