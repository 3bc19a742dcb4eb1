"""Live pages: server-sent events from the streams.

A lane page listens on ``/live/lane``: the server reads the lane's signal stream after the
newest entry the page showed (XREAD with BLOCK, one Redis connection per open page) and
sends each batch as one ``signals`` event: the new rows and the document, rendered by the
same escaped templates as the page, and the id to go on from (``id:``, so a browser that
reconnects resumes with ``Last-Event-ID``). A thread page listens on ``/live/thread`` for
its delivery log and gets the new calls' rows with the log's integrity verdict read again
(the check of ``replay --deliveries``: :mod:`workers.ui.logcheck`). A trim or a deletion adds
no entry to read, so between batches the thread stream compares the log's fingerprint
(XINFO STREAM's figures) with the one its last verdict was read at (the page's, at first)
and, when it changed, sends the verdict read again as an ``integrity`` event. Verdicts are
kept by that fingerprint (:class:`~workers.ui.logcheck.VerdictCache`): the live pages of
one thread read the whole log once per change of it, not once each. Otherwise a
comment line keeps the connection open; at most :data:`~workers.ui.options.MAX_LIVE` pages are live at once. A read
that fails (Redis away, a key of another type, a role without XREAD) ends the stream with a
``problem`` event the page shows; the browser reconnects after two seconds.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import structlog
from redis import exceptions as redis_exc
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse

from signals.core.lane import is_stream_id
from signals.errors import InvalidInputError, VerifyError, WmSignalsError
from signals.streams.history import PageEntry
from signals.streams.keys import validate_id
from signals.streams.replay import decode_entry, xread_entries
from signals.streams.verify import read_document_state
from workers.ui.logcheck import MAX_FINGERPRINT, Verdict, log_fingerprint, read_verdict
from workers.ui.options import MAX_LIVE
from workers.ui.render import render
from workers.ui.views import call_key, check_lane, document_meta, read_thread

__all__ = ("lane_events", "thread_events")

log = structlog.get_logger(__name__)


def _after(request: Request) -> str:
    after = request.headers.get("last-event-id") or request.query_params.get("after") or "0-0"
    if not is_stream_id(after):
        raise InvalidInputError(f"after is a stream entry id (<ms>-<seq>), not {after[:40]!r}")
    return after


def _event(name: str, last: str, payload: dict[str, Any]) -> str:
    return f"event: {name}\nid: {last}\ndata: {json.dumps(payload, ensure_ascii=True)}\n\n"


def _stream(request: Request, body: AsyncIterator[str]) -> Response:
    state = request.app.state
    if state.live >= MAX_LIVE:
        return PlainTextResponse(f"{MAX_LIVE} live pages are open: reload later\n", status_code=503)

    async def counted() -> AsyncIterator[str]:
        state.live += 1
        try:
            yield "retry: 2000\n\n"
            async for chunk in body:
                yield chunk
        except (WmSignalsError, redis_exc.RedisError) as e:  # said on the page; the browser retries
            log.warning("ui.live_failed", path=request.url.path, error=str(e)[:300])
            yield f"event: problem\ndata: {json.dumps({'message': str(e)[:500]})}\n\n"  # no id: resume as before
        finally:
            state.live -= 1

    return StreamingResponse(counted(), media_type="text/event-stream",
                             headers={"cache-control": "no-store", "x-accel-buffering": "no"})


async def lane_events(request: Request) -> Response:
    """The lane's new signals as they are committed."""
    state = request.app.state
    redis, keys, options = state.redis, state.keys, state.options
    lane = check_lane(request.query_params.get("id", ""))
    after = _after(request)

    async def events() -> AsyncIterator[str]:
        last = after
        while True:
            entries = await xread_entries(redis, keys.signals(lane), last, count=options.page,
                                          block=options.live_block_ms)
            if not entries:
                yield ": keep-alive\n\n"
                continue
            last = entries[-1][0]
            rows = []
            for entry in reversed(entries):  # newest first, as the page lists them
                try:
                    rows.append(PageEntry(entry[0], decode_entry(lane, entry, signer=state.signer)))
                except VerifyError as e:  # shown as a bad entry, as on the page
                    rows.append(PageEntry(entry[0], None, str(e)))
            document = await read_document_state(redis, keys, lane)
            fmt, _ = await document_meta(redis, keys, lane)
            length = await redis.xlen(keys.signals(lane))
            yield _event("signals", last, {
                "rows": render("_signal_rows.html", rows=rows, lane=lane),
                "document": render("_document.html", document=document, format=fmt),
                "version": document.version, "length": length,
            })

    return _stream(request, events())


#: The most marked records a live event names (a page shows far fewer).
_MAX_MARKS = 1_000


def _verdict(verdict: Verdict) -> dict[str, Any]:
    """The verdict's part of a live event: the banner (the page's escaped template) and the marks."""
    return {"integrity": render("_integrity.html", verdict=verdict), "state": verdict.state,
            "marks": dict(list(verdict.marks.items())[-_MAX_MARKS:])}


async def thread_events(request: Request) -> Response:
    """The thread's new model calls as the agent loop logs them."""
    state = request.app.state
    redis, keys, options = state.redis, state.keys, state.options
    thread_id = validate_id(request.query_params.get("id", ""), "thread id")
    after = _after(request)
    seen = request.query_params.get("seen", "")[:MAX_FINGERPRINT + 1]

    async def events() -> AsyncIterator[str]:
        last, fingerprint = after, seen
        while True:
            entries = await xread_entries(redis, keys.deliveries(thread_id), last, count=options.page,
                                          block=options.live_block_ms)
            if not entries:
                if await log_fingerprint(redis, keys, thread_id) == fingerprint:
                    yield ": keep-alive\n\n"
                    continue
                verdict = await read_verdict(redis, keys, thread_id, state.signer, cache=state.verdicts)
                fingerprint = verdict.fingerprint
                yield _event("integrity", last, _verdict(verdict))
                continue
            fresh = {entry[0] for entry in entries}
            view = await read_thread(redis, keys, thread_id, before=None, count=len(entries) + options.page,
                                     signer=state.signer, verdicts=state.verdicts)
            calls = [c for c in view.page.calls if any(entry_id in fresh for entry_id, _ in c.records)]
            last, fingerprint = entries[-1][0], view.verdict.fingerprint
            yield _event("calls", last, {
                "rows": render("_call_rows.html", calls=calls, view=view, call_key=call_key),
                "length": view.page.length, **_verdict(view.verdict),
            })

    return _stream(request, events())
