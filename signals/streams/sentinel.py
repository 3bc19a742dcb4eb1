"""Redis Sentinel as a connection mode: a client that always talks to the current master.

:func:`connect_sentinel` asks the sentinels for the master of a named service and keeps
asking after every connection failure, through redis-py's asyncio Sentinel support
(``Sentinel(...).master_for(...)``, with this module's own master discovery, see
:class:`_Sentinel`; a sentinel that does not answer is not retried, the next one is asked).
What happens during a failover, checked against the installed redis-py (8.x) and
``tests/integration/test_failover.py``:

* the master dies: commands in flight fail with ``redis.exceptions.ConnectionError``;
  every new connection first asks the sentinels for the master's address, so until they
  promote a replica a command fails fast with ``ConnectionError`` (connection refused at
  the dead master's address) or ``MasterNotFoundError`` (a ``ConnectionError`` subclass: no sentinel
  reports a master that is up). After the promotion the next connection reaches the new
  master; idle connections to the dead master's address are closed when the address changes.
* the dead master comes back as a replica, or a connection still points at a demoted
  master: its ``READONLY`` reply is turned by the connection into ``ConnectionError``
  ("The previous master is now a slave") and the connection is dropped, so the next
  command asks the sentinels again. A ``READONLY`` that reaches the caller some other way
  is :class:`~signals.streams.client.RedisReadOnlyError` (a ``RedisBusyError``).

So every failover condition is a ``ConnectionError`` or a ``READONLY``, which the worker,
the writers' callers and :class:`~signals.streams.subscribe.Subscription` already treat as
whole-server and transient (back off and retry; see :mod:`signals.streams.redis_errors`). The client makes
no retries of its own: a failed command raises at once, and the caller's backoff decides.

Credentials: the data nodes (master and replicas) and the sentinels authenticate
separately: ``username``/``password`` for the data nodes, ``sentinel_username``/
``sentinel_password`` for the sentinels (which often have their own ``requirepass``, or
none). TLS (``tls``) applies to both: a deployment that serves Redis over TLS serves its
sentinels over TLS too (``tls-port`` in ``sentinel.conf``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, cast

from redis import exceptions as redis_exc
from redis.asyncio import Redis
from redis.asyncio.retry import Retry
from redis.asyncio.sentinel import MasterNotFoundError, Sentinel, SentinelConnectionPool
from redis.backoff import NoBackoff

from signals.errors import InvalidInputError
from signals.streams.redis_compat import MAX_CONNECTIONS, RESP_OPTIONS, WaitsForConnections, wrap_connection_class
from signals.streams.urls import TLSOptions

__all__ = ("SENTINEL_SOCKET_TIMEOUT_S", "SentinelClient", "connect_sentinel", "parse_sentinels")

#: How long one question to one sentinel may take (connect, and the reply): a sentinel
#: that hangs must not hold up the discovery, which moves on to the next sentinel.
SENTINEL_SOCKET_TIMEOUT_S = 2.0


class _Sentinel(Sentinel):
    """redis-py's Sentinel manager with its own master discovery: serialised, and naming why
    each sentinel failed.

    redis-py's ``discover_master`` moves the sentinel that answered to the front of its
    list with a swap across an ``await``; two discoveries at once (several tasks
    reconnecting after a failover) can then write one sentinel's client over another's,
    so the list holds one sentinel twice and the other's client is dropped with its
    connections open and never asked again (seen with redis-py 8.1 under the failover
    test). Here one discovery runs at a time, which keeps the list a permutation;
    reconnecting tasks wait for each other's discovery, one round trip per sentinel asked.
    Its error, when no sentinel reports the master up, says what each sentinel answered
    (redis-py's lists only the errors' class names).
    """

    def __init__(self, addresses: list[tuple[str, int]], **kwargs: Any) -> None:
        super().__init__(addresses, **kwargs)  # type: ignore[no-untyped-call]
        self._discovering: asyncio.Lock | None = None

    async def discover_master(self, service_name: str) -> Any:
        """The ``(host, port)`` of the master of ``service_name`` that the first sentinel
        reporting it up gives; that sentinel is asked first next time.

        Raises:
            MasterNotFoundError: (a ``ConnectionError``) no sentinel reports it up; the
                message names each sentinel and what it answered.
        """
        if self._discovering is None:
            self._discovering = asyncio.Lock()
        async with self._discovering:
            problems: list[str] = []
            for index, sentinel in enumerate(self.sentinels):
                kwargs = sentinel.connection_pool.connection_kwargs
                where = f"{kwargs.get('host')}:{kwargs.get('port')}"
                try:
                    masters = cast(dict[str, dict[str, Any]], await sentinel.sentinel_masters())
                except (redis_exc.ConnectionError, redis_exc.TimeoutError) as e:
                    problems.append(f"{where}: {e}")
                    continue
                state = masters.get(service_name)
                if state and self.check_master_state(state, service_name):
                    self.sentinels.insert(0, self.sentinels.pop(index))
                    return state["ip"] if self._force_master_ip is None else self._force_master_ip, state["port"]
                problems.append(f"{where}: {'master down' if state else 'no such master'}")
            raise MasterNotFoundError(f"no sentinel reports a master {service_name!r} that is up "
                                      f"({'; '.join(problems)})")


class SentinelClient(Redis):
    """A ``redis.asyncio.Redis`` on the master of a Sentinel service; closing it also
    closes its connections to the sentinels."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        """Close the master's connection pool and the sentinels' clients."""
        await super().aclose(close_connection_pool)
        pool = cast(SentinelConnectionPool, self.connection_pool)
        await cast(Sentinel, pool.sentinel_manager).aclose()


def parse_sentinels(sentinels: str | Sequence[tuple[str, int]]) -> list[tuple[str, int]]:
    """Sentinel addresses from ``HOST:PORT[,HOST:PORT...]`` (``[::1]:26379`` for IPv6) or pairs.

    Raises:
        InvalidInputError: no address, an address without a port, or a port that is not
            an integer in 1..65535.
    """
    items: list[tuple[object, object]] = []
    if isinstance(sentinels, str):
        for part in (p.strip() for p in sentinels.split(",")):
            name, sep, number_text = part.rpartition(":")
            if not part or not sep or not name:
                raise InvalidInputError(f"sentinel address {part!r} is not HOST:PORT")
            items.append((name.removeprefix("[").removesuffix("]"), number_text))
    else:
        items = [(pair[0], pair[1]) if isinstance(pair, tuple | list) and len(pair) == 2 else (pair, None)
                 for pair in sentinels]
    if not items:
        raise InvalidInputError("no sentinel address given")
    out: list[tuple[str, int]] = []
    for host, port in items:
        if not isinstance(host, str) or not host:
            raise InvalidInputError(f"sentinel host {host!r} is not a host name or address")
        number = 0
        if isinstance(port, int) or (isinstance(port, str) and port.isascii() and port.isdigit()):
            number = int(port)
        if isinstance(port, bool) or not 1 <= number <= 65535:
            raise InvalidInputError(f"sentinel {host}: port {port!r} is not an integer in 1..65535")
        out.append((host, number))
    return out


class _WaitingSentinelPool(WaitsForConnections, SentinelConnectionPool):
    """The master's pool: a full pool waits for a connection, as :func:`connect`'s does."""


def connect_sentinel(
    sentinels: str | Sequence[tuple[str, int]],
    master: str,
    *,
    username: str | None = None,
    password: str | None = None,
    db: int = 0,
    tls: TLSOptions | None = None,
    sentinel_username: str | None = None,
    sentinel_password: str | None = None,
    max_reply_bytes: int | None = None,
    **kwargs: object,
) -> SentinelClient:
    """A redis.asyncio client on the current master of the Sentinel service ``master``.

    The client speaks RESP2 with ``str`` replies like :func:`~signals.streams.client.connect`
    (the same connection class: hiredis packing, busy replies raised as
    :class:`~signals.errors.RedisBusyError`), with no socket timeout on the data nodes
    (subscriptions block) and :data:`SENTINEL_SOCKET_TIMEOUT_S` on the sentinels. Nothing
    connects before the first command. See the module docstring for failover behaviour.

    Args:
        sentinels: ``"HOST:PORT,HOST:PORT"`` or ``[(host, port), ...]``; list all of them
            (discovery asks each in turn until one reports a master that is up).
        master: the service name (``sentinel monitor <name> ...``).
        username: ACL user on the data nodes (``None``: the default user).
        password: its password on the data nodes.
        db: the database number on the data nodes.
        tls: TLS to the data nodes and the sentinels (``TLSOptions()``: TLS verified
            against the system's trust store); ``None``: plain TCP.
        sentinel_username: ACL user on the sentinels.
        sentinel_password: password on the sentinels (``requirepass`` in sentinel.conf).
        **kwargs: more redis-py connection options for the data nodes (not ``ssl*``).

    Raises:
        InvalidInputError: a malformed sentinel address, an empty service name, a ``db``
            that is not a non-negative integer, ``ssl*`` keywords, an unusable TLS file.
    """
    addresses = parse_sentinels(sentinels)
    if not isinstance(master, str) or not master.strip():
        raise InvalidInputError("the sentinel master (service) name must be a non-empty string")
    if isinstance(db, bool) or not isinstance(db, int) or db < 0:
        raise InvalidInputError(f"the database number must be a non-negative integer, not {db!r}")
    refused = sorted(k for k in kwargs if k.startswith("ssl"))
    if refused:
        raise InvalidInputError(f"pass TLS options as tls=TLSOptions(...), not {', '.join(refused)}")
    tls_options: dict[str, Any] = {}
    if tls is not None:
        tls.check()
        tls_options = {"ssl": True, **tls.redis_options()}
    sentinel_options: dict[str, Any] = {
        **RESP_OPTIONS, **tls_options, "username": sentinel_username, "password": sentinel_password,
        "socket_timeout": SENTINEL_SOCKET_TIMEOUT_S, "socket_connect_timeout": SENTINEL_SOCKET_TIMEOUT_S,
        # no retries per sentinel (redis-py's default is 10, up to seconds on a dead one):
        # asking the next sentinel is the retry
        "retry": Retry(NoBackoff(), 0),
    }
    node_options: dict[str, Any] = {**RESP_OPTIONS, **tls_options, "username": username, "password": password,
                                    "db": db, **kwargs}
    node_options.setdefault("max_connections", MAX_CONNECTIONS)
    manager = _Sentinel(addresses, sentinel_kwargs=sentinel_options)
    client = cast(SentinelClient, manager.master_for(master, redis_class=SentinelClient,
                                                     connection_pool_class=_WaitingSentinelPool, **node_options))
    pool = client.connection_pool
    pool.connection_class = wrap_connection_class(pool, max_reply_bytes)  # max_reply_bytes: as connect()'s
    return client
