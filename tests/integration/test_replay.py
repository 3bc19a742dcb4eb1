"""Replay, verify, export and dead letters against real Redis (CLI in-process)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import anyio
import msgspec
import pytest

from signals.core.codec import FIELD, encode_json
from signals.core.models import Attributes, Signal, WriteEvent
from signals.errors import VerifyError
from signals.streams.client import connect
from signals.streams.deadletters import DeadLetters
from signals.streams.keys import Keys
from signals.streams.replay import materialise, read_signals
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import running_workers, wait_caught_up
from workers.cli.app import main
from workers.runtime.embedded import RedisServer

pytestmark = pytest.mark.redis


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


async def _history(url: str, keys: Keys, writes: int) -> dict[int, str]:
    """Random edits on one lane; returns document text by write version."""
    rng = random.Random(5)
    redis = connect(url)
    store = WorkingMemoryStore(redis, keys=keys)
    lines = [f"- item {i}: some remembered fact" for i in range(12)]
    texts: dict[int, str] = {}
    async with running_workers(url, keys, 1, snapshot_every=7):
        for _ in range(writes):
            if rng.random() < 0.7:
                lines[rng.randrange(len(lines))] = f"- item {rng.randint(0, 999)}: changed"
            else:
                lines.append(f"- extra {rng.randint(0, 99)}")
            text = "# Profile\n" + "\n".join(lines)
            texts[await store.replace("u", text)] = text
        await wait_caught_up(redis, keys)
    await redis.aclose()
    return texts


def _flags(server: RedisServer, keys: Keys) -> list[str]:
    return ["--redis-url", server.url, "--namespace", keys.namespace, "--partitions", str(keys.partitions)]


def test_replay_at_reproduces_every_version(redis_server: RedisServer, keys: Keys,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """``replay --at V`` prints the stored document of the write behind every signal version."""
    texts = anyio.run(_history, redis_server.url, keys, 40)
    code, out, _ = _cli(capsys, "replay", *_flags(redis_server, keys), "--resource", "u", "--json")
    assert code == 0
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["version"] for r in records] == list(range(1, len(records) + 1))
    assert any(r["mode"] == "delta" for r in records) and any(r["mode"] == "snapshot" for r in records[1:])
    for record in records:
        assert record["value"] == texts[record["writeVersion"]]
        code, out, _ = _cli(capsys, "replay", *_flags(redis_server, keys), "--resource", "u",
                            "--at", str(record["version"]))
        assert code == 0 and out == texts[record["writeVersion"]] + "\n"
    code, out, _ = _cli(capsys, "replay", *_flags(redis_server, keys), "--resource", "u", "--verify")
    assert code == 0 and f"verified {len(records)} signals" in out
    code, out, _ = _cli(capsys, "replay", *_flags(redis_server, keys), "--resource", "u", "--json",
                        "--from", "3", "--to", "5")
    assert [json.loads(line)["version"] for line in out.splitlines()] == [3, 4, 5]


def test_export_round_trip_and_verify_finds_corruption(redis_server: RedisServer, keys: Keys, tmp_path: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """export -> replay --file works offline; a corrupted delta or cacheKey fails --verify, naming the entry."""
    anyio.run(_history, redis_server.url, keys, 15)
    path = tmp_path / "lane.jsonl"
    code, out, _ = _cli(capsys, "export", *_flags(redis_server, keys), "--resource", "u", "-o", str(path))
    assert code == 0 and "exported" in out
    code, online, _ = _cli(capsys, "replay", *_flags(redis_server, keys), "--resource", "u", "--json")
    code2, offline, _ = _cli(capsys, "replay", "--file", str(path), "--json")
    assert code == code2 == 0 and online == offline
    lines = path.read_text().splitlines()
    delta_line = next(i for i, line in enumerate(lines) if '"mode":"delta"' in line)

    for corrupt, message in [
        (lambda r: r["signal"].update(contents=r["signal"]["contents"] + "#"),  # an added line altered
         "cacheKey does not match"),
        (lambda r: r["signal"].update(cacheKey="sha256:" + "0" * 64), "cacheKey does not match"),
        (lambda r: r["signal"].update(contents="@@ -900,1 +900,1 @@\n-x\n+y"), "does not apply"),
    ]:
        record = json.loads(lines[delta_line])
        corrupt(record)
        bad = tmp_path / "bad.jsonl"
        bad.write_text("\n".join([*lines[:delta_line], json.dumps(record), *lines[delta_line + 1:]]) + "\n")
        code, _, err = _cli(capsys, "replay", "--file", str(bad), "--verify")
        assert code == 1
        assert record["entryId"] in err and message in err


def test_export_of_a_lane_with_nothing_retained_is_refused_and_writes_no_file(
    redis_server: RedisServer, keys: Keys, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A lane that names nothing (a mistyped id, another namespace) is exit 2 naming what to
    check, as replay is, and the output file is neither created nor truncated; it used to
    be exit 0 with an empty file that read as a lane with no history."""
    path, kept = tmp_path / "new.jsonl", tmp_path / "kept.jsonl"
    kept.write_text("an earlier export\n")
    for target in (path, kept):
        code, out, err = _cli(capsys, "export", *_flags(redis_server, keys), "--resource", "nobody",
                              "-o", str(target))
        assert code == 2 and out == ""
        assert "nothing to export" in err and "--namespace" in err
    assert not path.exists() and kept.read_text() == "an earlier export\n"
    code, _, err = _cli(capsys, "export", *_flags(redis_server, keys), "--thread", "nothread", "-o", "-")
    assert code == 2 and "nothing to export" in err
    code, _, err = _cli(capsys, "get", *_flags(redis_server, keys), "--resource", "nobody")
    assert code == 1 and "--namespace" in err


