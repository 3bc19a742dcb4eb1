"""Bad input refused by the library with a ``WmSignalsError`` naming the problem (issue 10, finding 11).

No network: every case fails before a connection is opened, or is a pure function.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest
from redis import exceptions as redis_exc

from signals.core.codec import decode_json, decode_signal
from signals.core.memory import (
    WorkingMemoryConfig,
    apply_merge,
    apply_replace,
    lone_surrogate_escape,
    parse_merge_input,
)
from signals.core.merge import MAX_DEPTH, check_json_value
from signals.errors import CorruptDataError, InvalidInputError, RedisBusyError
from signals.streams.client import connect
from signals.streams.urls import TLSOptions

JSON = WorkingMemoryConfig(schema={"type": "object"})
MARKDOWN = WorkingMemoryConfig()


def nested(depth: int) -> dict[str, Any]:
    """``{"a": {"a": ... 1}}`` with ``depth`` objects."""
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value  # type: ignore[no-any-return]


def test_text_with_a_lone_surrogate_is_refused() -> None:
    """Markdown holding undecodable bytes (``surrogateescape``) is refused, not a UnicodeEncodeError later."""
    with pytest.raises(InvalidInputError, match="not valid UTF-8 text"):
        apply_replace(None, "hello \udcff world", MARKDOWN)


def test_merge_json_text_with_a_lone_surrogate_is_refused() -> None:
    """JSON text given as a ``str`` with a lone surrogate is invalid input, not a raw UnicodeEncodeError."""
    with pytest.raises(InvalidInputError, match="not valid UTF-8"):
        apply_merge(None, '{"a": "\udcff"}', JSON)


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"a": "x\udcffy"}, "$.a"),
        ({"a": {"\udcff": 1}}, "$.a"),
        ({"a": [1, float("nan")]}, "$.a[1]"),
        ({"a": math.inf}, "$.a"),
        ({"a": {"b": -math.inf}}, "$.a.b"),
        ({"a": b"bytes"}, "$.a"),
        ({"a": {1, 2}}, "$.a"),
        ({"a": frozenset()}, "$.a"),
        ({"a": (1, 2)}, "$.a"),
        ({"a": {1: "x"}}, "$.a"),
        ({"a": {None: "x"}}, "$.a"),
        ({"a": object()}, "$.a"),
        ({"odd key": [{"b": math.nan}]}, "$['odd key'][0].b"),
    ],
)
def test_merge_values_json_cannot_represent_are_refused_with_their_path(value: dict[str, Any], path: str) -> None:
    """NaN, infinities, bytes, sets, tuples, non-string keys, lone surrogates: refused, naming where."""
    with pytest.raises(InvalidInputError) as caught:
        apply_merge(None, value, JSON)
    assert path in str(caught.value)


def test_a_tuple_is_refused_with_a_hint_to_pass_a_list() -> None:
    """Tuples would read back as lists: refused (strict and consistent), the message says what to pass."""
    with pytest.raises(InvalidInputError, match="pass a list"):
        parse_merge_input({"a": (1, 2)})


def test_plain_json_values_are_accepted() -> None:
    """The JSON types, big integers and bool included, pass the check and are stored as given."""
    update = {"s": "é", "i": 2**70, "f": 1.5, "t": True, "n": None, "l": [1, [2, {"k": "v"}]], "o": {}}
    assert decode_json(apply_merge(None, update, JSON)) == {k: v for k, v in update.items() if v is not None}


def test_json_text_nested_500_levels_is_refused() -> None:
    """A merge update nested ~500 levels is refused before any recursion (it was a RecursionError)."""
    text = '{"a":' * 500 + "1" + "}" * 500
    with pytest.raises(InvalidInputError, match=f"nested deeper than {MAX_DEPTH}"):
        apply_merge(None, text, JSON)


def test_json_text_nested_past_the_decoder_limit_is_refused() -> None:
    """Past msgspec's own recursion limit the decoder's RecursionError is reported as bad JSON."""
    text = '{"a":' * 5000 + "1" + "}" * 5000
    with pytest.raises(InvalidInputError, match="nested too deeply"):
        apply_merge(None, text, JSON)


def test_a_deeply_nested_dict_is_refused() -> None:
    """A merge dict nested 5,000 levels is refused (it was a RecursionError in the merge)."""
    with pytest.raises(InvalidInputError, match="nested deeper than"):
        apply_merge(None, nested(5000), JSON)


def test_the_depth_limit_is_inclusive() -> None:
    """Exactly MAX_DEPTH objects deep is accepted; one more is refused."""
    check_json_value(nested(MAX_DEPTH))
    with pytest.raises(InvalidInputError):
        check_json_value(nested(MAX_DEPTH + 1))


def test_a_stored_document_that_is_not_json_is_corrupt_data() -> None:
    """What was read from Redis and is malformed is CorruptDataError (still bad input: exit 2)."""
    with pytest.raises(CorruptDataError, match="stored working memory"):
        apply_merge("{not json", {"a": 1}, JSON)


def test_a_stored_document_nested_too_deeply_is_corrupt_data() -> None:
    """A hostile stored document nested past the limit is refused before the merge recurses into it."""
    stored = '{"a":' * 800 + "1" + "}" * 800
    with pytest.raises(CorruptDataError, match="nested deeper"):
        apply_merge(stored, {"b": 1}, JSON)


def test_decoders_report_deep_nesting_as_a_decode_error() -> None:
    """msgspec's RecursionError (also for skipped unknown fields) becomes DecodeError, which callers handle."""
    with pytest.raises(msgspec.DecodeError, match="nested too deeply"):
        decode_json("[" * 5000 + "]" * 5000)
    with pytest.raises(msgspec.DecodeError, match="nested too deeply"):
        decode_signal('{"x":' + "[" * 100_000 + "]" * 100_000 + "}")


