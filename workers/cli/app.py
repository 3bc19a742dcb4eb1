"""The ``wm-signals`` command.

Exit codes: 0 ok, 2 bad input (usage, invalid scenario, refused write, anything
malformed: an argument or file that is not UTF-8, JSON nested deeper than 64 levels, a
URL redis-py would refuse, malformed data read from Redis), 3 conflict (expected version
mismatch), 1 any other error (Redis unreachable or refusing work: out of memory, loading,
read-only); every error is one line on stderr, never a traceback (set
``WM_SIGNALS_TRACEBACK=1`` to see one for an unexpected error). Every command-line
argument must be valid UTF-8, file names included.
Commands that talk to Redis take ``--redis-url`` (default ``WM_SIGNALS_REDIS_URL``);
with neither, they refuse (exit 2) saying how to point at a Redis; only ``demo`` starts a
throwaway embedded server (docs/cli-defaults.md says why).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import msgspec

from signals import __version__
from signals.core.codec import decode_json, encode_json
from signals.core.processor import POLICIES
from signals.core.simulate import run_scenario
from signals.errors import InvalidInputError
from workers.cli.args import read_text
from workers.cli.commands import demo as demo_commands
from workers.cli.commands import deploy as deploy_commands
from workers.cli.commands import export as export_commands
from workers.cli.commands import mcp as mcp_commands
from workers.cli.commands import memory as commands
from workers.cli.commands import replay as replay_commands
from workers.cli.commands import status as status_commands
from workers.cli.commands import ui as ui_commands
from workers.cli.commands import worker as worker_commands
from workers.runtime.exits import EXIT_OK, report
from workers.runtime.logging import configure_logging
from workers.runtime.stdio import reopen_closed_stdio

Handler = Callable[[argparse.Namespace], int]


def _cmd_simulate(args: argparse.Namespace) -> int:
    source = read_text(args.file or "-", "scenario")
    try:
        scenario = decode_json(source)
    except msgspec.DecodeError as e:
        raise InvalidInputError(f"scenario {args.file or 'stdin'} is not valid JSON: {e}") from e
    lines = [encode_json(row) for row in run_scenario(scenario, policy=args.policy)]
    sys.stdout.write("".join(line + "\n" for line in lines))
    return EXIT_OK


class _Parser(argparse.ArgumentParser):
    """The CLI's parser, on argparse's public API only.

    No abbreviated flags, in every subcommand too (each is made with its parent's class):
    ``--signing-key SECRET`` would be taken for ``--signing-key-file SECRET``, a path. The
    parser records its subcommands and its optional positionals as they are added, so that
    what a subcommand does not know is reported by that subcommand."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self.commands: dict[str, argparse.ArgumentParser] = {}
        self.optional_positionals: list[argparse.Action] = []

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        action = super().add_argument(*args, **kwargs)
        if not action.option_strings and action.nargs == "?":
            self.optional_positionals.append(action)
        return action

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        """As argparse's, but what a subcommand does not know is refused by the subcommand's
        parser, so that the error names the command and its ``--help`` (one that lists the
        command's flags)."""
        parsed, extra = super().parse_known_args(args, namespace)
        chosen = self.commands.get(getattr(parsed, "command", None) or "")
        if extra and isinstance(chosen, _Parser):
            extra = chosen.fill_optional_positionals(parsed, extra)
            if extra:
                chosen.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed, extra

    def fill_optional_positionals(self, parsed: argparse.Namespace, extra: list[str]) -> list[str]:
        """Give words left over to this command's optional positionals argparse left empty.

        argparse fills an optional positional (``nargs="?"``) at once with the positional
        before it, empty when an option comes between them: ``dlq show --namespace NS ID``
        would leave ``ID`` over, a usage error. Returns what is still left over."""
        for action in self.optional_positionals:
            if (extra and not extra[0].startswith("-")
                    and getattr(parsed, action.dest, None) == action.default):
                setattr(parsed, action.dest, extra.pop(0))
        return extra

    def error(self, message: str) -> NoReturn:
        """A usage error is one line on stderr and exit 2, as every other error of the CLI:
        the line names the command, what is wrong, and where the usage is."""
        command = self.prog.partition(" ")[2]  # the subcommand's parser is named "wm-signals CMD"
        where = f"{command}: " if command else ""
        self.exit(2, f"wm-signals: {where}{' '.join(message.split())} (see: {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command (also used by the docs and tests)."""
    parser = _Parser(
        prog="wm-signals",
        description="Working-memory state signals on Redis Streams (Mastra-compatible).",
    )
    parser.add_argument("--version", action="version", version=f"wm-signals {__version__}",
                        help="print the installed version (the package metadata's) and exit")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    sim = sub.add_parser(
        "simulate",
        help="run a scenario through Mastra's single-agent runtime and print JSON lines",
    )
    sim.add_argument("file", nargs="?", help="scenario JSON file (stdin when absent or '-')")
    sim.add_argument("--policy", choices=POLICIES, default="mastra")
    sim.set_defaults(handler=_cmd_simulate)

    worker_commands.register(sub)
    demo_commands.register(sub)
    commands.register(sub)
    replay_commands.register(sub)
    export_commands.register(sub)
    status_commands.register(sub)
    deploy_commands.register(sub)
    mcp_commands.register(sub)
    ui_commands.register(sub)
    parser.commands = dict(sub.choices)
    return parser


def _check_argv(argv: Sequence[str]) -> None:
    """Refuse an argument that is not valid UTF-8 (Python hands such bytes over as lone
    surrogates, ``surrogateescape``), naming the option it belongs to."""
    for i, arg in enumerate(argv):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError as e:
            option = arg.split("=", 1)[0] if arg.startswith("--") and "=" in arg else None
            if option is None and i and argv[i - 1].startswith("-"):
                option = argv[i - 1]
            where = f"the value of {option}" if option else f"argument {i + 1}"
            code = ord(arg[e.start])
            byte = f"byte 0x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else f"U+{code:04X}"
            raise InvalidInputError(f"{where} is not valid UTF-8 ({byte} at position {e.start})") from e


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code.

    First of all, standard streams the process was started without are opened on
    ``/dev/null`` (see :mod:`workers.runtime.stdio`): a command run from cron or a daemon
    with a stream closed does its work and says by its exit code whether that work is done.
    """
    reopen_closed_stdio()
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        _check_argv(argv)
    except InvalidInputError as e:
        return report(e)
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command != "worker":
        configure_logging("auto", "warning")
    handler: Handler = args.handler
    try:
        code = handler(args)
        sys.stdout.flush()  # here, not at exit: a reader gone (`| head`) is reported as one (exit 141)
    except BaseException as e:  # noqa: BLE001 - the CLI's promise: one line and an exit code, never a traceback
        return report(e, args.command)
    return code
