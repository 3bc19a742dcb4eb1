"""Errors to exit codes: the one mapping every process of ``wm-signals`` reports with.

Exit codes: 0 ok, 2 bad input (usage, invalid scenario, refused write, anything
malformed: an argument or file that is not UTF-8, JSON nested deeper than 64 levels, a
URL redis-py would refuse, malformed data read from Redis), 3 conflict (expected version
mismatch), 1 any other error (Redis unreachable or refusing work: out of memory, loading,
read-only), 130 interrupted, 141 a reader that went away (``| head``). Every error is one
line on stderr, never a traceback (``WM_SIGNALS_TRACEBACK=1`` shows one). The CLI reports
with it, and so does a ``--processes`` child, so that its reason and code reach the
supervisor's output and exit.
"""

from __future__ import annotations

import contextlib
import os
import sys
import traceback

import msgspec
from redis import exceptions as redis_exc

from signals.errors import (
    ConfigurationError,
    ConflictError,
    CorruptDataError,
    HistoryTrimmedError,
    InvalidInputError,
    RedisBusyError,
    VerifyError,
    WmSignalsError,
)
from signals.streams.redis_errors import is_wrong_type

__all__ = ("EXIT_BAD_INPUT", "EXIT_BROKEN_PIPE", "EXIT_CONFLICT", "EXIT_ERROR", "EXIT_OK", "leaf", "report")

EXIT_OK, EXIT_ERROR, EXIT_BAD_INPUT, EXIT_CONFLICT = 0, 1, 2, 3
EXIT_BROKEN_PIPE = 128 + 13  # as a filter killed by SIGPIPE: a reader that closed early (`| head`)


def leaf(error: BaseException) -> BaseException:
    """The first error inside (nested) exception groups: a task group's failure."""
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


#: The role each command runs as (docs/operations/redis.md, "ACL users"), for a refusal by the ACL.
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
    if is_wrong_type(error):
        return f"corrupt data in Redis (a key holds the wrong type of value): {error}", EXIT_BAD_INPUT
    if isinstance(error, redis_exc.AuthenticationError):  # as open_client words it, from inside a task group too
        return f"Redis refused the login: {error} (check the URL's user and password)", EXIT_BAD_INPUT
    if isinstance(error, redis_exc.NoPermissionError) and command:
        role = _ROLES.get(command)
        hint = f"run it as {role}" if role else "see the ACL users in docs/operations/redis.md"
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
    sys.stderr.write(f"wm-signals: {' '.join(message.split())}\n")
    return code


def _message(error: BaseException, command: str | None = None) -> tuple[str, int]:
    """The one line and the exit code of an error (anything but an Exception is raised)."""
    if isinstance(error, redis_exc.RedisClusterException):  # --cluster against a server that is not one
        message, code = f"Redis Cluster: {error}", EXIT_BAD_INPUT
    elif isinstance(error, ConflictError):
        message, code = f"conflict: {error}", EXIT_CONFLICT
    elif isinstance(error, InvalidInputError | CorruptDataError | ConfigurationError):  # exit 2: fix the input
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
