"""The pages: overview, search, lane, diff, thread timeline, dead letters (and, in operator
mode, the requeue and drop confirmations and actions). Each reads through
:mod:`workers.ui.overview` or :mod:`workers.ui.views` and renders a template."""

from __future__ import annotations

import hmac
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from signals.core.lane import is_stream_id
from signals.errors import InvalidInputError
from signals.streams.deadletters import DeadLetters
from signals.streams.keys import Keys
from workers.ui.options import UiOptions
from workers.ui.overview import read_overview, search
from workers.ui.render import render
from workers.ui.views import call_key, check_lane, read_diff, read_lane, read_thread

__all__ = ("deadletter", "deadletters", "diff", "lane", "overview", "requeue_or_drop", "search_page", "thread")

#: The most a form body may hold (a dead letter id, a partition and the anti-forgery field).
_FORM_BYTES = 4096


def _ctx(request: Request) -> tuple[Any, Keys, UiOptions]:
    state = request.app.state
    return state.redis, state.keys, state.options


def page(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
    """A rendered page with what every page shows (namespace, mode)."""
    _, keys, options = _ctx(request)
    return HTMLResponse(render(name, namespace=keys.namespace, operator=options.operator, **context),
                        status_code=status)


def _cursor(request: Request) -> str | None:
    before = request.query_params.get("before") or None
    if before is not None and not is_stream_id(before):
        raise InvalidInputError(f"before is a stream entry id (<ms>-<seq>), not {before[:40]!r}")
    return before


def _param(request: Request, name: str) -> str:
    value = request.query_params.get(name)
    if not value:
        raise InvalidInputError(f"missing ?{name}=")
    return value


def _int(request: Request, name: str, *, required: bool = True) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        if required:
            raise InvalidInputError(f"missing ?{name}=")
        return None
    if not raw.isascii() or not raw.isdigit() or len(raw) > 16:
        raise InvalidInputError(f"{name} is a whole number, not {raw[:40]!r}")
    return int(raw)


async def overview(request: Request) -> Response:
    """The namespace at a glance."""
    redis, keys, _ = _ctx(request)
    return page(request, "overview.html", data=await read_overview(redis, keys))


async def search_page(request: Request) -> Response:
    """Lanes and threads an id names; one match goes straight to its page."""
    redis, keys, _ = _ctx(request)
    query = request.query_params.get("q", "")
    found = await search(redis, keys, query)
    if len(found) == 1:  # a relative redirect: the Host header never chooses where it goes
        return RedirectResponse(f"/{found[0].kind}?{urlencode({'id': found[0].target})}", status_code=303)
    return page(request, "search.html", query=query, found=found)


async def lane(request: Request) -> Response:
    """A lane: its document, its signals (paged), where its history starts; live on the newest page."""
    redis, keys, options = _ctx(request)
    lane_id = check_lane(_param(request, "id"))
    before = _cursor(request)
    view = await read_lane(redis, keys, lane_id, before=before, count=options.page, retention=options.retention,
                           signer=request.app.state.signer)
    return page(request, "lane.html", view=view, live=before is None)


async def diff(request: Request) -> Response:
    """The diff between two retained versions of a lane."""
    redis, keys, _ = _ctx(request)
    lane_id = check_lane(_param(request, "id"))
    a, b = _int(request, "a"), _int(request, "b")
    assert a is not None and b is not None
    return page(request, "diff.html", view=await read_diff(redis, keys, lane_id, a, b,
                                                                signer=request.app.state.signer))


async def thread(request: Request) -> Response:
    """A thread's timeline: one row per model call, newest first, paged; live on the newest page."""
    redis, keys, options = _ctx(request)
    thread_id = _param(request, "id")
    before = _cursor(request)
    view = await read_thread(redis, keys, thread_id, before=before, count=options.page,
                             signer=request.app.state.signer, verdicts=request.app.state.verdicts)
    return page(request, "thread.html", thread_id=thread_id, view=view, call_key=call_key, live=before is None)


async def deadletters(request: Request) -> Response:
    """The dead letters of every partition (the oldest of each), with reasons."""
    redis, keys, options = _ctx(request)
    dlq = DeadLetters(redis, keys)
    entries = await dlq.list(limit=options.page * 4)
    lengths = await dlq.lengths()
    return page(request, "deadletters.html", entries=entries, lengths=lengths)


async def deadletter(request: Request) -> Response:
    """One dead letter; in operator mode, the confirmation of a requeue or drop."""
    redis, keys, options = _ctx(request)
    action = request.query_params.get("confirm")
    if action is not None and (not options.operator or action not in ("requeue", "drop")):
        raise InvalidInputError("requeue and drop are served in operator mode only (wm-signals ui --operator)")
    entry = await DeadLetters(redis, keys).get(_param(request, "id"), _int(request, "partition", required=False))
    return page(request, "deadletter.html", entry=entry, confirm=action, csrf=options.csrf)


async def requeue_or_drop(request: Request) -> Response:
    """POST (operator mode only): requeue or drop one dead letter, confirmed on its page."""
    redis, keys, options = _ctx(request)
    action = request.path_params["action"]
    if action not in ("requeue", "drop"):
        raise InvalidInputError(f"the dead-letter actions are requeue and drop, not {action[:20]!r}")
    body = await _form(request)
    if not hmac.compare_digest(body.get("csrf", "").encode(), options.csrf.encode()):
        return page(request, "message.html", 403, title="refused",
                    message="the form did not come from this UI's confirmation page (anti-forgery field)")
    if body.get("confirm") != "yes":
        raise InvalidInputError("confirm the action on the dead letter's page")
    partition_text = body.get("partition", "")
    partition = int(partition_text) if partition_text.isascii() and partition_text.isdigit() else None
    dlq = DeadLetters(redis, keys)
    dead_id = body.get("id", "")
    if action == "requeue":
        new_id = await dlq.requeue(dead_id, partition)
        message = f"dead letter {dead_id} requeued as write-stream entry {new_id}"
    else:
        await dlq.drop(dead_id, partition)
        message = f"dead letter {dead_id} dropped"
    return page(request, "message.html", title=action, message=message)


async def _form(request: Request) -> dict[str, str]:
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/x-www-form-urlencoded":
        raise InvalidInputError("a form post (application/x-www-form-urlencoded) was expected")
    raw = b""
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > _FORM_BYTES:
            raise InvalidInputError(f"a form of more than {_FORM_BYTES} bytes")
    try:
        return dict(parse_qsl(raw.decode("ascii"), keep_blank_values=True))
    except UnicodeDecodeError as e:
        raise InvalidInputError("a form that is not ASCII") from e
