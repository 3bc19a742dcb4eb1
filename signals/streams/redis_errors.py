"""How Redis refuses, classified: the error classes a client raises for a Redis that
refuses work for a while (both the redis-py class and :class:`~signals.errors.RedisBusyError`),
a server that cannot be reached (both redis-py's ``ConnectionError`` or ``TimeoutError`` and
:class:`~signals.errors.RedisUnavailableError`),
a reply over the client's bound, and the tests on an error reply (an ACL refusal, a
stream's ids exhausted, a script's relayed error).
"""

from __future__ import annotations

import re

from redis import exceptions as redis_exc

from signals.errors import CorruptDataError, RedisBusyError, RedisUnavailableError

__all__ = (
    "SERVER_CONDITIONS", "RedisConnectionError", "RedisConnectionTimeoutError", "RedisLoadingError",
    "RedisOutOfMemoryError", "RedisReadOnlyError", "RedisScriptBusyError", "ReplyTooLargeError", "acl_refused",
    "ids_exhausted", "relayed_error", "unreachable",
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
    text = str(error)
    match = _SCRIPT_LOCATION.match(text)
    return text[match.end():] if match else text


