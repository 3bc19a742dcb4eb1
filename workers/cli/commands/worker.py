"""``wm-signals worker``: run worker processes, or probe one's heartbeat (``--check``).

The engine and the process runtime are imported when the command runs, not when the CLI
starts: every other command starts without loading them.
"""

from __future__ import annotations

import argparse
from typing import Any

from workers.cli.args import add_common_args, settings_from
from workers.runtime.logging import configure_logging

__all__ = ("register",)


def _cmd_worker(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    configure_logging(settings.log_format, settings.log_level)
    settings.warn_unknown_variables()

    from workers.runtime.supervisor import run_check, run_worker_command  # noqa: PLC0415 - the engine loads only when a worker runs

    return run_check(settings) if args.check else run_worker_command(settings)



def register(sub: Any) -> None:
    """Add ``worker`` to the CLI's sub-parsers."""
    worker = sub.add_parser("worker", help="run a worker process (consumer group over every partition)")
    add_common_args(worker)
    worker.add_argument("--policy", choices=("compact", "mastra"), help="signal policy (default compact)")
    worker.add_argument("--snapshot-every", type=int, help="every K-th signal of a lane is a snapshot")
    worker.add_argument("--retain-signals", type=int,
                        help="signals kept per lane at least (default 30; trimmed at snapshot boundaries)")
    worker.add_argument("--retain-age", metavar="DURATION",
                        help="also keep every signal younger than this (90s, 12h, 7d, 2w; default: none)")
    worker.add_argument("--max-diff-edits", type=int,
                        help="line edits a delta may take before a snapshot is sent instead (default 300)")
    worker.add_argument("--token-counter", choices=("bytes4", "cl100k"),
                        help="tokens for the compact policy's delta-or-snapshot test (default bytes4; "
                             "cl100k needs the tokens extra)")
    worker.add_argument("--batch", type=int, help="entries per read")
    worker.add_argument("--consumer-name", help="consumer name (default host-pid)")
    worker.add_argument("--grace-s", type=float, help="seconds in-flight work gets on shutdown")
    worker.add_argument("--metrics-port", type=int, metavar="N",
                        help="serve /metrics, /livez, /readyz on this port (default: $WM_SIGNALS_METRICS_PORT, off)")
    worker.add_argument("--metrics-addr", metavar="ADDR",
                        help="address to serve them on (default: $WM_SIGNALS_METRICS_ADDR, else 127.0.0.1)")
    worker.add_argument("--processes", metavar="N|auto",
                        help="consumer processes under one supervisor, auto: one per core "
                             "(default: $WM_SIGNALS_PROCESSES, else 1)")
    worker.add_argument("--check", action="store_true",
                        help="probe: exit 0 when the worker's heartbeat is fresh in Redis, else 1 (--consumer-name: "
                             "its configured name or the consumer name inspect shows; else this host's)")
    worker.set_defaults(handler=_cmd_worker)

