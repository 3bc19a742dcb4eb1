"""The worker's HTTP endpoint: ``/metrics``, ``/livez``, ``/readyz`` on one port.

Why a thread with the standard library's ``ThreadingHTTPServer`` (the server
prometheus-client's own ``start_http_server`` uses) and not an asyncio server in the
worker's loop: a request is answered from shared memory (:class:`workers.ops.health.Board`)
without touching Redis or the event loop, so a scrape never waits behind a batch, and a
wedged event loop cannot make ``/livez`` lie (its slot just goes stale). Under
``--processes N`` the same server runs in the supervisor, which has no event loop at all.
Own handler rather than prometheus-client's: the health routes share the port.

Answers: ``/metrics`` in the Prometheus text format; ``/livez`` and ``/readyz`` 200 with
``ok`` or 503 with one line saying why; anything else 404. Only GET (and HEAD).
"""

from __future__ import annotations

import contextlib
import socket
import sys
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import structlog
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import CollectorRegistry

from signals.errors import InvalidInputError
from workers.ops.health import Board
from workers.ops.metrics import MetricsCollector, version

__all__ = ("REQUEST_TIMEOUT_S", "OpsServer")

log = structlog.get_logger(__name__)


#: Seconds a connection may take, request and answer together, before it is closed (a
#: deadline for the whole exchange, not only for each read: a client sending a byte now and
#: then would hold its thread otherwise). Without it each idle or slow connection held a
#: thread and a descriptor for good, and a few hundred made the probes time out for everyone.
REQUEST_TIMEOUT_S = 5.0


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request: object, client_address: object) -> None:
        """A client that went away or timed out is not an error of the worker: the standard
        library printed a traceback to stderr, in the middle of the JSON log."""
        error = sys.exc_info()[1]
        if not isinstance(error, (ConnectionError, TimeoutError)):
            log.warning("ops.request_failed", client=str(client_address), error=repr(error))


class _DeadlineHandler(BaseHTTPRequestHandler):
    """A request handler whose whole exchange must end within :data:`REQUEST_TIMEOUT_S`."""

    timeout = REQUEST_TIMEOUT_S  # each read; the deadline (set up per connection) bounds them all

    def setup(self) -> None:
        super().setup()
        self._deadline = threading.Timer(REQUEST_TIMEOUT_S, self._cut)
        self._deadline.daemon = True
        self._deadline.start()

    def _cut(self) -> None:
        """Past the deadline: shut the socket, so the blocked read returns and the
        handler's thread ends."""
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def finish(self) -> None:
        self._deadline.cancel()
        super().finish()


class _Server6(_Server):
    address_family = socket.AF_INET6


class OpsServer:
    """Serves one board's metrics and health on ``addr:port`` from a daemon thread.

    ``alive(slot)`` says whether a slot's process runs (the supervisor's view of its
    children); ``None`` for a plain worker, whose own process answers.
    """

    def __init__(self, addr: str, port: int, board: Board, *, live_bound_s: float, ready_max_age_s: float,
                 alive: Callable[[int], bool] | None = None) -> None:
        self.board = board
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(MetricsCollector(lambda: (board.layout, board.vectors(ready_max_age_s)), version()))
        ops = self

        class Handler(_DeadlineHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._answer(200, generate_latest(ops.registry), CONTENT_TYPE_LATEST)
                elif path in ("/livez", "/readyz"):
                    why = (board.liveness(live_bound_s, alive) if path == "/livez"
                           else board.readiness(ready_max_age_s, alive))
                    self._answer(503 if why else 200, ((why or "ok") + "\n").encode())
                else:
                    self._answer(404, b"not found: try /metrics, /livez or /readyz\n")

            do_HEAD = do_GET

            def _answer(self, code: int, body: bytes, kind: str = "text/plain; charset=utf-8") -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                """Requests are not logged (a scrape every few seconds is noise)."""

        cls = _Server6 if ":" in addr else _Server
        try:
            self._server = cls((addr, port), Handler)
        except OSError as e:
            raise InvalidInputError(f"metrics_port {port}: cannot listen on {addr}: {e.strerror or e}") from e
        self._thread = threading.Thread(target=self._server.serve_forever, name="wm-signals-ops", daemon=True)

    @property
    def port(self) -> int:
        """The port listened on (the one asked for, or the system's pick for 0)."""
        return int(self._server.server_address[1])

    def start(self) -> OpsServer:
        """Serve from a daemon thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()
