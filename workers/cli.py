"""The ``wm-signals`` command.

Exit codes: 0 ok, 2 bad input (usage, invalid scenario, refused write), 3 conflict
(expected version mismatch), 1 any other error; every error is one line on stderr.
Commands that talk to Redis take ``--redis-url`` (default ``WM_SIGNALS_REDIS_URL``);
with neither, an embedded Redis server is started for the run and stopped at exit.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import msgspec
from redis import exceptions as redis_exc

from signals.codec import decode_json, encode_json
from signals.errors import ConflictError, InvalidInputError, WmSignalsError
from signals.processor import POLICIES
from signals.simulate import run_scenario
from workers import commands, debug_commands, deploy_commands
from workers.logging import configure_logging

EXIT_OK, EXIT_ERROR, EXIT_BAD_INPUT, EXIT_CONFLICT = 0, 1, 2, 3

Handler = Callable[[argparse.Namespace], int]


def _cmd_simulate(args: argparse.Namespace) -> int:
    source = sys.stdin.read() if args.file in (None, "-") else Path(args.file).read_text("utf-8")
    try:
        scenario = decode_json(source)
    except msgspec.DecodeError as e:
        raise InvalidInputError(f"scenario is not valid JSON: {e}") from e
    lines = [encode_json(row) for row in run_scenario(scenario, policy=args.policy)]
    sys.stdout.write("".join(line + "\n" for line in lines))
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command (also used by the docs and tests)."""
    parser = argparse.ArgumentParser(
        prog="wm-signals",
        description="Working-memory state signals on Redis Streams (Mastra-compatible).",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sim = sub.add_parser(
        "simulate",
        help="run a scenario through Mastra's single-agent runtime and print JSON lines",
    )
    sim.add_argument("file", nargs="?", help="scenario JSON file (stdin when absent or '-')")
    sim.add_argument("--policy", choices=POLICIES, default="mastra")
    sim.set_defaults(handler=_cmd_simulate)

    commands.register(sub)
    debug_commands.register(sub)
    deploy_commands.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command != "worker":
        configure_logging("auto", "warning")
    handler: Handler = args.handler
    try:
        return handler(args)
    except ConflictError as e:
        print(f"wm-signals: conflict: {e}", file=sys.stderr)
        return EXIT_CONFLICT
    except InvalidInputError as e:
        print(f"wm-signals: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except (OSError, WmSignalsError) as e:
        print(f"wm-signals: {e}", file=sys.stderr)
        return EXIT_ERROR
    except redis_exc.RedisError as e:
        print(f"wm-signals: Redis: {e}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        return 130
