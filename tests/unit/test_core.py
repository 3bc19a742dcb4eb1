"""The decision, policies, trimming, merge patches, rendering and write semantics."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import BaseModel

from signals.core.cachekey import cache_key, js_trim
from signals.core.lane import LaneOptions, LaneTracking, advance
from signals.core.memory import DEFAULT_TEMPLATE, WorkingMemoryConfig, apply_merge, apply_replace
from signals.core.merge import deep_merge, merge_patch
from signals.core.models import WriteEvent
from signals.core.processor import Proposal, apply_delta, decide
from signals.core.simulate import run_scenario
from signals.errors import (
    DocumentTooLargeError,
    EmptyTemplateOverwriteError,
    InvalidInputError,
    ScenarioError,
    SchemaValidationError,
)

DOC = "# Profile\n- name: Ada\n- city: London\n- likes: math\n- pets: none\n- goal: notes"


def make_args(**overrides: Any) -> dict[str, Any]:
    """Builder for ``decide`` arguments: a Markdown lane whose snapshot is in the window."""
    args: dict[str, Any] = {
        "data": DOC.replace("London", "Paris"),
        "fmt": "markdown",
        "scope": "resource",
        "has_snapshot": True,
        "current_cache_key": cache_key("markdown", DOC),
        "prior": DOC,
        "policy": "mastra",
    }
    args.update(overrides)
    return args


def _decide(**overrides: Any) -> Proposal | None:
    return decide(**make_args(**overrides))


def test_js_trim_differs_from_str_strip() -> None:
    """JS trim keeps U+001C..U+001F and U+0085, and strips U+FEFF."""
    assert js_trim("\u001cx\u0085") == "\u001cx\u0085"
    assert js_trim("\ufeffx\u3000") == "x"
    assert "\u001cx".strip() == "x"


def test_change_in_window_is_a_delta() -> None:
    """A changed Markdown document with the snapshot in the window gives a delta."""
    p = _decide()
    assert p is not None and p.mode == "delta"
    assert p.contents == "@@ -3,1 +3,1 @@\n-- city: London\n+- city: Paris"
    assert p.attributes.patch == "unified-diff"


def test_unchanged_in_window_is_nothing() -> None:
    """Same cacheKey while the snapshot is in the window: no signal."""
    assert _decide(data="  " + DOC + "\n") is None


def test_window_drop_reemits_snapshot() -> None:
    """Snapshot out of the window: a snapshot even when unchanged."""
    p = _decide(data=DOC, has_snapshot=False)
    assert p is not None and p.mode == "snapshot" and p.contents == DOC


@pytest.mark.parametrize("data", [None, "", " \n\t", "\ufeff"])
def test_empty_data_is_nothing(data: str | None) -> None:
    """No data, or whitespace only: no signal."""
    assert _decide(data=data) is None


def test_unconfigured_is_nothing() -> None:
    """No template configured: no signal."""
    assert _decide(configured=False) is None


def test_mastra_json_is_always_snapshot() -> None:
    """In the mastra policy JSON changes are snapshots."""
    p = _decide(fmt="json", data='{"a":2}', prior='{"a":1}', current_cache_key=None)
    assert p is not None and p.mode == "snapshot"


def test_compact_json_is_a_merge_patch() -> None:
    """In the compact policy a small JSON change is an RFC 7396 merge patch."""
    prior = '{"name":"Ada","city":"London","tags":["a","b"],"bio":"' + "x" * 80 + '"}'
    new = '{"name":"Ada","city":"Paris","tags":["a","b"],"bio":"' + "x" * 80 + '"}'
    p = _decide(fmt="json", data=new, prior=prior, policy="compact", current_cache_key=None)
    assert p is not None and p.mode == "delta"
    assert p.attributes.patch == "json-merge-patch"
    assert p.contents == '{"city":"Paris"}'
    assert apply_delta(prior, p.contents, p.attributes.patch) == new


def test_compact_prefers_snapshot_when_delta_is_not_smaller() -> None:
    """A rewrite whose patch outweighs the document is sent as a snapshot."""
    p = _decide(data="completely\nnew", policy="compact")
    assert p is not None and p.mode == "snapshot"


def test_compact_json_with_reordered_keys_falls_back() -> None:
    """A merge patch that cannot reproduce the exact text gives a snapshot."""
    p = _decide(fmt="json", data='{"b":1,"a":1}', prior='{"a":1,"b":1}', policy="compact",
                current_cache_key=None)
    assert p is not None and p.mode == "snapshot"


def test_force_snapshot() -> None:
    """The worker's every-K-th rule forces a snapshot where a delta would do."""
    p = _decide(force_snapshot=True)
    assert p is not None and p.mode == "snapshot"


