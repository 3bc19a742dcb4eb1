"""The operator's namespace-wide views against one tenant's junk.

A namespace holds many tenants' lanes; its operator's views (``inspect``, its JSON, the lag)
read every lane. Everything here is written with a *writer's* ACL rights (the users
``deploy acl`` generates, loaded into the test's server for the test's namespace): a
writer sets its documents' fields and adds lane names to its partition's lane set (the
write script's ``HSET`` and ``SADD``, which it may also call directly). One such key made
the whole report exit 2 (a document version ``junk``), or hid other lanes from it (a lane
added to every partition's set filled ``--top``). The promise (DESIGN "Trust boundary"):
a hostile entry affects only its lane; the report names it as bad, with the reason, and
goes on with the others.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from redis.asyncio import Redis

from signals.streams.client import Client
from signals.streams.keys import Keys
from signals.streams.progress import lagging_lanes, wait_caught_up
from signals.streams.status import inspect
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import running_workers
from tests.trust_boundary.support import PASSWORDS
from workers.cli.app import main as cli_main
from workers.runtime.embedded import RedisServer

pytestmark = [pytest.mark.anyio, pytest.mark.redis]



def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = cli_main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


async def _inspect_cli(capsys: pytest.CaptureFixture[str], server: RedisServer, keys: Keys,
                       *args: str) -> tuple[int, str, str]:
    """``wm-signals inspect`` as the operator role (the CLI runs its own event loop)."""
    url = f"redis://{keys.namespace}-operator:{PASSWORDS['operator']}@127.0.0.1:{server.port}/0"
    flags = ["--redis-url", url, "--namespace", keys.namespace, "--partitions", str(keys.partitions)]
    return await anyio.to_thread.run_sync(lambda: _cli(capsys, "inspect", *flags, *args))


async def _two_lanes(redis: Redis, keys: Keys) -> None:
    store = WorkingMemoryStore(redis, keys=keys)
    await store.replace("alice", "# Alice\n- tea")
    await store.replace("bob", "# Bob\n- coffee")
    await store.replace("bob", "# Bob\n- coffee\n- cake")


async def test_a_document_version_set_to_junk_is_one_bad_lane_in_a_whole_report(
    redis_server: RedisServer, redis: Redis, keys: Keys, as_role: Callable[[str], Client],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The finding: one writer's ``HSET doc version junk`` made ``inspect`` (and ``--json``)
    exit 2 with nothing but that key's name; now the report is whole, the lane is named as
    bad with its reason and counted, and the exit code is still 2 (malformed data in Redis)."""
    await _two_lanes(redis, keys)
    await as_role("writer").hset(keys.doc("r:alice"), "version", "junk")

    report = await inspect(as_role("operator"), keys)
    alice = keys.partition("r:alice")
    assert [(b.partition, b.lane, b.reason) for b in report.bad_lanes] == [
        (alice, "r:alice", f"{keys.doc('r:alice')} field version is 'junk', not an integer within 0..2**53")]
    assert report.busiest == (("r:bob", 2),)
    assert report.totals["bad"] == 1 and report.partitions[alice].bad == 1
    assert report.totals["lag"] == 1  # bob: written, no worker ran; alice is not counted

    code, out, err = await _inspect_cli(capsys, redis_server, keys)
    assert code == 2 and len(err.splitlines()) == 1 and err.startswith("wm-signals: 1 bad lane"), err
    assert "Traceback" not in err and "r:bob (2)" in out
    assert f"partition {alice}: r:alice: {keys.doc('r:alice')} field version is 'junk'" in out

    code, out, err = await _inspect_cli(capsys, redis_server, keys, "--json")
    assert code == 2 and len(err.splitlines()) == 1, err
    body = json.loads(out)
    assert body["busiest"] == [["r:bob", 2]] and body["totals"]["bad"] == 1
    assert [(b["partition"], b["lane"]) for b in body["badLanes"]] == [(alice, "r:alice")]
    assert "version is 'junk'" in body["badLanes"][0]["reason"]


