"""Redis URL options a server would refuse later are refused up front, naming the option;
a database the server does not have is named as the URL's fault (exit 2, not 1).

``socket_timeout=0`` was accepted and then reported as "Redis unreachable"; a negative
``health_check_interval`` failed on ``CLIENT SETINFO``; ``client_name=a%20b`` surfaced as a
raw Redis error; ``/99999`` exited 1 with Redis's own words.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from signals.errors import InvalidInputError
from signals.streams.client import connect
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.redis]


@pytest.mark.parametrize(("option", "named"), [
    ("socket_timeout=0", "socket_timeout"), ("socket_timeout=-1", "socket_timeout"),
    ("socket_timeout=nan", "socket_timeout"), ("socket_connect_timeout=0", "socket_connect_timeout"),
    ("health_check_interval=-5", "health_check_interval"), ("health_check_interval=x", "health_check_interval"),
    ("max_connections=0", "max_connections"), ("client_name=a%20b", "client_name"), ("client_name=", "client_name"),
])
def test_options_a_server_would_refuse_later_are_refused_naming_them(option: str, named: str) -> None:
    with pytest.raises(InvalidInputError, match=named):
        connect(f"redis://127.0.0.1:1/0?{option}")


def test_a_database_that_is_not_a_number_is_refused() -> None:
    with pytest.raises(InvalidInputError, match="not a database number"):
        connect("redis://127.0.0.1:1/x")


def test_good_options_pass() -> None:
    connect("redis://127.0.0.1:1/3?socket_timeout=2.5&client_name=worker-1&health_check_interval=0")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workers", *args], capture_output=True, text=True, timeout=60,
                          check=False)


def test_a_database_the_server_lacks_exits_2_naming_it(redis_server: RedisServer) -> None:
    done = _run("inspect", "--redis-url", f"redis://127.0.0.1:{redis_server.port}/99999", "--namespace", "urlopts")
    assert done.returncode == 2, done.stderr
    assert "database 99999" in done.stderr


@pytest.mark.parametrize("option", ["socket_timeout=0", "health_check_interval=-5", "client_name=a%20b"])
def test_the_cli_exits_2_on_a_refused_option(redis_server: RedisServer, option: str) -> None:
    done = _run("inspect", "--redis-url", f"redis://127.0.0.1:{redis_server.port}/0?{option}", "--namespace", "u")
    assert done.returncode == 2, done.stderr
    assert option.split("=", maxsplit=1)[0] in done.stderr
