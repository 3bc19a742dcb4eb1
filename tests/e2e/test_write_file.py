"""``wm-signals write --file PATH`` (``-``: stdin) writes a real document (issue 11).

``--markdown "# Alice\\n- likes tea"`` in a shell passes a backslash and an ``n``, not a
newline; a file, a heredoc on stdin or ``$'...'`` is how a user writes a document with
lines. Each command runs as a user runs it (``python -m workers ...`` in a subprocess).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from signals.streams.keys import Keys
from workers.runtime.embedded import RedisServer

pytestmark = pytest.mark.redis
ROOT = Path(__file__).parents[2]
PROFILE = "# Alice\n- likes tea\n- lives in Lyon\n"


def wm(server: RedisServer, keys: Keys, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``wm-signals args`` against the test namespace (stdout and stderr as text)."""
    proc = subprocess.run(
        [sys.executable, "-m", "workers", *args, "--redis-url", server.url, "--namespace", keys.namespace,
         "--partitions", str(keys.partitions)], cwd=ROOT, input=stdin, capture_output=True, timeout=120, check=False)
    return subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(), proc.stderr.decode())


def test_write_file_stores_the_document_with_its_lines(redis_server: RedisServer, keys: Keys,
                                                      tmp_path: Path) -> None:
    """``--file PATH`` replaces the Markdown document with the file's text, newlines and all."""
    path = tmp_path / "alice.md"
    path.write_text(PROFILE, encoding="utf-8")
    proc = wm(redis_server, keys, "write", "--resource", "alice", "--file", str(path))
    assert (proc.returncode, proc.stdout) == (0, "1\n"), proc.stderr
    got = wm(redis_server, keys, "get", "--resource", "alice", "--json")
    assert json.loads(got.stdout)["data"] == PROFILE


def test_write_file_dash_reads_stdin(redis_server: RedisServer, keys: Keys) -> None:
    """``--file -`` reads the document from stdin (a heredoc, a pipe)."""
    proc = wm(redis_server, keys, "write", "--resource", "alice", "--file", "-", stdin=PROFILE.encode())
    assert (proc.returncode, proc.stdout) == (0, "1\n"), proc.stderr
    got = wm(redis_server, keys, "get", "--resource", "alice")
    assert got.stdout == PROFILE + "\n"


def test_write_file_json_merges(redis_server: RedisServer, keys: Keys, tmp_path: Path) -> None:
    """With ``--json-input`` (or ``--schema``) the file is a JSON object deep-merged into the document."""
    first = tmp_path / "a.json"
    first.write_text('{"trip": {"city": "Kyoto", "days": 4}}', encoding="utf-8")
    assert wm(redis_server, keys, "write", "--thread", "t1", "--resource", "alice", "--scope", "thread",
              "--json-input", "--file", str(first)).stdout == "1\n"
    schema = tmp_path / "schema.json"
    schema.write_text('{"type": "object", "properties": {"trip": {"type": "object"}}}', encoding="utf-8")
    proc = wm(redis_server, keys, "write", "--thread", "t1", "--schema", str(schema), "--file", "-",
              stdin=b'{"trip": {"days": null, "month": "May"}}')
    assert (proc.returncode, proc.stdout) == (0, "2\n"), proc.stderr
    got = wm(redis_server, keys, "get", "--thread", "t1", "--json")
    assert json.loads(json.loads(got.stdout)["data"]) == {"trip": {"city": "Kyoto", "month": "May"}}


def test_write_file_that_is_not_utf8_names_the_file(redis_server: RedisServer, keys: Keys, tmp_path: Path) -> None:
    """A file (or stdin) that is not UTF-8: exit 2, one line naming it; nothing is stored."""
    path = tmp_path / "bad.md"
    path.write_bytes(b"# Notes\n\xff\n")
    for args, stdin, name in ((["--file", str(path)], None, str(path)), (["--file", "-"], b"\xfe", "stdin")):
        proc = wm(redis_server, keys, "write", "--resource", "alice", *args, stdin=stdin)
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
        assert len(proc.stderr.splitlines()) == 1 and name in proc.stderr and "not UTF-8" in proc.stderr
    assert wm(redis_server, keys, "get", "--resource", "alice").returncode == 1


def test_two_sources_at_once_are_refused(redis_server: RedisServer, keys: Keys, tmp_path: Path) -> None:
    """A write takes one source: --file with --markdown is refused."""
    path = tmp_path / "alice.md"
    path.write_text(PROFILE, encoding="utf-8")
    both = wm(redis_server, keys, "write", "--resource", "alice", "--file", str(path), "--markdown", "x")
    assert both.returncode == 2 and "exactly one of" in both.stderr