async def test_lane_set_members_that_are_no_lane_of_their_partition_are_bad_lanes(
    redis_server: RedisServer, redis: Redis, keys: Keys, as_role: Callable[[str], Client],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A writer may ``SADD`` anything to a lane set: bytes that are not UTF-8 made ``inspect``
    exit 2 (UnicodeEncodeError building the key), a 1 MiB name was printed whole among the
    busiest lanes, and a genuine lane added to every partition's set was counted once per
    partition, filling ``--top`` with copies of itself and hiding the others' lanes."""
    await _two_lanes(redis, keys)
    writer = as_role("writer")
    await writer.sadd(keys.lanes(0), b"r:\xff\xfe")
    await writer.sadd(keys.lanes(0), "r:" + "x" * (1 << 20))
    await writer.sadd(keys.lanes(1), "r:a}{b")
    await writer.hset(keys.doc("r:alice"), "version", "900")  # the busiest lane, at once
    for p in range(keys.partitions):
        await writer.sadd(keys.lanes(p), "r:alice")

    report = await inspect(as_role("operator"), keys, top=2)
    assert report.busiest == (("r:alice", 900), ("r:bob", 2))
    copies = keys.partitions - 1
    assert report.totals["bad"] == 3 + copies and report.totals["lag"] == 2
    reasons = {(b.partition, b.lane): b.reason for b in report.bad_lanes}
    assert reasons[(0, "r:\\xff\\xfe")].startswith("not a lane name")
    assert reasons[(1, "r:a}{b")].startswith("not a lane name")
    assert reasons[(0, "r:" + "x" * 78 + f"… ({(1 << 20) + 2:,} characters)")].startswith("not a lane name")
    home = keys.partition("r:alice")
    assert all(reasons[(p, "r:alice")].startswith(f"a lane of partition {home}, not of this one")
               for p in range(keys.partitions) if p != home)

    code, out, err = await _inspect_cli(capsys, redis_server, keys, "--top", "2")
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "busiest lanes (writes): r:alice (900), r:bob (2)" in out and "x" * 100 not in out
    assert f"bad lanes ({3 + copies}, " in out and "r:\\xff\\xfe" in out


async def test_the_lag_leaves_bad_lanes_out_instead_of_failing(
    redis: Redis, keys: Keys, as_role: Callable[[str], Client],
) -> None:
    """``lagging_lanes`` (and so ``wait_caught_up``, which agent loops and the demo call on a
    whole namespace) raised for one lane's junk version or one junk lane name."""
    await _two_lanes(redis, keys)
    writer = as_role("writer")
    await writer.hset(keys.doc("r:alice"), "version", "junk")
    await writer.sadd(keys.lanes(0), b"r:\xff")
    assert await lagging_lanes(as_role("operator"), keys) == {"r:bob": (2, 0)}


async def test_one_partitions_flood_of_dead_letters_hides_no_other_partitions(
    redis_server: RedisServer, redis: Redis, keys: Keys, as_role: Callable[[str], Client],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``dlq list`` showed the first 1000 dead letters of the whole namespace, partition by
    partition, and said nothing of the rest: a writer's 1001 junk events in partition 0 (each
    dead-lettered at once) hid another tenant's dead letter in partition 2. Now each
    partition lists its oldest 1000, and a partition holding more says how many more."""
    writer = as_role("writer")
    async with running_workers(redis_server.url, keys, 1):
        for n in range(1001):
            await writer.xadd(keys.writes(0), {"junk": str(n)})
        await writer.xadd(keys.writes(2), {"junk": "another tenant's"})
        with anyio.fail_after(60):
            while [await redis.xlen(keys.dead_letters(p)) for p in (0, 2)] != [1001, 1]:
                await anyio.sleep(0.05)
    url = f"redis://{keys.namespace}-operator:{PASSWORDS['operator']}@127.0.0.1:{redis_server.port}/0"
    flags = ["--redis-url", url, "--namespace", keys.namespace, "--partitions", str(keys.partitions)]
    code, out, err = await anyio.to_thread.run_sync(lambda: _cli(capsys, "dlq", "list", *flags))
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert sum("  partition 0  " in line for line in lines) == 1000
    assert sum("  partition 2  " in line for line in lines) == 1
    assert "partition 0: 1 more dead letters not listed (the list shows the oldest 1000 of each partition)" in lines


async def test_a_junk_delivery_record_leaves_a_thread_lanes_signals_exportable(
    redis_server: RedisServer, redis: Redis, keys: Keys, as_role: Callable[[str], Client],
    capsys: pytest.CaptureFixture[str], tmp_path: Path,
) -> None:
    """Any agent user may append to any thread's delivery log (``acl.py``); one junk record
    there made ``export --thread T`` refuse the whole export, and nothing exported the thread
    lane's signals without its log. The refusal stays (no file missing records that reads as
    whole) and says how to go on; ``--no-deliveries`` exports the signals alone."""
    store = WorkingMemoryStore(redis, keys=keys)
    await store.create_thread("t1", "alice")
    async with running_workers(redis_server.url, keys, 1):
        await store.replace("alice", "# Thread notes", thread_id="t1", scope="thread")
        await wait_caught_up(redis, keys)
    await as_role("agent").xadd(keys.deliveries("t1"), {"e": b"\xff junk"})
    url = f"redis://{keys.namespace}-operator:{PASSWORDS['operator']}@127.0.0.1:{redis_server.port}/0"
    flags = ["--redis-url", url, "--namespace", keys.namespace, "--partitions", str(keys.partitions)]
    out_file = tmp_path / "lane.jsonl"

    code, out, err = await anyio.to_thread.run_sync(
        lambda: _cli(capsys, "export", *flags, "--thread", "t1", "-o", str(out_file)))
    assert code == 2 and len(err.splitlines()) == 1 and keys.deliveries("t1") in err and "--no-deliveries" in err
    assert not out_file.exists()

    code, out, err = await anyio.to_thread.run_sync(
        lambda: _cli(capsys, "export", *flags, "--thread", "t1", "--no-deliveries", "-o", str(out_file)))
    assert (code, err) == (0, "") and "exported 1 signals and 0 deliveries" in out
    code, out, err = await anyio.to_thread.run_sync(lambda: _cli(capsys, "replay", "--file", str(out_file), "--verify"))
    assert (code, err) == (0, "") and "verified 1 signals" in out


async def test_a_lane_set_larger_than_the_scan_says_its_figures_are_partial(
    redis_server: RedisServer, redis: Redis, keys: Keys, as_role: Callable[[str], Client],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``inspect`` reads about 10,000 lanes per partition (a bounded report on millions of
    lanes) and said nothing of the rest: lag, bad and busiest lanes over a part of a lane
    set read as the whole namespace's. A partition read in part now says how much was read,
    in the table's notes and in ``--json`` (``scanned``; ``null`` when every lane was)."""
    writer = as_role("writer")
    await writer.sadd(keys.lanes(0), *(f"r:junk{n}" for n in range(2500)))  # bad lanes (not of partition 0) too
    await _two_lanes(redis, keys)

    report = await inspect(as_role("operator"), keys, scan=1000)
    assert report.partitions[0].lanes >= 2500
    assert report.partitions[0].scanned is not None and report.partitions[0].scanned < report.partitions[0].lanes
    assert all(p.scanned is None for p in report.partitions[1:] if p.lanes < 1000)
    assert (await inspect(as_role("operator"), keys)).partitions[0].scanned is None  # the default reads them all

    code, out, err = await _inspect_cli(capsys, redis_server, keys, "--scan", "1000")
    assert "Traceback" not in err
    lanes = report.partitions[0].lanes
    assert "partition 0: lagging, bad and busiest lanes read from " in out and f"of its {lanes:,} lanes" in out
    assert code == 2  # the junk names are bad lanes
    code, out, err = await _inspect_cli(capsys, redis_server, keys, "--scan", "1000", "--json")
    assert code == 2
    body = json.loads(out)
    assert 1000 <= body["partitions"][0]["scanned"] < lanes
    _, out, err = await _inspect_cli(capsys, redis_server, keys, "--json")
    assert json.loads(out)["partitions"][0]["scanned"] is None and "read from" not in out

    for bad in ("0", "-1", "1e3", "\uff11\uff10"):  # fullwidth digits
        with pytest.raises(SystemExit) as exit_info:
            await _inspect_cli(capsys, redis_server, keys, "--scan", bad)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and "--scan takes a number of lanes (1 to" in err, (bad, err)


