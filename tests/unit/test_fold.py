"""Snapshot + deltas -> text (signals.core.fold): one fold, strict or lenient by the caller's choice."""

from __future__ import annotations

import pytest

from signals.core.cachekey import cache_key
from signals.core.diff import unified_patch
from signals.core.fold import NO_SNAPSHOT, Refused, fold, key_problem, next_text
from signals.core.models import Attributes, Delivery
from signals.core.processor import UNIFIED_DIFF
from signals.errors import CorruptDataError

_V1, _V2, _V3 = "# Profile\n- tea", "# Profile\n- coffee", "# Profile\n- coffee\n- cake"


def _snapshot(text: str, *, key_of: str | None = None) -> Delivery:
    return Delivery(thread_id="t", step=1, lane="r:u", version=1, mode="snapshot", reason="bootstrap",
                    cache_key=cache_key("markdown", text if key_of is None else key_of), contents=text,
                    attributes=Attributes(format="markdown", scope="resource"))


def _delta(prior: str, text: str, *, patch: str | None = None) -> Delivery:
    contents = unified_patch(prior, text) if patch is None else patch
    assert contents is not None
    return Delivery(thread_id="t", step=2, lane="r:u", version=2, mode="delta", reason="new",
                    cache_key=cache_key("markdown", text), contents=contents,
                    attributes=Attributes(format="markdown", scope="resource", patch=UNIFIED_DIFF))


def test_a_chain_folds_to_its_last_text() -> None:
    """The snapshot's contents, then each delta applied to the text before it."""
    chain = [_snapshot(_V1), _delta(_V1, _V2), _delta(_V2, _V3)]
    assert fold(chain, strict=True) == _V3
    assert fold(chain, strict=False) == _V3
    assert fold([], strict=True) is None


@pytest.mark.parametrize(("prior", "link", "reason"), [
    (None, _delta(_V1, _V2), NO_SNAPSHOT),
    (_V1, _delta(_V1, _V2, patch="@@ -9,1 +9,1 @@\n-x\n+y"), "delta does not apply"),
    (None, _snapshot(_V1, key_of=_V2), "cacheKey does not match the rebuilt text"),
    (_V1, _delta(_V2, _V3), "delta does not apply"),  # the patch of another base
])
def test_strict_raises_and_lenient_refuses_with_the_same_reason(prior: str | None, link: Delivery,
                                                                 reason: str) -> None:
    with pytest.raises(CorruptDataError, match=reason):
        next_text(prior, link, strict=True)
    refused = next_text(prior, link, strict=False)
    assert isinstance(refused, Refused)
    assert refused.reason.startswith(reason)


def test_lenient_fold_skips_a_link_that_does_not_rebuild() -> None:
    """The text stays what the links before the refused one rebuilt; strict stops there."""
    chain = [_snapshot(_V1), _delta(_V2, _V3), _delta(_V1, _V2)]
    assert fold(chain, strict=False) == _V2
    with pytest.raises(CorruptDataError, match="delta does not apply"):
        fold(chain, strict=True)


def test_the_cache_key_check_can_be_left_out() -> None:
    """A reader that does not verify (``replay`` without ``--verify``) still rebuilds."""
    link = _snapshot(_V1, key_of=_V2)
    assert next_text(None, link, strict=True, check_key=False) == _V1
    assert key_problem(link, _V1) == "cacheKey does not match the rebuilt text"
    assert key_problem(link, _V2) is None
