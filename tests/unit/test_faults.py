"""Redis errors are classified by their reply code however Redis words them (Redis 7, and 6.2 relaying
a command's error from a script after the script's location)."""

from __future__ import annotations

import pytest
from redis import exceptions as redis_exc

from signals.streams.redis_errors import is_transient, is_whole_server, is_wrong_type, relayed_error, reply_code

SHA = "f_ab5a402eac2ea8cb211185723d9390126aed2cfa"


@pytest.mark.parametrize("text", [
    "NOREPLICAS Not enough good replicas to write.",
    "NOREPLICAS Not enough good replicas to write. script: ab5a, on @user_script:1.",  # Redis 7
    "@user_script: 65: -NOREPLICAS Not enough good replicas to write.",  # 6.2, a pcall's error returned
    f"Error running script (call to {SHA}): @user_script:1: @user_script: 1: -OOM command not allowed",  # 6.2
    "-LOADING Redis is loading the dataset in memory",
])
def test_server_conditions_are_whole_server_errors(text: str) -> None:
    assert is_whole_server(redis_exc.ResponseError(text))
    assert relayed_error(redis_exc.ResponseError(text)).split()[0] in {"NOREPLICAS", "OOM", "LOADING"}


@pytest.mark.parametrize("text", [
    "WRONGTYPE Operation against a key holding the wrong kind of value",
    "@user_script: 12: -WRONGTYPE Operation against a key holding the wrong kind of value",
    "ERR The stream has exhausted the last possible ID, unable to add more items",
    "Error running script: @user_script:3: user text mentioning OOM later",
])
def test_errors_about_one_key_are_not(text: str) -> None:
    assert not is_whole_server(redis_exc.ResponseError(text))


def test_busygroup_is_not_a_busy_server() -> None:
    """BUSYGROUP (the group exists) is about one stream: a code is compared whole, so it is
    not BUSY (a script past its busy threshold), which is whole-server."""
    assert not is_whole_server(redis_exc.ResponseError("BUSYGROUP Consumer Group name already exists"))
    assert is_whole_server(redis_exc.ResponseError("BUSY Redis is busy running a script."))


WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


@pytest.mark.parametrize("text", [
    WRONGTYPE,
    f"{WRONGTYPE} script: ab5a, on @user_script:1.",  # Redis 7, from a script
    f"Error running script (call to {SHA}): @user_script:12: {WRONGTYPE}",  # 6.2, from a script
    f"Command # 1 (XADD wm:dlv k * e x) of pipeline caused error: ('{WRONGTYPE}',)",  # redis-py asyncio pipeline
    f"Command # 2 (HGET k f) of pipeline caused error: {WRONGTYPE}",  # redis-py cluster pipeline
])
def test_wrong_type_is_recognised_however_it_arrives(text: str) -> None:
    assert is_wrong_type(redis_exc.ResponseError(text))
    assert reply_code(redis_exc.ResponseError(text)) == "WRONGTYPE"
    assert not is_whole_server(redis_exc.ResponseError(text))


@pytest.mark.parametrize("text", [
    "ERR value mentions WRONGTYPE later",
    "Command # 1 (XADD WRONGTYPE * e x) of pipeline caused error: ('OOM command not allowed',)",
    "NOGROUP No such key 'WRONGTYPE' or consumer group 'g'",
])
def test_wrong_type_is_the_reply_code_not_a_word_anywhere(text: str) -> None:
    """A key or a message that merely holds the word is not a key of another type."""
    assert not is_wrong_type(redis_exc.ResponseError(text))


def test_transient_errors_are_the_connection_failing_not_a_refused_login() -> None:
    assert is_transient(redis_exc.ConnectionError("Connection refused"))
    assert is_transient(redis_exc.TimeoutError("Timeout reading from socket"))
    assert is_transient(redis_exc.BusyLoadingError("Redis is loading the dataset in memory"))
    assert not is_transient(redis_exc.AuthenticationError("invalid username-password pair"))
    assert not is_whole_server(redis_exc.AuthenticationError("invalid username-password pair"))
    assert not is_transient(redis_exc.ResponseError(WRONGTYPE))
    assert not is_wrong_type(ValueError(WRONGTYPE))  # not a reply from Redis
