"""Sentinel and durability options (issue 13, scope 5): parsing and refusals, no network."""

from __future__ import annotations

import pytest
from redis.asyncio.connection import SSLConnection

from signals.errors import InvalidInputError
from signals.streams.durability import Durability
from signals.streams.sentinel import connect_sentinel, parse_sentinels
from signals.streams.urls import TLSOptions
from workers.cli import app as cli
from workers.runtime.connect import _node_credentials
from workers.runtime.settings import Settings


def test_sentinel_addresses_parse() -> None:
    """``HOST:PORT`` lists, bracketed IPv6 and pairs."""
    assert parse_sentinels("127.0.0.1:26379, 127.0.0.2:26380") == [("127.0.0.1", 26379), ("127.0.0.2", 26380)]
    assert parse_sentinels("[::1]:26379") == [("::1", 26379)]
    assert parse_sentinels([("s1", 1), ("s2", "2")]) == [("s1", 1), ("s2", 2)]  # type: ignore[list-item]


@pytest.mark.parametrize("bad", ["", "host", ":26379", "h:0", "h:65536", "h:port", "h:1,", "h:١٢"])
def test_malformed_sentinel_addresses_are_refused(bad: str) -> None:
    """Each malformed address is an InvalidInputError naming it."""
    with pytest.raises(InvalidInputError, match="sentinel"):
        parse_sentinels(bad)


@pytest.mark.parametrize(("replicas", "timeout"), [(0, 100), (1, 0), (True, 100), (1, 1.5)])
def test_durability_needs_positive_integers(replicas: object, timeout: object) -> None:
    """WAIT 0 replicas says nothing and a 0 ms timeout would block forever."""
    with pytest.raises(InvalidInputError, match="durability"):
        Durability(replicas, timeout)  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_sentinel_client_keeps_tls_verification() -> None:
    """TLS options reach the data nodes' connections and the sentinels, verification on."""
    client = connect_sentinel("127.0.0.1:1", "m", tls=TLSOptions(), password="node-secret",
                              sentinel_password="sentinel-secret")
    try:
        pool = client.connection_pool
        assert issubclass(pool.connection_class, SSLConnection)
        assert pool.connection_kwargs["ssl_cert_reqs"] == "required"
        assert pool.connection_kwargs["ssl_check_hostname"] is True
        assert pool.connection_kwargs["password"] == "node-secret"
        sentinel = pool.sentinel_manager.sentinels[0].connection_pool  # type: ignore[attr-defined]
        assert sentinel.connection_kwargs["password"] == "sentinel-secret"
        assert issubclass(sentinel.connection_class, SSLConnection)
    finally:
        await client.aclose()


def test_sentinel_client_refuses_ssl_keywords_and_empty_master() -> None:
    """TLS only through TLSOptions, as for connect(); the service must be named."""
    with pytest.raises(InvalidInputError, match="TLSOptions"):
        connect_sentinel("h:1", "m", ssl_cert_reqs="none")
    with pytest.raises(InvalidInputError, match="master"):
        connect_sentinel("h:1", " ")


def test_node_credentials_come_from_a_hostless_url() -> None:
    """With Sentinel the URL carries user, password, database and scheme only."""
    assert _node_credentials("redis://wm-worker:p%40ss@/3") == ("wm-worker", "p@ss", 3, "redis")
    assert _node_credentials("rediss://:secret@") == (None, "secret", 0, "rediss")
    assert _node_credentials(None) == (None, None, 0, "redis")
    for bad, match in (("redis://redis.internal:6379/0", "must not name a host"), ("unix:///tmp/r.sock", "redis://"),
                       ("redis://@/x", "not a non-negative integer"), ("redis://@/0?socket_timeout=1", "only the db")):
        with pytest.raises(InvalidInputError, match=match):
            _node_credentials(bad)


@pytest.mark.parametrize(("values", "match"), [
    ({"sentinel": "h:1"}, "go together"),
    ({"sentinel_master": "m"}, "go together"),
    ({"sentinel": "h:1", "sentinel_master": "m", "cluster": True, "redis_url": "redis://@/0"}, "two connection modes"),
    ({"sentinel": "h", "sentinel_master": "m"}, "HOST:PORT"),
    ({"write_min_replicas": -1}, "greater than or equal"),
    ({"sentinel": "h:1", "sentinel_master": "m", "tls_insecure_skip_verify": True}, "host-less one: rediss://"),
])
def test_settings_refuse_inconsistent_ha_options(values: dict[str, object], match: str) -> None:
    """Sentinel needs its master name and excludes cluster mode; addresses are checked early."""
    with pytest.raises(ValueError, match=match):
        Settings(**values)  # type: ignore[arg-type]


def test_settings_durability() -> None:
    """0 replicas (the default) is the master's word; N > 0 is a Durability."""
    assert Settings().durability() is None
    assert Settings(write_min_replicas=2, write_replica_timeout_ms=250).durability() == Durability(2, 250)


@pytest.mark.parametrize("extra", [
    ["--redis-url", "redis://127.0.0.1:6390/0"],
    ["--cluster", "--redis-url", "redis://@/0"],
    ["--sentinel-master", ""],
])
def test_cli_refuses_mixed_connection_modes(extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 2 and one line on stderr, before any connection (the sentinel port is closed)."""
    argv = ["get", "--resource", "a", "--sentinel", "127.0.0.1:1", "--sentinel-master", "m", *extra]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("wm-signals: ") and err.count("\n") == 1, err
