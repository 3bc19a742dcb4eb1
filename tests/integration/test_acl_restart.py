"""Under the generated ACL file, a Redis restart with an append-only file keeps the data.

Redis replays the AOF as the default user and checks each transaction's commands against
it at EXEC; scripts' and functions' writes are in the AOF as MULTI/EXEC. With a default
user without permissions (``user default off``), Redis 7.0 dropped every one of them on
load (``-NOPERM ACLs rules changed between the moment the transaction was accumulated
and the EXEC call``): after a restart, every document, tracking and signal written
through the project's scripts was gone, and lanes started again at version 1. The
default user is off (no connection is ever it) and holds every permission.
"""

from __future__ import annotations

import secrets
import subprocess
import time
from pathlib import Path

import pytest

from signals.streams.acl import ROLES, acl_file
from signals.streams.client import connect
from signals.streams.keys import Keys
from signals.streams.scripts import ensure_loaded
from signals.streams.store import WorkingMemoryStore
from tests.ports import free_port

pytestmark = [pytest.mark.anyio, pytest.mark.redis]
PASSWORDS = {role: f"{role}-{secrets.token_hex(4)}" for role in ROLES}
KEYS = Keys("wm", 4)


def _start(directory: Path, port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(directory), "--appendonly", "yes",
         "--appendfsync", "always", "--save", "", "--aclfile", str(directory / "users.acl")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        reply = subprocess.run(["redis-cli", "-p", str(port), "--user", "wm-operator", "--pass",
                                PASSWORDS["operator"], "--no-auth-warning", "ping"],
                               capture_output=True, text=True, check=False)
        if reply.stdout.strip() == "PONG":
            return process
        time.sleep(0.05)
    process.kill()
    raise RuntimeError("redis-server did not start")


async def test_a_restart_keeps_what_the_scripts_wrote(tmp_path: Path) -> None:
    (tmp_path / "users.acl").write_text(acl_file(KEYS, PASSWORDS))
    port = free_port()
    url = f"redis://wm-{{}}:{{}}@127.0.0.1:{port}/0"
    process = _start(tmp_path, port)
    try:
        worker = connect(url.format("worker", PASSWORDS["worker"]))
        await ensure_loaded(worker)
        await worker.aclose()
        writer = connect(url.format("writer", PASSWORDS["writer"]))
        store = WorkingMemoryStore(writer, keys=KEYS)
        for n in range(3):
            assert await store.replace("alice", f"# Alice\n- fact {n}") == n + 1
        await writer.aclose()
        process.terminate()
        process.wait(10)
        process = _start(tmp_path, port)
        reader = connect(url.format("operator", PASSWORDS["operator"]))
        assert await reader.hget(KEYS.doc("r:alice"), "version") == "3"
        await reader.aclose()
    finally:
        process.terminate()
        process.wait(10)
