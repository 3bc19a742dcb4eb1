"""``wm-signals export``: a lane's signals (and a thread's deliveries) to a JSON lines file,
the format ``replay --file`` reads (:mod:`signals.streams.export`)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from signals.errors import InvalidInputError
from signals.streams.export import encode_export, write_export
from workers.cli.args import add_common_args, add_lane_args, run_async, settings_from
from workers.cli.lane_reads import NO_SIGNALS_HINT, load_lane
from workers.runtime.connect import open_client

__all__ = ("register",)


def _cmd_export(args: argparse.Namespace) -> int:
    settings = settings_from(args)

    loaded: list[Any] = []

    async def main() -> int:
        async with open_client(settings) as redis:
            loaded.extend(await load_lane(redis, settings.keys(), args))
        return 0

    run_async(main)
    signals, deliveries = loaded
    if not signals and not deliveries:  # as replay: no file, not an empty one that looks like an export
        raise InvalidInputError("nothing to export: no signals retained for that lane and no deliveries "
                                f"({NO_SIGNALS_HINT}); no file was written")
    try:
        if args.output == "-":  # standard output (replay --file - reads standard input)
            sys.stdout.write(encode_export(signals, deliveries))
            return 0
        write_export(args.output, signals, deliveries)
    except OSError as e:
        raise InvalidInputError(f"--output {args.output}: {e}") from e
    print(f"exported {len(signals)} signals and {len(deliveries)} deliveries to {args.output}")
    return 0


def register(sub: Any) -> None:
    """Add export to the CLI."""
    export = sub.add_parser("export", help="write a lane's signals (and a thread's deliveries) to a JSON lines file")
    add_common_args(export)
    add_lane_args(export)
    export.add_argument("--output", "-o", required=True, help="output file ('-': standard output)")
    export.add_argument("--no-deliveries", action="store_true",
                        help="leave the thread's delivery log out (the lane's signals only)")
    export.set_defaults(handler=_cmd_export, deliveries=False)
