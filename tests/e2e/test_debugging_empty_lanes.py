"""The debugging commands on lanes with nothing to show, and the export files they read.

Each run as a user runs it (``python -m workers ...`` in a subprocess):
``replay`` on a lane whose writes no worker has processed said only to check the ids
(``export`` says why); ``replay --deliveries`` on a thread with no delivery log printed
nothing, exit 0, as an empty log would; ``subscribe`` with a wrong signing key counted and
logged refused entries twice when the snapshot hint led nowhere; and ``replay --file``
took any text as a signal's ``entryId``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from signals.streams.keys import Keys
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import running_workers, wait_caught_up
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]

KEY = "k" * 32  # the workers' signing key
OTHER_KEY = "o" * 32  # a subscriber's wrong one


async def wm(url: str, keys: Keys, *args: str) -> tuple[int, str, str]:
    """Run ``wm-signals args`` against the test namespace: exit code, stdout, stderr."""
    proc = await anyio.run_process(
        [sys.executable, "-m", "workers", *args, "--redis-url", url, "--namespace", keys.namespace,
         "--partitions", str(keys.partitions)], check=False)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


def one_line(code: int, err: str, *needles: str) -> None:
    """Exit 2 with one ``wm-signals:`` line on stderr holding every needle, no traceback."""
    lines = err.splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("wm-signals: "), (code, err)
    for needle in needles:
        assert needle in lines[0], lines[0]


async def test_replay_of_a_lane_no_worker_has_processed_says_so(redis_server: RedisServer, redis: Redis,
                                                                  keys: Keys) -> None:
    """A lane with a document but no signal yet: ``replay`` and ``replay --verify`` say, as
    ``export`` does, that no worker may have processed its writes (they named only the ids)."""
    await WorkingMemoryStore(redis, keys=keys).replace("np1", "# Notes\n- one")
    for extra in ((), ("--verify",)):
        code, out, err = await wm(redis_server.url, keys, "replay", "--resource", "np1", *extra)
        assert out == ""
        one_line(code, err, "no signals retained", "no worker has processed its writes yet", "--namespace")


async def test_replay_deliveries_of_a_thread_without_a_log_is_refused(redis_server: RedisServer, keys: Keys) -> None:
    """``--deliveries`` for a thread with no delivery log (a mistyped id, say) is exit 2 naming
    the thread; it printed nothing and exited 0, which reads as an empty log."""
    for extra in ((), ("--json",)):
        code, out, err = await wm(redis_server.url, keys, "replay", "--resource", "alice", "--thread", "nothr",
                                  "--deliveries", *extra)
        assert out == ""
        one_line(code, err, "'nothr'", "no delivery log", "--namespace")


@pytest.mark.parametrize("writes", [1, 3])
async def test_subscribe_counts_each_refused_entry_once(redis_server: RedisServer, redis: Redis, keys: Keys,
                                                        tmp_path: Path, writes: int) -> None:
    """A signed lane subscribed with the wrong key: each entry is refused, counted and logged
    once, from the latest snapshot as from the start. The hint's snapshot was refused, so
    the stream was read again from its start, and the entries from the hint on were counted
    (and logged) twice: "2 entries were refused" for one entry."""
    url = redis_server.url
    store = WorkingMemoryStore(redis, keys=keys)
    async with running_workers(url, keys, 1, signing_key=KEY):
        for n in range(1, writes + 1):
            await store.replace("s", f"# v{n}")
        await wait_caught_up(redis, keys)
    assert await redis.xlen(keys.signals("r:s")) == writes
    (tmp_path / "key").write_text(OTHER_KEY)
    said = f"{writes} entry was refused" if writes == 1 else f"{writes} entries were refused"
    for extra in ((), ("--from-start",)):
        code, out, err = await wm(url, keys, "subscribe", "--resource", "s", "--count", "1", "--timeout", "2",
                                  "--signing-key-file", str(tmp_path / "key"), *extra)
        assert code == 1 and out == "", err
        assert f"delivered nothing: {said}" in err, err
        refusals = [line for line in err.splitlines() if "subscribe.entry_refused" in line]
        assert len(refusals) == writes, err


@pytest.mark.parametrize("entry_id", ["junk", "", "18446744073709551616-0", "1-18446744073709551616", "1-0-0"])
async def test_replay_file_refuses_an_entry_id_that_is_not_a_stream_id(
    redis_server: RedisServer, redis: Redis, keys: Keys, tmp_path: Path, entry_id: str
) -> None:
    """An export file's signal ``entryId`` must be a stream id (``<ms>-<seq>``, 64 bits each):
    ``replay --file`` refuses any other, naming the line and the field (``--verify`` passed
    "junk" as the id of a verified signal)."""
    url = redis_server.url
    store = WorkingMemoryStore(redis, keys=keys)
    async with running_workers(url, keys, 1):
        for text in ("# Notes\n- one", "# Notes\n- one\n- two"):
            await store.replace("alice", text)
        await wait_caught_up(redis, keys)
    export = tmp_path / "lane.jsonl"
    code, _, err = await wm(url, keys, "export", "--resource", "alice", "-o", str(export))
    assert code == 0, err
    lines = export.read_text().splitlines()
    assert len(lines) == 2
    record = json.loads(lines[1])
    record["entryId"] = entry_id
    export.write_text(lines[0] + "\n" + json.dumps(record) + "\n")
    for extra in ((), ("--verify",)):
        code, out, err = await wm(url, keys, "replay", "--file", str(export), *extra)
        assert out == ""
        one_line(code, err, f"{export} line 2", "entryId", "not a stream id")


@pytest.mark.parametrize("fields", [{"e": "this is not JSON {"}, {"x": "y"}, {"e": b"\xff\xfe{}"}],
                         ids=["non-JSON", "no e field", "not UTF-8"])
async def test_replay_and_export_of_a_malformed_signal_are_bad_data(
    redis_server: RedisServer, redis: Redis, keys: Keys, fields: dict[str, str | bytes]
) -> None:
    """A signal-stream entry that is not a signal is malformed data read from Redis: ``replay``
    and ``export`` exit 2 naming the entry (they exited 1, the code of other errors), as the
    README says of malformed data; ``replay --verify`` still answers its check with exit 1
    ("verify failed"), as ``diff`` answers 1 for "different"."""
    entry_id = await redis.xadd(keys.signals("r:junk"), fields)
    for command in (("replay",), ("replay", "--json"), ("replay", "--at", "1"), ("export", "-o", "-")):
        code, out, err = await wm(redis_server.url, keys, *command, "--resource", "junk")
        assert out == "", command
        one_line(code, err, entry_id, "malformed")
    code, out, err = await wm(redis_server.url, keys, "replay", "--resource", "junk", "--verify")
    assert code == 1 and out == "" and err.startswith("wm-signals: verify failed:") and entry_id in err, err
