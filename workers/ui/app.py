"""The app factory: routes, the guard, static files, error pages.

:func:`create_app` takes an open Redis client (the caller owns it: the CLI opens it with
the command's settings, tests with theirs) and returns a Starlette app. The dead-letter
actions are routed in operator mode only: in read-only mode they do not exist.
"""

from __future__ import annotations

from typing import Any

from redis import exceptions as redis_exc
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from signals.core.signing import Signer
from signals.errors import CorruptDataError, InvalidInputError, RedisBusyError, VerifyError
from signals.streams.keys import Keys
from signals.streams.redis_errors import ReplyTooLargeError
from workers.ui import live, pages
from workers.ui.logcheck import VerdictCache
from workers.ui.options import UiOptions
from workers.ui.render import render
from workers.ui.security import Guard

__all__ = ("create_app",)


def _error(status: int, title: str) -> Any:
    async def handler(request: Request, exc: Exception) -> Response:
        keys: Keys = request.app.state.keys
        options: UiOptions = request.app.state.options
        return HTMLResponse(render("message.html", namespace=keys.namespace, operator=options.operator,
                                   title=title, message=str(exc)[:2000]), status_code=status)
    return handler


def create_app(redis: Any, keys: Keys, options: UiOptions, *, signer: Signer | None = None) -> Starlette:
    """The UI over ``redis`` (a client of :func:`signals.connect`) for the namespace of ``keys``;
    with ``signer``, a signal without a valid MAC is shown as a bad entry, never as a signal."""
    routes = [
        Route("/", pages.overview, name="overview"),
        Route("/search", pages.search_page, name="search"),
        Route("/lane", pages.lane, name="lane"),
        Route("/diff", pages.diff, name="diff"),
        Route("/thread", pages.thread, name="thread"),
        Route("/deadletters", pages.deadletters, name="deadletters"),
        Route("/deadletter", pages.deadletter, name="deadletter"),
        Route("/live/lane", live.lane_events, name="live_lane"),
        Route("/live/thread", live.thread_events, name="live_thread"),
        Mount("/static", StaticFiles(packages=[("workers.ui", "static")]), name="static"),
    ]
    if options.operator:
        routes.append(Route("/deadletter/{action:str}", pages.requeue_or_drop, methods=["POST"], name="dlq_action"))
    handlers: dict[Any, Any] = {
        ReplyTooLargeError: _error(422, "a reply from Redis too large to read"),
        InvalidInputError: _error(400, "bad request"),
        CorruptDataError: _error(422, "malformed data in Redis"),
        VerifyError: _error(422, "malformed data in Redis"),
        RedisBusyError: _error(503, "Redis is busy"),
        redis_exc.RedisError: _error(503, "Redis error"),
    }
    app = Starlette(routes=routes, middleware=[Middleware(Guard, options=options)], exception_handlers=handlers)
    app.state.redis = redis
    app.state.keys = keys
    app.state.options = options
    app.state.live = 0
    app.state.signer = signer
    app.state.verdicts = VerdictCache()
    return app
