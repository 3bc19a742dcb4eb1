"""``wm-signals ui``: serve the timeline page (the ``ui`` extra: Starlette, uvicorn, Jinja2).

The command opens its Redis client like every command (the namespace's partition count is
checked first), bounded as a worker's is (one reply at most ``max_reply_bytes``: any agent
user may append an entry of any size to a thread's log), then serves :mod:`workers.ui`
until SIGINT or SIGTERM. The UI needs the ``operator`` role's reads (``deploy acl``);
``--operator`` adds the dead-letter requeue and drop, which that role may run.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

from signals.core.retention import Retention
from signals.errors import InvalidInputError
from workers.cli.args import add_common_args, int_flag, run_async, settings_from
from workers.runtime.connect import open_client

__all__ = ("register",)

#: The environment variable holding the token (a flag would show it in the process list).
TOKEN_VARIABLE = "WM_SIGNALS_UI_TOKEN"  # noqa: S105 - the variable's name, not a secret


def _cmd_ui(args: argparse.Namespace) -> int:
    try:
        from workers.ui.options import UiOptions  # noqa: PLC0415 - the ui extra is optional
        from workers.ui.serve import serve  # noqa: PLC0415
    except ImportError as e:
        raise InvalidInputError(f"wm-signals ui needs the ui extra (pip install 'wm-signals[ui]'): {e}") from e
    settings = settings_from(args)
    token = args.token or os.environ.get(TOKEN_VARIABLE) or None
    signer = settings.signer()  # with the verification keys, as replay checks signals and delivery logs
    options = UiOptions(host=args.host, port=args.port, token=token, operator=args.operator, page=args.page,
                        retention=Retention.of(settings.retain_signals, settings.retain_age))

    async def main() -> int:
        async with open_client(settings, bounded=True) as redis:  # one reply at most max_reply_bytes
            mode = "operator mode" if options.operator else "read-only"
            host = f"[{options.host}]" if ":" in options.host else options.host
            print(f"wm-signals ui: serving namespace {settings.namespace} on http://{host}:{options.port}/ "
                  f"({mode}{', token required' if token else ''}); Ctrl-C stops", file=sys.stderr, flush=True)
            await serve(redis, settings.keys(), options, signer=signer)
        return 0

    return run_async(main)


def register(sub: Any) -> None:
    """Add ``ui`` to the CLI's sub-parsers."""
    ui = sub.add_parser("ui", help="serve the timeline page: lanes, threads, workers, dead letters (ui extra)")
    add_common_args(ui)
    ui.add_argument("--host", default="127.0.0.1",
                    help="address to bind (default 127.0.0.1; any other needs a token)")
    ui.add_argument("--port", type=int_flag("--port", "a TCP port", 1, 65535), default=8765,
                    help="TCP port (default 8765)")
    ui.add_argument("--token", help=f"access token (default: ${TOKEN_VARIABLE}); required on a non-loopback bind")
    ui.add_argument("--operator", action="store_true",
                    help="serve the dead-letter requeue and drop (with a confirmation); default read-only")
    ui.add_argument("--page", type=int, default=50, help="rows per page (default 50)")
    ui.add_argument("--retain-signals", type=int, help="the workers' retain_signals, quoted on lane pages")
    ui.add_argument("--retain-age", metavar="DURATION", help="the workers' retain_age, quoted on lane pages")
    ui.set_defaults(handler=_cmd_ui)