def test_materialise_rejects_a_delta_without_snapshot() -> None:
    """A chain that starts with a delta cannot be rebuilt."""
    delta = Signal(id="working-memory", mode="delta", cache_key="sha256:x", tag_name="working-memory",
                   contents="@@ -1,1 +1,1 @@\n-a\n+b", attributes=Attributes(format="markdown", scope="resource",
                                                                            patch="unified-diff"),
                   version=1, lane="r:u")
    with pytest.raises(VerifyError, match="no snapshot before it"):
        list(materialise([("1-0", delta)]))


async def _dead_letter_then_requeue(url: str, keys: Keys) -> tuple[int, list[str]]:
    redis = connect(url)
    event = WriteEvent(lane="r:ghost", scope="resource", format="markdown", version=1,
                       data="# Ghost\n- restored from backup", op="replace", resource_id="ghost")
    p = keys.partition("r:ghost")
    await redis.xadd(keys.writes(p), {FIELD: encode_json(event)})
    async with running_workers(url, keys, 1):
        with anyio.fail_after(10):
            while not await redis.xlen(keys.dead_letters(p)):
                await anyio.sleep(0.05)
        # the operator restores the document, then requeues the event
        await redis.hset(keys.doc("r:ghost"), mapping={"data": event.data, "version": 1, "format": "markdown"})
        await redis.sadd(keys.lanes(p), "r:ghost")
        dlq = DeadLetters(redis, keys)
        (entry,) = await dlq.list()
        assert "unknown lane" in entry.letter.error
        await dlq.requeue(entry.id)
        errors = []
        try:
            await dlq.requeue(entry.id)
        except Exception as e:  # noqa: BLE001 - the message is what we check
            errors.append(str(e))
        await wait_caught_up(redis, keys)
    signals = await read_signals(redis, keys, "r:ghost")
    await redis.aclose()
    return len(signals), errors


def test_dead_letter_requeue_is_processed_once(redis_server: RedisServer, keys: Keys) -> None:
    """A requeued dead letter is processed once; requeueing it again is refused."""
    count, errors = anyio.run(_dead_letter_then_requeue, redis_server.url, keys)
    assert count == 1
    assert len(errors) == 1 and "no dead letter" in errors[0]


