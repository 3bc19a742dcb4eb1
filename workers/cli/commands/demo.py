"""``wm-signals demo``: the whole pipeline, scripted, on an embedded Redis or the configured one.

The demo and the engine it runs are imported when the command runs, not when the CLI starts.
"""

from __future__ import annotations

import argparse
from typing import Any

from signals.errors import InvalidInputError
from workers.cli.args import add_common_args, run_async, settings_from
from workers.runtime.connect import resolve_redis
from workers.runtime.logging import configure_logging

__all__ = ("register",)


def _cmd_demo(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    configure_logging(settings.log_format, "warning")
    if settings.sentinel:
        raise InvalidInputError("demo runs on one Redis URL (or an embedded server), not through --sentinel")

    async def main() -> int:
        from workers.cli.demo import run_demo  # noqa: PLC0415 - the demo and engine load only when it runs

        async with resolve_redis(settings, embedded=True) as url:
            await run_demo(url, settings)
        return 0

    return run_async(main)



def register(sub: Any) -> None:
    """Add ``demo`` to the CLI's sub-parsers."""
    demo = sub.add_parser("demo", help="run the whole pipeline, scripted, and print what the model sees")
    add_common_args(demo)
    demo.set_defaults(handler=_cmd_demo)