JSON_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner, max_size=3),
    max_leaves=10,
)
NO_NULL_OBJECT = st.dictionaries(
    st.text(max_size=3),
    st.recursive(
        st.booleans() | st.integers() | st.text(max_size=5),
        lambda inner: st.lists(inner, max_size=3)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3),
        max_leaves=8,
    ),
    max_size=4,
)


@given(NO_NULL_OBJECT, NO_NULL_OBJECT)
def test_merge_patch_round_trips(source: dict, target: dict) -> None:
    """deep_merge(source, merge_patch(source, target)) == target (no null members)."""
    assert deep_merge(source, merge_patch(source, target)) == target


OBJECT = st.dictionaries(st.text(max_size=3), JSON_VALUE, max_size=4)


@given(OBJECT, OBJECT)
def test_merge_never_keeps_null_members(existing: dict, update: dict) -> None:
    """After a merge no object member is null: null means delete."""
    def has_null_member(value: Any) -> bool:
        if isinstance(value, dict):
            return any(v is None or has_null_member(v) for v in value.values())
        return False

    clean = {k: v for k, v in existing.items() if v is not None and not has_null_member(v)}
    assert not has_null_member(deep_merge(clean, update))


def test_merge_is_idempotent() -> None:
    """Applying the same update twice gives the same document."""
    once = deep_merge({"a": {"b": 1}}, {"a": {"c": 2}, "d": None})
    assert deep_merge(once, {"a": {"c": 2}, "d": None}) == once


class Profile(BaseModel):
    """A schema-mode model for the tests."""

    name: str
    age: int | None = None
    tags: list[str] = []


def test_schema_merge_validates_and_names_fields() -> None:
    """A merge that breaks the schema names the failing fields and stores nothing."""
    cfg = WorkingMemoryConfig(schema=Profile)
    doc = apply_merge(None, {"name": "Ada"}, cfg)
    assert doc == '{"name":"Ada"}'
    with pytest.raises(SchemaValidationError) as err:
        apply_merge(doc, {"age": "old", "tags": "x"}, cfg)
    assert set(err.value.fields) == {"age", "tags"}


def test_json_schema_dict_validation() -> None:
    """A JSON Schema dict works as the schema too."""
    cfg = WorkingMemoryConfig(schema={"type": "object", "required": ["name"],
                                      "properties": {"name": {"type": "string"}}})
    with pytest.raises(SchemaValidationError, match="name"):
        apply_merge(None, {"age": 3}, cfg)


def test_merge_input_must_be_an_object() -> None:
    """Merge input that is not a JSON object is refused clearly."""
    cfg = WorkingMemoryConfig(schema={"type": "object"})
    with pytest.raises(InvalidInputError, match="JSON object"):
        apply_merge(None, "[1, 2]", cfg)
    with pytest.raises(InvalidInputError, match="not valid JSON"):
        apply_merge(None, "{nope", cfg)
    for empty in ("", " \n"):  # an empty file: msgspec's "Input data was truncated" named nothing
        with pytest.raises(InvalidInputError, match="merge input is empty"):
            apply_merge(None, empty, cfg)