@pytest.mark.anyio
async def test_a_requeued_genuine_write_gets_its_lane_signalled(redis_server: RedisServer, keys: Keys) -> None:
    """A genuine write dead-lettered for a fault of its lane (a thread record of another
    type), then requeued once the operator repaired the record, gets the lane signalled at
    its document's version. The requeued copy has a new id, so it is not on the lane's chain
    of writes: it used to be dead-lettered again as a forgery, and the lane kept no signal."""
    redis = connect(redis_server.url)
    store = WorkingMemoryStore(redis, keys=keys)
    await store.replace("bob", "# Plan\n- v1", thread_id="t1", scope="thread")
    record = await redis.hgetall(keys.thread("t1"))
    await redis.delete(keys.thread("t1"))
    await redis.set(keys.thread("t1"), "junk")
    dlq = DeadLetters(redis, keys)
    async with running_workers(redis_server.url, keys, 1):
        with anyio.fail_after(10):
            while not await dlq.list():
                await anyio.sleep(0.05)
        await redis.delete(keys.thread("t1"))
        await redis.hset(keys.thread("t1"), mapping=record)
        (entry,) = await dlq.list()
        await dlq.requeue(entry.id)
        await wait_caught_up(redis, keys)
    signals = await read_signals(redis, keys, "t:t1")
    assert await dlq.list() == []
    assert [(s.version, s.mode, s.value) for _, s in signals] == [(1, "snapshot", "# Plan\n- v1")]
    await redis.aclose()


def test_dlq_cli_lists_and_drops(redis_server: RedisServer, keys: Keys, capsys: pytest.CaptureFixture[str]) -> None:
    """``dlq list`` shows a poison event with its reason; ``dlq drop`` removes it."""

    async def poison() -> None:
        redis = connect(redis_server.url)
        await redis.xadd(keys.writes(0), {FIELD: "{broken"})
        async with running_workers(redis_server.url, keys, 1):
            with anyio.fail_after(10):
                while not await redis.xlen(keys.dead_letters(0)):
                    await anyio.sleep(0.05)
        await redis.aclose()

    anyio.run(poison)
    code, out, _ = _cli(capsys, "dlq", *_flags(redis_server, keys), "list")
    assert code == 0 and "poison" in out
    dead_id = out.split()[0]
    code, out, _ = _cli(capsys, "dlq", *_flags(redis_server, keys), "show", dead_id)
    assert code == 0 and msgspec.json.decode(out)["fields"] == {FIELD: "{broken"}
    # options between the action and the id (argparse had left the id's place empty: exit 2)
    code, again, _ = _cli(capsys, "dlq", "show", *_flags(redis_server, keys), dead_id)
    assert (code, again) == (0, out)
    with pytest.raises(SystemExit) as usage:  # anything more is still a usage error
        main(["dlq", "show", *_flags(redis_server, keys), dead_id, "extra"])
    err = capsys.readouterr().err
    assert usage.value.code == 2 and "unrecognized arguments" in err and "extra" in err
    assert _cli(capsys, "dlq", *_flags(redis_server, keys), "drop", dead_id)[0] == 0
    code, out, _ = _cli(capsys, "dlq", *_flags(redis_server, keys), "list")
    assert code == 0 and out == f"no dead letters in namespace {keys.namespace!r}\n"
    code, _, err = _cli(capsys, "dlq", *_flags(redis_server, keys), "requeue", dead_id)
    assert code == 2 and "no dead letter" in err


