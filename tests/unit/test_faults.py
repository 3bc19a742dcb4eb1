"""Whole-server conditions are recognised however Redis words them (Redis 7, and 6.2 relaying
a command's error from a script after the script's location)."""

from __future__ import annotations

import pytest
from redis import exceptions as redis_exc

from signals.streams.redis_errors import relayed_error
from workers.engine.faults import is_whole_server

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
