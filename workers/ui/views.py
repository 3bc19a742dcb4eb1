"""What the lane, diff and thread pages read, over the library's paged readers.

A lane page is the stored document, one page of signals (:func:`~signals.streams.history.signal_page`),
where the retained history starts, and the latest signal checked against the document
(:func:`~signals.streams.verify.check_document`). A thread page is one page of model calls
(:func:`~signals.streams.timeline.timeline_page`), each with a verify badge: whether the
text the delivery log rebuilds for the call equals the lane's own history at that version
(:func:`~signals.streams.history.version_texts`), and the log's integrity verdict, the one
``replay --deliveries`` reports (:func:`~workers.ui.logcheck.read_verdict`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from signals.core.diff import unified_patch
from signals.core.retention import Retention
from signals.core.signing import Signer
from signals.core.wire import lane_owner_id, lane_scope
from signals.errors import InvalidInputError, VerifyError
from signals.streams.client import Client
from signals.streams.history import PageEntry, SignalPage, first_signal, signal_page, version_texts
from signals.streams.keys import Keys, validate_id
from signals.streams.redis_errors import ReplyTooLargeError
from signals.streams.replay import raw_command, trimmed_before
from signals.streams.timeline import Call, TimelinePage, timeline_page
from signals.streams.verify import DocumentState, check_document, read_document_state
from workers.ui.logcheck import Verdict, VerdictCache, read_verdict

__all__ = ("Badge", "LaneView", "ThreadView", "call_key", "check_lane", "diff_text", "document_meta", "read_diff",
           "read_lane", "read_thread")

#: Edits a diff shown on a page may take before it is given up (both texts are shown instead).
DIFF_EDITS = 20_000
#: The widest version range a thread page reads from one lane's history in one go.
_VERIFY_SPAN = 2_000


def check_lane(lane: str) -> str:
    """``lane`` if it names a lane (``r:<id>`` or ``t:<id>``), else :class:`InvalidInputError`."""
    if lane_scope(lane) is None:
        raise InvalidInputError(f"a lane is r:<resource id> or t:<thread id>, not {lane[:40]!r}")
    validate_id(lane_owner_id(lane), "lane id")
    return lane


def diff_text(old: str, new: str) -> str | None:
    """The hunks-only unified diff from ``old`` to ``new`` ('' when equal), ``None`` past the budget."""
    if old == new:
        return ""
    return unified_patch(old, new, max_edits=DIFF_EDITS)


@dataclass(frozen=True, slots=True)
class LaneView:
    """The lane page's figures."""

    lane: str
    partition: int
    document: DocumentState
    format: str | None
    updated_at: str | None
    page: SignalPage
    first: PageEntry | None
    trimmed_before: int | None
    retention: Retention | None
    latest_note: str
    latest_ok: bool | None
    latest_version: int | None = None


async def document_meta(redis: Client, keys: Keys, lane: str) -> tuple[str | None, str | None]:
    """The document's ``format`` and ``updatedAt`` (``None``: not there, or not UTF-8 text)."""
    reply = await raw_command(redis, keys.doc(lane), ["HMGET", keys.doc(lane), "format", "updatedAt"], kind="a hash")
    return tuple(v.decode("utf-8", "replace")[:40] if isinstance(v, bytes) else None for v in reply)  # type: ignore[return-value]


async def read_lane(redis: Client, keys: Keys, lane: str, *, before: str | None, count: int,
                    retention: Retention | None, signer: Signer | None = None) -> LaneView:
    """The lane page: the signals are read before the document, as :func:`check_document` needs."""
    check_lane(lane)
    page = await signal_page(redis, keys, lane, before=before, count=count, signer=signer)
    first = await first_signal(redis, keys, lane, signer=signer)
    state = await read_document_state(redis, keys, lane)
    fmt, updated = await document_meta(redis, keys, lane)
    newest = await signal_page(redis, keys, lane, count=1, signer=signer) if before is not None else page
    note, ok = "no signal retained", None
    top = newest.entries[0] if newest.entries else None
    if top is not None and top.signal is not None:
        try:
            version = top.signal.version
            latest = (await version_texts(redis, keys, lane, version, version, signer=signer))[version]
            note, ok = check_document(latest, state), True
        except (VerifyError, KeyError) as e:
            note, ok = f"does not check: {e}", False
    elif top is not None:
        note, ok = f"the newest entry is not a signal: {top.problem}", False
    start = trimmed_before([(first.entry_id, first.signal)]) if first is not None and first.signal else None
    newest_version = top.signal.version if top is not None and top.signal is not None else None
    return LaneView(lane, keys.partition(lane), state, fmt, updated, page, first, start, retention, note, ok,
                    newest_version)


@dataclass(frozen=True, slots=True)
class DiffView:
    """Two retained versions of a lane and the diff between them."""

    lane: str
    low: int
    high: int
    old: str | None
    new: str | None
    diff: str | None
    problem: str | None


