"""The ``wm-signals`` entry point: the command line, or one line naming the extra it needs.

``pip install wm-signals`` installs the library alone; the command line and the worker
processes need the ``worker`` extra (``pip install 'wm-signals[worker]'``). Without it,
``wm-signals`` prints one line on stderr naming the extra and the missing modules, and exits
2, the code of a command that cannot act on what it is given (as for any missing extra).
``wm-signals --version`` answers with the library alone.

This module imports nothing of the worker stack before it has checked that it is there.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Sequence

__all__ = ("WORKER_STACK", "main")

# The modules of the `worker` extra that the command line cannot start without (uvloop is
# used when present and is not needed).
WORKER_STACK = ("pydantic_settings", "rich", "prometheus_client", "yaml")
EXIT_MISSING_EXTRA = 2


def _version() -> str:
    from signals import __version__  # noqa: PLC0415 - only for --version

    return __version__


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI, or say in one line which extra to install; returns the exit code."""
    args = sys.argv[1:] if argv is None else list(argv)
    if args == ["--version"]:
        print(f"wm-signals {_version()}")  # noqa: T201 - the command's answer
        return 0
    missing = [name for name in WORKER_STACK if importlib.util.find_spec(name) is None]
    if missing:
        print(  # noqa: T201 - the command's one line
            "wm-signals: the command line needs the worker extra: pip install 'wm-signals[worker]' "
            f"(missing: {', '.join(missing)})",
            file=sys.stderr,
        )
        return EXIT_MISSING_EXTRA
    from workers.cli.app import main as cli_main  # noqa: PLC0415 - only once the worker stack is known to be there

    return cli_main(args)