def test_empty_template_overwrite_is_refused() -> None:
    """Writing the bare template over real data is refused: no data loss."""
    cfg = WorkingMemoryConfig()
    with pytest.raises(EmptyTemplateOverwriteError):
        apply_replace("# User Information\n- **First Name**: Ada", DEFAULT_TEMPLATE.strip(), cfg)
    assert apply_replace(None, DEFAULT_TEMPLATE, cfg) == DEFAULT_TEMPLATE


@pytest.mark.parametrize("blank", ["", " \n\t ", "\ufeff\u2028"])
def test_a_blank_write_over_real_data_is_refused(blank: str) -> None:
    """A blank write was stored (version 2) but emits no signal (Mastra's rule): the model kept
    the old text, and a new window was given the last snapshot of memory reported erased.
    It is refused as the empty template is. On a new (or blank) lane it is refused too: it
    stored a document no signal ever shows, which replay then took for writes no worker had
    processed."""
    cfg = WorkingMemoryConfig()
    with pytest.raises(EmptyTemplateOverwriteError, match="blank"):
        apply_replace("# U1\n- allergic to peanuts", blank, cfg)
    for existing in (None, " \n"):
        with pytest.raises(InvalidInputError, match="the write is blank"):
            apply_replace(existing, blank, cfg)


def test_oversized_document_is_refused() -> None:
    """Documents over the size limit are refused with their size."""
    with pytest.raises(DocumentTooLargeError, match="over the limit of 10 bytes"):
        apply_replace(None, "x" * 11, WorkingMemoryConfig(max_bytes=10))


def test_unknown_scope_is_refused() -> None:
    """An unknown scope is a clear error."""
    with pytest.raises(InvalidInputError, match="unknown scope"):
        WorkingMemoryConfig(scope="global")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("scenario", "message"),
    [
        ([], "must be a JSON object"),
        ({"format": "markdown"}, "'steps' must be a list"),
        ({"format": "markdown", "steps": [{"hasSnapshot": True}]}, "step 0: 'data' is missing"),
        ({"format": "markdown", "steps": [{"data": "x", "hasSnapshot": 1}]}, "step 0: 'hasSnapshot'"),
        ({"format": "markdown", "steps": [{"data": "x", "hasSnapshot": True, "scope": "x"}]}, "step 0: 'scope'"),
        ({"format": "markdown", "history": "all", "steps": []}, "'history'"),
    ],
)
def test_invalid_scenarios_name_step_and_field(scenario: Any, message: str) -> None:
    """Invalid scenarios are refused before any output, naming the step and field."""
    with pytest.raises(ScenarioError, match=message):
        list(run_scenario(scenario))


def test_compact_never_sends_more_than_mastra() -> None:
    """On a scenario of small edits, compact's contents are never larger than mastra's."""
    steps = [{"data": DOC, "hasSnapshot": False}]
    text = DOC
    for i in range(20):
        text = text + f"\n- fact {i}" if i % 3 else text.replace("Ada", f"Ada{i}")
        steps.append({"data": text, "hasSnapshot": i % 7 != 6})
    sc = {"format": "markdown", "steps": steps}
    mastra = sum(len(r["contents"] or "") for r in run_scenario(sc, policy="mastra"))
    compact = sum(len(r["contents"] or "") for r in run_scenario(sc, policy="compact"))
    assert compact <= mastra


def test_every_kth_signal_is_a_snapshot() -> None:
    """With snapshot_every=K a lane's signals come in chains of K: snapshot, then K-1 deltas."""
    tracking = LaneTracking()
    modes = []
    lines = [f"- fact {i}: long enough that a delta is always smaller than a snapshot" for i in range(10)]
    for version in range(1, 13):
        lines[version % 10] = f"- fact changed at {version}"
        event = WriteEvent(lane="r:u", scope="resource", format="markdown", version=version,
                           data="\n".join(lines), op="replace", resource_id="u")
        tracking, signal = advance(tracking, event, LaneOptions(policy="compact", snapshot_every=4))
        assert signal is not None
        modes.append(signal.mode)
    assert [i + 1 for i, m in enumerate(modes) if m == "snapshot"] == [1, 5, 9]
    assert tracking.version == 12
