"""How Redis refuses, classified: the error classes a client raises for a Redis that
refuses work for a while (both the redis-py class and :class:`~signals.errors.RedisBusyError`),
a server that cannot be reached (both redis-py's ``ConnectionError`` or ``TimeoutError`` and
:class:`~signals.errors.RedisUnavailableError`),
a reply over the client's bound, and the tests on an error reply (an ACL refusal, a
stream's ids exhausted, a script's relayed error).

The one classification of Redis errors, by how a caller reacts:

* :func:`is_wrong_type`: a key holds another type (``WRONGTYPE``): that key is corrupt
  or foreign data, the server is fine;
* :func:`is_transient`: the connection failed or timed out: a new connection may succeed;
* :func:`is_whole_server`: the server cannot work for a while (the transient errors, and
  out of memory, loading, a read-only replica, a script past its busy threshold, a master
  without the replicas it needs, a cluster reconfiguring): back off and retry, never
  blame a key.

Each reads the reply's code (:func:`reply_code`) however it reaches the caller: as Redis 7
words it, relayed from a script by Redis 6.2 (after the script's location), or annotated
by a redis-py pipeline (after the command).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TypeGuard

from redis import exceptions as redis_exc

from signals.errors import CorruptDataError, RedisBusyError, RedisUnavailableError

__all__ = (
    "SERVER_CONDITIONS", "WHOLE_SERVER", "RedisConnectionError", "RedisConnectionTimeoutError", "RedisLoadingError",
    "RedisOutOfMemoryError", "RedisReadOnlyError", "RedisScriptBusyError", "ReplyTooLargeError", "acl_refused",
    "ids_exhausted", "is_transient", "is_whole_server", "is_wrong_type", "raise_whole_server", "relayed_error",
    "reply_code", "unreachable",
)


class ReplyTooLargeError(redis_exc.RedisError, CorruptDataError):
    """A reply from Redis over the client's ``max_reply_bytes`` (see :func:`connect`): the
    read was stopped and the connection closed, so nothing of it reached the caller. The
    command ran on the server (an XREADGROUP's entries are pending for the consumer)."""


class RedisConnectionError(redis_exc.ConnectionError, RedisUnavailableError):
    """Redis cannot be reached, or dropped the connection: refused, reset, a host name that
    does not resolve. Both redis-py's ``ConnectionError`` (its retries and every ``except``
    written against it still apply) and :class:`~signals.errors.RedisUnavailableError`."""


class RedisConnectionTimeoutError(redis_exc.TimeoutError, RedisUnavailableError):
    """Connecting to Redis, or a reply from it, took longer than the socket timeouts allow.
    Both redis-py's ``TimeoutError`` and :class:`~signals.errors.RedisUnavailableError`."""


def unreachable(error: BaseException) -> Exception | None:
    """``error`` as one of the two classes above when it is redis-py's plain connection or
    timeout error (its subclasses, a refused login among them, stay as they are)."""
    if type(error) is redis_exc.ConnectionError:
        return RedisConnectionError(str(error))
    if type(error) is redis_exc.TimeoutError:
        return RedisConnectionTimeoutError(str(error))
    return None


class RedisOutOfMemoryError(redis_exc.OutOfMemoryError, RedisBusyError):
    """Redis is at ``maxmemory`` and refuses writes (``OOM``, under ``noeviction``)."""

    condition = "out of memory (maxmemory reached)"


class RedisLoadingError(redis_exc.BusyLoadingError, RedisBusyError):
    """Redis is loading its dataset and answers nothing yet (``LOADING``)."""

    condition = "loading its dataset"


class RedisReadOnlyError(redis_exc.ReadOnlyError, RedisBusyError):
    """The server is a read-only replica (``READONLY``): a failover is under way or the URL names a replica."""

    condition = "a read-only replica"


class RedisScriptBusyError(redis_exc.ResponseError, RedisBusyError):
    """Redis is running a script past its busy threshold and answers nothing else until it
    ends or is killed (``BUSY``)."""

    condition = "busy running a script"


#: The first words of the error replies about the whole server rather than one key: out of
#: memory, loading, a failover or a cluster reconfiguring, a script past the busy
#: threshold, a master cut off from the replicas ``min-replicas-to-write`` asks for.
SERVER_CONDITIONS = ("OOM", "LOADING", "MASTERDOWN", "BUSY", "READONLY", "TRYAGAIN", "CLUSTERDOWN", "NOREPLICAS")
#: What Redis 6.2 puts before the error of a command a script ran: the script's location
#: (``@user_script: 65: -OOM ...``), after its own words when the script raised it
#: (``Error running script (call to f_<sha>): @user_script:65: @user_script: 65: -OOM ...``).
#: Redis 7 relays the command's error as it is, with the location after it.
_SCRIPT_LOCATION = re.compile(r"(?:Error running script \(call to f_[0-9a-f]+\): @user_script:\d+: )?"
                              r"(?:@user_script: ?\d+: )?-?")


#: How Redis words a script's command that the caller's ACL refuses (a plain error reply
#: from inside a script, not NOPERM).
_ACL_REFUSALS = ("NOPERM", "can't run this command", "can't access at least one of the keys", "No permissions")


def acl_refused(error: BaseException) -> bool:
    """Whether ``error`` is the deployment's ACL refusing a command (a script's too)."""
    return isinstance(error, redis_exc.NoPermissionError) or (
        isinstance(error, redis_exc.ResponseError) and any(words in str(error) for words in _ACL_REFUSALS))


def ids_exhausted(error: BaseException) -> bool:
    """Whether ``error`` is a stream refusing a new entry because an entry with the largest
    id there is was added to it (by hand: ``XADD`` with an explicit id)."""
    return "exhausted the last possible ID" in str(error)


def relayed_error(error: BaseException) -> str:
    """An error reply's text as Redis 7 words it, beginning with its code (``OOM ...``,
    ``NOREPLICAS ...``) also when Redis 6.2 relayed it from a script."""
    return _relayed_text(str(error))


def _relayed_text(text: str) -> str:
    match = _SCRIPT_LOCATION.match(text)
    return text[match.end():] if match else text


#: What redis-py puts between a pipeline command (its name and arguments) and its error reply.
_PIPELINE_ERROR = "caused error: "


def reply_code(error: object) -> str:
    """The code an error reply begins with (``WRONGTYPE``, ``NOGROUP``, ``OOM``...), also when a
    script relays it or a pipeline annotates it; ``""`` for an error that is not a reply."""
    if not isinstance(error, redis_exc.ResponseError):
        return ""
    text = relayed_error(error)
    _, annotated, reply = text.rpartition(_PIPELINE_ERROR)
    if annotated:  # "Command # 1 (XADD k ...) of pipeline caused error: ('WRONGTYPE ...',)" in some versions
        text = _relayed_text(reply.lstrip("(\"'"))
    return text.split(" ", 1)[0]


def is_wrong_type(error: object) -> TypeGuard[redis_exc.ResponseError]:
    """Whether ``error`` is Redis refusing a command on a key of another type (``WRONGTYPE``)."""
    return reply_code(error) == "WRONGTYPE"


def is_transient(error: BaseException) -> bool:
    """Whether ``error`` is the connection failing or timing out (a new connection may
    succeed). A refused login is not (redis-py's AuthenticationError is a ConnectionError):
    waiting does not change the credentials."""
    return isinstance(error, redis_exc.ConnectionError | redis_exc.TimeoutError) and not isinstance(
        error, redis_exc.AuthenticationError)


#: Exception classes of whole-server conditions besides the transient ones (redis-py maps
#: ``LOADING`` to a ConnectionError subclass, ``OOM`` and ``READONLY`` to ResponseError
#: subclasses); :class:`~signals.errors.RedisBusyError` is this library's (the wm-signals
#: functions missing where this user may not load them among them: a worker with the
#: generated ACL loads them).
WHOLE_SERVER: tuple[type[Exception], ...] = (
    RedisBusyError,
    redis_exc.OutOfMemoryError,
    redis_exc.ReadOnlyError,
    redis_exc.TryAgainError,
    redis_exc.ClusterDownError,
)


def is_whole_server(error: BaseException) -> bool:
    """Whether ``error`` is about the server rather than one key (also when a Lua script
    relays it as a plain error reply), and passes: backing off waits it out. A worker must
    never exit for a fault of one lane, and must never dead-letter a lane's events because
    the server was briefly unable to work. A refused login is not whole-server (see
    :func:`is_transient`): a worker stops at once, saying so, rather than looking like an
    outage for its reconnect timeout."""
    if is_transient(error) or isinstance(error, WHOLE_SERVER):
        return True
    return reply_code(error) in SERVER_CONDITIONS


def raise_whole_server(replies: Iterable[object]) -> None:
    """Raise the first whole-server error among a pipeline's replies (read with
    ``raise_on_error=False``); errors about single keys are left to the caller."""
    for reply in replies:
        if isinstance(reply, Exception) and is_whole_server(reply):
            raise reply
