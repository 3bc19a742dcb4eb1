"""The UI's guard, an ASGI middleware around every request.

* **Headers** on every response: the server time (``Server-Timing: app;dur=<ms>``, request in
  to response out), a Content-Security-Policy that allows only the app's own
  script, style and connections (no inline script or style, no frames, no other origin), no
  MIME sniffing, no referrer, no caching of pages.
* **Host**: on a loopback bind a request must name a loopback host (``127.0.0.1``,
  ``localhost``, ``[::1]``): a page of another site that rebinds its DNS name to 127.0.0.1
  reaches the port, but its requests carry its own name and are refused.
* **Token**: with a token configured (always on a non-loopback bind) every request carries
  it: ``Authorization: Bearer <token>``, the cookie the UI sets, or once as ``?token=``,
  which sets the cookie (HttpOnly, SameSite=Strict) and redirects to the URL without it.
* **Writes** (POST, operator mode only): the Origin, when sent, must be this server, and
  the form must carry the page's anti-forgery field (checked by the endpoint).
"""

from __future__ import annotations

import time
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qsl, urlencode

from starlette.datastructures import URL, Headers
from starlette.responses import PlainTextResponse, RedirectResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from workers.ui.options import UiOptions, is_loopback

__all__ = ("CONTENT_SECURITY_POLICY", "COOKIE", "Guard")

CONTENT_SECURITY_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
                           "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
COOKIE = "wm_ui_token"
_HEADERS = [
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"same-origin"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),
]


class Guard:
    """Security headers, the Host check, the token (see the module docstring)."""

    def __init__(self, app: ASGIApp, options: UiOptions) -> None:
        self.app = app
        self.options = options

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        started = time.perf_counter()

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = [(k, v) for k, v in message.get("headers", []) if k.lower() not in dict(_HEADERS)]
                if not any(k.lower() == b"cache-control" for k, _ in headers):
                    headers.append((b"cache-control", b"no-store"))
                took = (time.perf_counter() - started) * 1000
                message["headers"] = [*headers, *_HEADERS, (b"server-timing", f"app;dur={took:.1f}".encode())]
            await send(message)

        refusal = self._refusal(scope)
        if refusal is not None:
            await refusal(scope, receive, send_with_headers)
            return
        await self.app(scope, receive, send_with_headers)

    def _refusal(self, scope: Scope) -> Response | None:
        headers = Headers(scope=scope)
        host = headers.get("host", "")
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        if self.options.local and not is_loopback(name):
            return PlainTextResponse(f"refused: host {host[:80]!r} is not this loopback server's name "
                                     "(the UI binds a loopback address)\n", status_code=421)
        if scope["method"] == "POST":
            origin = headers.get("origin")
            if origin is not None and origin != f"{scope.get('scheme', 'http')}://{host}":
                return PlainTextResponse("refused: a form of another origin\n", status_code=403)
        return None if self.options.token is None else self._token_refusal(scope, headers)

    def _token_refusal(self, scope: Scope, headers: Headers) -> Response | None:
        """``None`` when the request carries the token; a redirect that sets the cookie for ``?token=``."""
        query = parse_qsl(scope.get("query_string", b"").decode("latin-1"), keep_blank_values=True)
        given = dict(query).get("token")
        if given is not None and self.options.token_ok(given):
            url = URL(scope=scope)
            rest = urlencode([(k, v) for k, v in query if k != "token"])
            response = RedirectResponse(url.replace(query=rest).path + (f"?{rest}" if rest else ""), status_code=303)
            response.set_cookie(COOKIE, given, httponly=True, samesite="strict", path="/")
            return response
        bearer = headers.get("authorization", "")
        if bearer.startswith("Bearer ") and self.options.token_ok(bearer[7:]):
            return None
        cookie = SimpleCookie()
        try:
            cookie.load(headers.get("cookie", ""))
        except CookieError:  # a malformed cookie header is no token
            cookie = SimpleCookie()
        if COOKIE in cookie and self.options.token_ok(cookie[COOKIE].value):
            return None
        return PlainTextResponse("401: this UI needs its token: open it once as /?token=<token>, or send "
                                 "'Authorization: Bearer <token>'\n", status_code=401)
