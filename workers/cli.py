"""The ``wm-signals`` command.

Exit codes: 0 ok, 2 bad input (usage, invalid scenario, refused write, anything
malformed: an argument or file that is not UTF-8, JSON nested deeper than 64 levels, a
URL redis-py would refuse, malformed data read from Redis), 3 conflict (expected version
mismatch), 1 any other error (Redis unreachable or refusing work: out of memory, loading,
read-only); every error is one line on stderr, never a traceback (set
``WM_SIGNALS_TRACEBACK=1`` to see one for an unexpected error). Every command-line
argument must be valid UTF-8, file names included.
Commands that talk to Redis take ``--redis-url`` (default ``WM_SIGNALS_REDIS_URL``);
with neither, an embedded Redis server is started for the run and stopped at exit.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

import msgspec
from redis import exceptions as redis_exc

from signals.core.codec import decode_json, encode_json
from signals.core.processor import POLICIES
from signals.core.simulate import run_scenario
from signals.errors import (
    ConflictError,
    HistoryTrimmedError,
    InvalidInputError,
    RedisBusyError,
    VerifyError,
    WmSignalsError,
)
from workers import commands, debug_commands, deploy_commands
from workers.logging import configure_logging

EXIT_OK, EXIT_ERROR, EXIT_BAD_INPUT, EXIT_CONFLICT = 0, 1, 2, 3
EXIT_BROKEN_PIPE = 128 + 13  # as a filter killed by SIGPIPE: a reader that closed early (`| head`)

Handler = Callable[[argparse.Namespace], int]


def _cmd_simulate(args: argparse.Namespace) -> int:
    source = commands.read_text(args.file or "-", "scenario")
    try:
        scenario = decode_json(source)
    except msgspec.DecodeError as e:
        raise InvalidInputError(f"scenario {args.file or 'stdin'} is not valid JSON: {e}") from e
    lines = [encode_json(row) for row in run_scenario(scenario, policy=args.policy)]
    sys.stdout.write("".join(line + "\n" for line in lines))
    return EXIT_OK


class _Parser(argparse.ArgumentParser):
    """No abbreviated flags, in every subcommand too (each is made with its parent's class):
    ``--signing-key SECRET`` was taken for ``--signing-key-file SECRET``, a path."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        """As argparse's, but what a subcommand does not know is refused by the subcommand's
        parser, so that the error names the command and its ``--help`` (the root parser
        reported it, pointing to a help that does not list the command's flags)."""
        parsed, extra = super().parse_known_args(args, namespace)
        command = getattr(parsed, "command", None)
        if extra and command and not self.prog.partition(" ")[2]:
            chosen = self._subcommands().get(command)
            if chosen is not None:
                extra = _fill_optional_positionals(chosen, parsed, extra)
                if extra:
                    chosen.error(f"unrecognized arguments: {' '.join(extra)}")
        return parsed, extra

    def _subcommands(self) -> dict[str, argparse.ArgumentParser]:
        actions = self._subparsers._group_actions if self._subparsers else []
        return next((dict(a.choices) for a in actions if isinstance(a, argparse._SubParsersAction)), {})

    def error(self, message: str) -> NoReturn:
        """A usage error is one line on stderr and exit 2, as every other error of the CLI
        (argparse printed its whole usage block first): the line names the command, what
        is wrong, and where the usage is."""
        command = self.prog.partition(" ")[2]  # the subcommand's parser is named "wm-signals CMD"
        where = f"{command}: " if command else ""
        self.exit(2, f"wm-signals: {where}{' '.join(message.split())} (see: {self.prog} --help)\n")


def _fill_optional_positionals(parser: argparse.ArgumentParser, parsed: argparse.Namespace,
                               extra: list[str]) -> list[str]:
    """Give words left over to the command's optional positionals argparse left empty.

    argparse fills an optional positional (``nargs="?"``) at once with the positional
    before it, empty when an option comes between them: ``dlq show --namespace NS ID``
    left ``ID`` over, a usage error. Returns what is still left over."""
    for action in parser._actions:
        if (extra and not action.option_strings and action.nargs == "?" and not extra[0].startswith("-")
                and getattr(parsed, action.dest, None) == action.default):
            setattr(parsed, action.dest, extra.pop(0))
    return extra


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every command (also used by the docs and tests)."""
    parser = _Parser(
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


def leaf(error: BaseException) -> BaseException:
    """The first error inside (nested) exception groups: a task group's failure."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


#: The role each command runs as (deploy/README.md, "ACL users"), for a refusal by the ACL.
_ROLES = {"worker": "the worker role", "write": "the writer or agent role", "get": "a writer, reader or agent role",
          "subscribe": "a reader, writer or agent role", "export": "the operator role",
          "replay": "the operator role (--verify reads the lane's tracking; without it, --deliveries included, "
                    "any role that reads signals and delivery logs: reader, agent or operator)",
          "inspect": "the operator role", "dlq": "the operator role"}


def _redis_error(error: redis_exc.RedisError, command: str | None = None) -> tuple[str, int]:
    """A Redis refusal: a key holding the wrong type of value is corrupt data in Redis, that is
    bad input like a corrupt document (exit 2), and so is a refused login (the credentials
    are a setting); a refusal by the ACL names the role the command needs; anything else is
    exit 1."""
    if isinstance(error, redis_exc.ResponseError) and str(error).startswith("WRONGTYPE"):
        return f"corrupt data in Redis (a key holds the wrong type of value): {error}", EXIT_BAD_INPUT
    if isinstance(error, redis_exc.AuthenticationError):  # as open_client words it, from inside a task group too
        return f"Redis refused the login: {error} (check the URL's user and password)", EXIT_BAD_INPUT
    if isinstance(error, redis_exc.NoPermissionError) and command:
        role = _ROLES.get(command)
        hint = f"run it as {role}" if role else "see the ACL users in deploy/README.md"
        return (f"the Redis user may not do what '{command}' needs: {error} ({hint}: the roles are the "
                "ACL users of 'wm-signals deploy acl')"), EXIT_ERROR
    return f"Redis: {error}", EXIT_ERROR


def report(error: BaseException, command: str | None = None) -> int:
    """Print one line for ``error`` on stderr (``command``: the one that was running); the
    exit code it maps to (see the module). A ``--processes`` child reports its own end
    with it, so that its reason and its code reach the supervisor's output and exit."""
    error = leaf(error)
    if isinstance(error, KeyboardInterrupt):
        return 130
    if isinstance(error, BrokenPipeError):  # the reader went away (`| head`): nothing to say, like any filter
        with contextlib.suppress(OSError):  # and nothing more to flush at exit either
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    message, code = _message(error, command)
    if os.environ.get("WM_SIGNALS_TRACEBACK"):
        traceback.print_exception(error, file=sys.stderr)
    print(f"wm-signals: {' '.join(message.split())}", file=sys.stderr)
    return code


def _message(error: BaseException, command: str | None = None) -> tuple[str, int]:
    """The one line and the exit code of an error (anything but an Exception is raised)."""
    if isinstance(error, redis_exc.RedisClusterException):  # --cluster against a server that is not one
        message, code = f"Redis Cluster: {error}", EXIT_BAD_INPUT
    elif isinstance(error, ConflictError):
        message, code = f"conflict: {error}", EXIT_CONFLICT
    elif isinstance(error, InvalidInputError):
        message, code = str(error), EXIT_BAD_INPUT
    elif isinstance(error, VerifyError) and not isinstance(error, HistoryTrimmedError):
        # a signal read from Redis that does not read (``replay --verify`` answers its own
        # check with exit 1; everywhere else this is malformed data read from Redis)
        message, code = f"malformed signal read from Redis: {error}", EXIT_BAD_INPUT
    elif isinstance(error, RedisBusyError):
        condition = getattr(error, "condition", "refusing work for now")
        message, code = f"Redis is {condition}: {error}", EXIT_ERROR
    elif isinstance(error, OSError | WmSignalsError):
        message, code = str(error), EXIT_ERROR
    elif isinstance(error, redis_exc.RedisError):
        message, code = _redis_error(error, command)
    elif isinstance(error, UnicodeError | RecursionError | msgspec.DecodeError):  # malformed data past a check
        message, code = f"malformed data ({type(error).__name__}): {error}", EXIT_BAD_INPUT
    elif isinstance(error, Exception):
        message, code = f"unexpected error ({type(error).__name__}): {error}", EXIT_ERROR
    else:
        raise error
    return message, code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the process exit code."""
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