def test_dlq_list_shows_entries_that_are_not_dead_letters(redis_server: RedisServer, keys: Keys,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    """An entry of a dead-letter stream that does not decode is listed with its id and what
    is wrong (it was left out, so the id ``dlq drop`` needs was never shown), and drops."""

    async def junk() -> str:
        redis = connect(redis_server.url)
        entry_id = str(await redis.xadd(keys.dead_letters(1), {"x": "not a dead letter"}))
        await redis.aclose()
        return entry_id

    entry_id = anyio.run(junk)
    code, out, _ = _cli(capsys, "dlq", *_flags(redis_server, keys), "list")
    assert code == 0 and out.startswith(f"{entry_id}  partition 1  not a dead letter: no {FIELD} field")
    assert _cli(capsys, "dlq", *_flags(redis_server, keys), "drop", entry_id)[0] == 0
    empty = f"no dead letters in namespace {keys.namespace!r}\n"
    assert _cli(capsys, "dlq", *_flags(redis_server, keys), "list")[1] == empty


def test_dlq_ids_that_two_partitions_share_need_the_partition(redis_server: RedisServer, keys: Keys,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    """Dead letters of two partitions made in the same millisecond share an id: ``show``,
    ``requeue`` and ``drop`` took the lowest partition's (a writer's junk there got dropped
    in place of the letter asked for). Such an id now needs ``--partition``; with it, each
    command reaches that partition's letter alone."""

    async def two() -> str:
        redis = connect(redis_server.url)
        entry_id = str(await redis.xadd(keys.dead_letters(1), {"x": "junk in partition 1"}))
        await redis.xadd(keys.dead_letters(3), {FIELD: "genuine?"}, id=entry_id)
        await redis.aclose()
        return entry_id

    entry_id = anyio.run(two)
    flags = _flags(redis_server, keys)
    for action in ("show", "requeue", "drop"):
        code, out, err = _cli(capsys, "dlq", *flags, action, entry_id)
        assert (code, out) == (2, "") and "is in partitions 1, 3" in err and "--partition" in err, action
    assert _cli(capsys, "dlq", *flags, "drop", entry_id, "--partition", "1")[0] == 0
    code, out, _ = _cli(capsys, "dlq", *flags, "list")
    assert code == 0 and out.startswith(f"{entry_id}  partition 3") and out.count("\n") == 1
    code, _, err = _cli(capsys, "dlq", *flags, "show", entry_id, "--partition", "1")
    assert code == 2 and "in partition 1" in err
    code, _, err = _cli(capsys, "dlq", *flags, "show", entry_id, "--partition", str(keys.partitions))
    assert code == 2 and "partition is 0 to" in err
    assert _cli(capsys, "dlq", *flags, "drop", entry_id)[0] == 0  # one partition holds it now
    assert _cli(capsys, "dlq", *flags, "list")[1] == f"no dead letters in namespace {keys.namespace!r}\n"


def test_dlq_list_names_a_dead_letter_stream_of_another_type(redis_server: RedisServer, keys: Keys,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    """A dead-letter stream key holding a string: ``dlq list`` is corrupt data naming the
    key, exit 2 (it reported a bare WRONGTYPE without saying which key), as ``show`` was."""

    async def mistype() -> None:
        redis = connect(redis_server.url)
        await redis.set(keys.dead_letters(1), "junk")
        await redis.aclose()

    anyio.run(mistype)
    code, out, err = _cli(capsys, "dlq", *_flags(redis_server, keys), "list")
    assert (code, out) == (2, "") and f"{keys.dead_letters(1)} is not a stream" in err


def test_inspect_reports_partitions(redis_server: RedisServer, keys: Keys, capsys: pytest.CaptureFixture[str]) -> None:
    """``inspect --json`` reports lanes, lag and consumers per partition."""
    anyio.run(_history, redis_server.url, keys, 5)
    code, out, _ = _cli(capsys, "inspect", *_flags(redis_server, keys), "--json")
    report = json.loads(out)
    assert code == 0 and report["totals"]["lanes"] == 1 and report["totals"]["lag"] == 0
    assert report["busiest"] == [["r:u", 5]]
    # the worker stopped gracefully: it left the groups, holding nothing (listed before, forever)
    assert all("consumers" in p for p in report["partitions"])
    assert not any(c["name"] == "w0" for p in report["partitions"] for c in p["consumers"])