async def test_a_partition_key_of_another_type_costs_the_report_nothing_else(
    redis_server: RedisServer, redis: Redis, keys: Keys, as_role: Callable[[str], Client],
    capsys: pytest.CaptureFixture[str],
) -> None:
    """One partition's dead-letter stream or lane set of another type (a string) made
    ``inspect`` exit 2 with Redis's WRONGTYPE, naming no key and printing no report; a
    consumer name that is not UTF-8 made ``inspect --json`` fail to encode. Now the
    report is whole: the key is named as a problem of its partition (its figures read 0),
    the name is shown escaped, and the exit code is 2 once everything is out."""
    await _two_lanes(redis, keys)
    await redis.set(keys.dead_letters(0), "junk")
    await redis.delete(keys.lanes(1))
    await redis.set(keys.lanes(1), "junk")
    stream = keys.writes(2)
    await redis.xgroup_create(stream, "wm-workers", id="0", mkstream=True)
    await redis.xadd(stream, {"junk": "1"})
    await redis.xreadgroup("wm-workers", b"\xff\xfebad", {stream: ">"}, count=1)  # a consumer of that name

    report = await inspect(as_role("operator"), keys)
    assert report.partitions[0].problems == (f"{keys.dead_letters(0)} is not a stream: its figures read 0 "
                                             "(an operator must delete or repair it)",)
    assert report.partitions[1].problems[0].startswith(f"{keys.lanes(1)} is not a set")
    assert report.partitions[1].lanes == 0 and not report.partitions[2].problems
    assert ("r:bob", 2) in report.busiest or keys.partition("r:bob") == 1

    code, out, err = await _inspect_cli(capsys, redis_server, keys)
    assert code == 2 and len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert "2 partition key(s) of another type" in err and keys.dead_letters(0) in err
    assert f"partition 1: {keys.lanes(1)} is not a set" in out and "namespace" in out
    code, out, err = await _inspect_cli(capsys, redis_server, keys, "--json")
    assert code == 2 and len(err.splitlines()) == 1, err
    body = json.loads(out)
    assert body["partitions"][0]["problems"][0].startswith(keys.dead_letters(0))
    assert {c["name"] for c in body["partitions"][2]["consumers"]} >= {"\\xff\\xfebad"}
