"""The decision: nothing, a snapshot or a delta, for one lane at one moment. Pure: no I/O.

Mirrors Mastra's ``WorkingMemoryStateProcessor.computeStateSignal`` in the ``mastra``
policy, byte for byte:

* no template configured, no data, or whitespace-only data: nothing;
* the cacheKey equals the lane's current one while the snapshot is in the window: nothing;
* Markdown, snapshot in the window and a prior text: a unified-diff delta against the
  prior (the last delta's value since the snapshot, else the snapshot's);
* otherwise (JSON, window dropped the snapshot, no prior): a snapshot.

One deviation from Mastra, in both policies: the line diff runs under a budget
(``max_diff_edits``, :data:`DEFAULT_MAX_DIFF_EDITS` line insertions plus deletions).
Myers' cost grows with the square of the edit count, so a 64 KiB document rewritten with
its lines shuffled would cost minutes of CPU and hold up every other lane of the worker.
Past the budget the diff gives up and the lane gets a snapshot, which every subscriber
applies; Mastra would emit the (huge) delta. Below the budget the ``mastra`` output is
jsdiff's, byte for byte.

The ``compact`` policy (ours, the worker default) changes only the last two rules: a
delta is sent only when it is smaller, in tokens, than the snapshot, and JSON documents
get RFC 7396 merge-patch deltas (``patch="json-merge-patch"``) when applying the patch
to the prior text reproduces the new text exactly.

:func:`apply_delta` is the inverse used by every subscriber and by replay.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

import msgspec

from signals.core.cachekey import cache_key, js_trim
from signals.core.codec import decode_json, encode_json
from signals.core.diff import compact_patch, unified_patch
from signals.core.merge import deep_merge, merge_patch
from signals.core.models import Attributes, Format, Mode, Scope
from signals.core.patch import apply_patch
from signals.core.tokens import TokenCounter, approx_tokens
from signals.errors import InvalidInputError, PatchError

__all__ = (
    "DEFAULT_MAX_DIFF_EDITS",
    "POLICIES",
    "Policy",
    "Proposal",
    "apply_delta",
    "decide",
    "mastra_version",
)

Policy = Literal["mastra", "compact"]
POLICIES: tuple[Policy, ...] = ("mastra", "compact")
UNIFIED_DIFF: Final = "unified-diff"
JSON_MERGE_PATCH: Final = "json-merge-patch"
DEFAULT_MAX_DIFF_EDITS: Final = 300
"""The diff budget, in line insertions plus deletions. The Myers search visits at most
E + 1 diagonals at edit length E, so giving up past 300 bounds it to about 45,000 steps:
under 50 ms of CPU for the worst 64 KiB write found (``make bench``: worst-case write),
with room for a busy host under the 100 ms target. Within it: any edit of up to 150 lines
in place, or 300 lines inserted or removed, is a delta in both policies (the ``compact``
policy's linear in-place patch is not limited by it)."""


@dataclass(frozen=True, slots=True)
class Proposal:
    """A signal the lane should accept, before it is numbered and stamped."""

    mode: Mode
    cache_key: str
    contents: str
    value: str
    attributes: Attributes

    @property
    def delta(self) -> str | None:
        """The patch text on a delta, ``None`` on a snapshot (Mastra's ``delta`` field)."""
        return self.contents if self.mode == "delta" else None


def decide(
    *,
    data: str | None,
    fmt: Format,
    scope: Scope,
    has_snapshot: bool,
    current_cache_key: str | None,
    prior: str | None,
    policy: Policy = "mastra",
    configured: bool = True,
    force_snapshot: bool = False,
    max_diff_edits: int | None = DEFAULT_MAX_DIFF_EDITS,
    count_tokens: TokenCounter = approx_tokens,
) -> Proposal | None:
    """Decide what the lane emits for the stored ``data``; ``None`` means nothing new.

    Args:
        data: the stored working memory, untrimmed (``None`` when there is none).
        fmt: ``markdown`` or ``json``.
        scope: ``resource`` or ``thread`` (reported in the attributes).
        has_snapshot: whether the consumer's window still holds the lane's snapshot.
        current_cache_key: the cacheKey of the lane's current signal, if any.
        prior: the text the consumer can rebuild now (the delta base), if any.
        policy: ``mastra`` (byte-compatible) or ``compact``.
        configured: ``False`` when no template is configured (never a signal).
        force_snapshot: emit a snapshot even where a delta would do (the worker's
            every-K-th-signal rule); dedup still applies.
        max_diff_edits: the diff budget, in line insertions plus deletions (the cost of
            the diff grows with its square): past it the diff gives up and the lane gets
            a snapshot instead of a delta, in both policies. ``None``: no limit, Mastra's
            behaviour even on pathological rewrites (minutes of CPU for a shuffled 64 KiB
            document).
        count_tokens: the ``compact`` policy's size test counts with it (UTF-8 bytes / 4
            by default; see :mod:`signals.core.tokens`). Unused by the ``mastra`` policy.
    """
    if not configured or data is None:
        return None
    contents = js_trim(data)
    if not contents:
        return None
    key = cache_key(fmt, contents)
    if has_snapshot and current_cache_key == key:
        return None
    if has_snapshot and prior and not force_snapshot:
        delta = _delta(prior, contents, fmt=fmt, scope=scope, key=key, policy=policy, budget=max_diff_edits,
                       count=count_tokens)
        if delta is not None:
            return delta
    return Proposal("snapshot", key, contents, contents, Attributes(format=fmt, scope=scope))


def _delta(
    prior: str, contents: str, *, fmt: Format, scope: Scope, key: str, policy: Policy, budget: int | None,
    count: TokenCounter,
) -> Proposal | None:
    if fmt == "markdown":
        if policy == "mastra":
            patch = unified_patch(prior, contents, max_edits=budget)
            if patch is None:
                return None  # over the diff budget: a snapshot (Mastra would send the delta)
        else:
            # Past this many edited lines the patch outweighs the snapshot: stop early.
            size = 2 * contents.count("\n") + 16
            patch = compact_patch(prior, contents, max_edits=size, search_edits=budget)
            if patch is None or count(patch) >= count(contents):
                return None
        attrs = Attributes(format=fmt, scope=scope, patch=UNIFIED_DIFF)
        return Proposal("delta", key, patch, contents, attrs)
    if policy == "compact":
        patch_text = _json_merge_delta(prior, contents)
        if patch_text is not None and count(patch_text) < count(contents):
            attrs = Attributes(format=fmt, scope=scope, patch=JSON_MERGE_PATCH)
            return Proposal("delta", key, patch_text, contents, attrs)
    return None


def _json_merge_delta(prior: str, contents: str) -> str | None:
    try:
        old, new = decode_json(prior), decode_json(contents)
    except msgspec.DecodeError:
        return None
    if not isinstance(old, dict) or not isinstance(new, dict):
        return None
    patch = merge_patch(old, new)
    if encode_json(deep_merge(old, patch)) != contents:
        return None  # key order, spacing or null members the patch cannot carry
    return encode_json(patch)


def apply_delta(prior: str, contents: str, patch_kind: str | None) -> str:
    """Rebuild the new text from ``prior`` and a delta's ``contents``.

    Raises:
        PatchError: the patch does not apply to ``prior``.
        InvalidInputError: unknown patch kind.
    """
    if patch_kind == UNIFIED_DIFF:
        return apply_patch(prior, contents)
    if patch_kind == JSON_MERGE_PATCH:
        try:
            old, patch = decode_json(prior), decode_json(contents)
        except msgspec.DecodeError as e:
            raise PatchError(f"json-merge-patch delta is not JSON: {e}") from e
        if not isinstance(old, dict) or not isinstance(patch, dict):
            raise PatchError("json-merge-patch needs a JSON object on both sides")
        return encode_json(deep_merge(old, patch))
    raise InvalidInputError(f"unknown patch kind {patch_kind!r}")


def mastra_version(
    previous: int, current_key: str | None, current_mode: str | None, key: str, mode: str
) -> int:
    """Mastra's runtime version rule: +1 per accepted signal, kept when cacheKey and mode repeat."""
    if current_key == key and current_mode == mode:
        return previous or 1
    return previous + 1