@pytest.mark.parametrize("url", ["notaurl", "http://127.0.0.1:6379/0", "127.0.0.1:6379", "redis://h:notaport/0",
                                 "redis://[::1/0", "redis://h/0?db=x"])
def test_a_url_redis_py_refuses_is_invalid_input(url: str) -> None:
    """A malformed Redis URL is InvalidInputError naming the problem (it was a raw ValueError)."""
    with pytest.raises(InvalidInputError, match="Redis URL"):
        connect(url)


def test_a_url_message_names_the_scheme_problem() -> None:
    """``notaurl`` has no scheme; the message lists the accepted ones."""
    with pytest.raises(InvalidInputError, match=r"no scheme.*redis://, rediss://"):
        connect("notaurl")


def test_a_url_password_is_not_echoed() -> None:
    """Error messages about a URL never carry its password."""
    with pytest.raises(InvalidInputError) as caught:
        connect("http://user:s3cret@host/0")
    assert "s3cret" not in str(caught.value)


@pytest.mark.parametrize("query", ["ssl_cert_reqs=none", "ssl_check_hostname=false", "SSL_CERT_REQS=none",
                                   "ssl%5Fcert%5Freqs=none", "ssl_ca_certs=/tmp/ca.pem",
                                   "ssl_exclude_verify_flags=VERIFY_X509_STRICT"])
def test_url_tls_options_are_refused(query: str) -> None:
    """Verification can only be turned off by the named setting, never by a URL option."""
    with pytest.raises(InvalidInputError, match=r"refused.*tls"):
        connect(f"rediss://127.0.0.1:6380/0?{query}")


@pytest.mark.parametrize(("query", "needle"), [
    ("protocol=3", "speaks RESP2"), ("protocol=9", "speaks RESP2"), ("bogus=1", "'bogus' is not one"),
    ("decode_responses=false", "'decode_responses' is not one"), ("db=1&encoding=latin-1", "'encoding' is not one"),
])
def test_url_options_that_would_change_the_replies_are_refused(query: str, needle: str) -> None:
    """``?protocol=3`` reshaped the replies the worker parses (it died at its first read
    while writes went on); an unknown option became a keyword argument of every connection
    (a TypeError at the first command, exit 1). Each is bad input now, naming the option."""
    with pytest.raises(InvalidInputError, match=re.escape(needle)):
        connect(f"redis://127.0.0.1:6380/0?{query}")
    for cluster in (False, True):
        connect("redis://127.0.0.1:6380/0?protocol=2&socket_timeout=5&db=0", cluster=cluster)  # still taken


