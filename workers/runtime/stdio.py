"""Standard streams a process was started without (cron, daemons, ``cmd >&-``).

A process whose file descriptor 0, 1 or 2 is closed at start has ``sys.stdin``/``stdout``
/``stderr`` set to ``None`` by Python, and the next file or socket it opens takes that
number: output meant for the terminal then goes into a Redis connection, and uvloop
aborts the process when it closes such a socket (``uv__close: Assertion fd >
STDERR_FILENO``, exit 134), after a ``write`` has stored its document: a caller that retries
on that failure writes twice. :func:`reopen_closed_stdio`, called first thing, opens ``/dev/null`` on each
closed descriptor and gives Python a stream for it: output is discarded, nothing is
aborted, and the exit code still says whether the command's work was done.
:func:`stdin_closed` tells a command that reads standard input (``--file -``) that there
is nothing to read, so that it can say so instead of reading an empty document.

What it does not do: it never closes or redirects a descriptor that is open (a pipe whose
reader is gone is the CLI's broken-pipe case, see :mod:`workers.runtime.exits`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from typing import TextIO

__all__ = ("discard_stdout", "reopen_closed_stdio", "stdin_closed")

_NAMES = ("stdin", "stdout", "stderr")
_reopened: set[int] = set()


def reopen_closed_stdio() -> tuple[int, ...]:
    """Open ``/dev/null`` on each of the descriptors 0, 1 and 2 that is closed (read-only
    for 0, write-only for the others) and set the matching ``sys`` stream when Python left
    it ``None``; returns the descriptors reopened. Idempotent."""
    opened = []
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError as e:
            if e.errno != errno.EBADF:
                raise
            null = os.open(os.devnull, os.O_RDONLY if fd == 0 else os.O_WRONLY)
            if null != fd:  # a lower descriptor was closed too, or is being reopened: move it
                os.dup2(null, fd)
                os.close(null)
            opened.append(fd)
    _reopened.update(opened)
    for fd, name in enumerate(_NAMES):
        if getattr(sys, name) is None:
            stream: TextIO = open(fd, "r" if fd == 0 else "w", encoding="utf-8",  # noqa: SIM115 - the process's own
                                  errors="surrogateescape" if fd < 2 else "backslashreplace", closefd=False)
            setattr(sys, name, stream)
    return tuple(opened)


def stdin_closed() -> bool:
    """Whether the process was started with its standard input closed (it reads
    ``/dev/null`` now: see :func:`reopen_closed_stdio`)."""
    return 0 in _reopened


def discard_stdout() -> None:
    """Send what is left of standard output to ``/dev/null`` (its reader is gone): output
    still buffered, and the interpreter's flush at exit, then fail neither the command
    nor the process."""
    with contextlib.suppress(OSError, ValueError):
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, sys.stdout.fileno())
        os.close(null)