async def read_diff(redis: Client, keys: Keys, lane: str, a: int, b: int, *,
                    signer: Signer | None = None) -> DiffView:
    """The texts of versions ``a`` and ``b`` (either order) and the diff from the older one."""
    check_lane(lane)
    low, high = min(a, b), max(a, b)
    if low < 1:
        raise InvalidInputError(f"versions start at 1, not {low}")
    try:
        texts = await version_texts(redis, keys, lane, low, high, signer=signer)
    except VerifyError as e:
        return DiffView(lane, low, high, None, None, None, f"the lane's history does not check: {e}")
    old, new = texts.get(low), texts.get(high)
    missing = [v for v, t in ((low, old), (high, new)) if t is None]
    if missing:
        return DiffView(lane, low, high, None, None, None,
                        f"version {missing[0]} is not retained (see where the lane's retained history starts)")
    assert old is not None and new is not None
    return DiffView(lane, low, high, old.value, new.value, diff_text(old.value, new.value), None)


@dataclass(frozen=True, slots=True)
class Badge:
    """A call's verify badge: ``state`` is ``ok``, ``bad``, ``unknown`` or ``untrusted`` (a record
    of the call is flagged by the log's check: a text that matches proves nothing then), ``note`` says why."""

    state: str
    note: str


@dataclass(frozen=True, slots=True)
class ThreadView:
    """A page of a thread's timeline, each call with its diff and badge, and the log's verdict;
    ``problem``: why the page's calls could not be read (none shown), else ``None``."""

    page: TimelinePage
    diffs: dict[tuple[str | None, int, str], str | None]
    badges: dict[tuple[str | None, int, str], Badge]
    verdict: Verdict
    problem: str | None = None


def call_key(call: Call) -> tuple[str | None, int, str]:
    """How a page names a call: its window, step and lane."""
    return (call.window, call.step, call.lane)


async def _lane_texts(redis: Client, keys: Keys, lane: str, versions: set[int],
                      signer: Signer | None) -> dict[int, str] | str:
    """The lane history's text of each version (absent: not retained), or what is wrong with the history."""
    out: dict[int, str] = {}
    try:
        ordered = sorted(versions)
        while ordered:
            low = ordered[0]
            span = [v for v in ordered if v - low <= _VERIFY_SPAN]
            texts = await version_texts(redis, keys, lane, low, span[-1], signer=signer)
            out.update({v: texts[v].value for v in span if v in texts})
            ordered = ordered[len(span):]
    except VerifyError as e:
        return str(e)
    return out


def _badge(call: Call, history: dict[int, str] | str) -> Badge:
    if call.text is None or call.version is None:
        return Badge("unknown", "the records read do not rebuild this call (its chain began before the retained log)")
    if isinstance(history, str):
        return Badge("bad", f"the lane's history does not check: {history}")
    if call.version not in history:
        return Badge("unknown", f"the lane does not retain version {call.version}")
    if history[call.version] != call.text:
        return Badge("bad", f"differs from the lane's version {call.version}")
    return Badge("ok", f"matches the lane's version {call.version}")


async def read_thread(redis: Client, keys: Keys, thread_id: str, *, before: str | None, count: int,
                      signer: Signer | None = None, verdicts: VerdictCache | None = None) -> ThreadView:
    """A page of the thread's timeline with each call's diff from the call before and its badge,
    and the whole log's verdict (read after the page: it covers every record the page shows).
    An entry that is not a record, or a record that does not rebuild, is left out of the calls
    (the verdict names it: the page is not refused); a reply over the client's bound leaves
    the page without calls, saying so."""
    problem = None
    try:
        page = await timeline_page(redis, keys, thread_id, before=before, count=count, lenient=True)
    except ReplyTooLargeError as e:
        page, problem = TimelinePage(thread_id, (), None, 0), f"the calls cannot be shown: {e}"
    verdict = await read_verdict(redis, keys, thread_id, signer, cache=verdicts)
    wanted: dict[str, set[int]] = defaultdict(set)
    for call in page.calls:
        if call.version is not None:
            wanted[call.lane].add(call.version)
    histories = {lane: await _lane_texts(redis, keys, lane, versions, signer) for lane, versions in wanted.items()}
    diffs: dict[tuple[str | None, int, str], str | None] = {}
    badges: dict[tuple[str | None, int, str], Badge] = {}
    for call in page.calls:
        key = call_key(call)
        if call.text is not None and call.previous_text is not None:
            diffs[key] = diff_text(call.previous_text, call.text)
        badges[key] = _badge(call, histories.get(call.lane, {}))
        if any(entry_id in verdict.marks for entry_id, _ in call.records):
            badges[key] = Badge("untrusted", "a record of this call is marked by the log's check: nothing proves "
                                             "the model saw it")
    return ThreadView(page, diffs, badges, verdict, problem)