def test_ssl_keywords_are_refused() -> None:
    """``connect(..., ssl_cert_reqs="none")`` is refused too: TLS goes through TLSOptions."""
    with pytest.raises(InvalidInputError, match="TLSOptions"):
        connect("rediss://127.0.0.1:6380/0", ssl_cert_reqs="none")


def test_tls_options_need_a_rediss_url() -> None:
    """TLS options on a plain redis:// URL are refused instead of being ignored."""
    with pytest.raises(InvalidInputError, match="rediss://"):
        connect("redis://127.0.0.1:6379/0", tls=TLSOptions(insecure_skip_verify=True))


@pytest.mark.parametrize("field", ["ca_file", "cert_file", "key_file"])
def test_a_missing_tls_file_is_named(tmp_path: Path, field: str) -> None:
    """A missing CA, certificate or key file is InvalidInputError naming the file."""
    missing = str(tmp_path / f"no-{field}.pem")
    present = tmp_path / "cert.pem"
    present.write_text("present\n")
    options = {"cert_file": str(present)} if field == "key_file" else {}
    with pytest.raises(InvalidInputError, match=re.escape(missing)):
        connect("rediss://127.0.0.1:6380/0", tls=TLSOptions(**options, **{field: missing}))


def test_a_tls_file_that_is_not_pem_is_named(tmp_path: Path) -> None:
    """A CA file without a certificate in it is refused before any connection, naming it."""
    junk = tmp_path / "ca.pem"
    junk.write_text("not a certificate\n")
    with pytest.raises(InvalidInputError, match=re.escape(str(junk))):
        connect("rediss://127.0.0.1:6380/0", tls=TLSOptions(ca_file=str(junk)))


def test_a_tls_key_needs_its_certificate() -> None:
    """A client key alone is refused."""
    with pytest.raises(InvalidInputError, match="client certificate"):
        TLSOptions(key_file="/tmp/key.pem").check()


def test_busy_replies_parse_as_redis_busy_errors() -> None:
    """OOM, LOADING and READONLY replies are RedisBusyError and still redis-py's own classes."""
    client = connect("redis://127.0.0.1:6379/0")
    connection = client.connection_pool.make_connection()
    parse = connection._parser.parse_error  # type: ignore[union-attr]
    cases = [("OOM command not allowed when used memory > 'maxmemory'.", redis_exc.OutOfMemoryError),
             ("LOADING Redis is loading the dataset in memory", redis_exc.BusyLoadingError),
             ("READONLY You can't write against a read only replica.", redis_exc.ReadOnlyError)]
    for reply, redis_class in cases:
        error = parse(reply)
        assert isinstance(error, RedisBusyError) and isinstance(error, redis_class), reply
    assert not isinstance(parse("ERR unknown command"), RedisBusyError)
    assert "BUSYGROUP" in str(parse("BUSYGROUP Consumer Group name already exists"))


def test_lone_surrogate_escape_in_merge_json_is_named() -> None:
    """A ``\\ud800`` escape that is not half of a pair: msgspec says "Input data was truncated";
    the error names the escape and why it cannot be stored instead."""
    with pytest.raises(InvalidInputError, match=r"\\ud800 at character 7: a lone surrogate"):
        parse_merge_input('{"a": "\\ud800"}')
    assert parse_merge_input('{"a": "\\ud83d\\ude00"}') == {"a": "\U0001f600"}
    assert lone_surrogate_escape('{"a": "\\\\ud800"}') is None        # an escaped backslash, then text
    assert lone_surrogate_escape('{"a": "\\udc00"}') == "\\udc00"      # a low half alone
    assert lone_surrogate_escape('{"a": "\\ud83dx"}') == "\\ud83d"     # a high half not followed by a low one
