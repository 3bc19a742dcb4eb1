"""The MCP server's pure parts: URIs, the tokens file, the process configuration (no Redis)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import anyio
import pytest
import structlog
import structlog.testing

from signals.errors import InvalidInputError
from workers.mcp.run import McpConfig
from workers.mcp.tokens import TokenFileVerifier, load_tokens
from workers.mcp.uris import Target, lane_uris, parse, uri_of


@pytest.mark.parametrize(("uri", "target"), [
    ("wm://resource/alice", Target("resource", "alice")),
    ("wm://resource/alice/version", Target("resource", "alice", "version")),
    ("wm://thread/chat%2F7", Target("thread", "chat/7")),
    ("wm://thread/%E2%9C%93%20ok/version", Target("thread", "\u2713 ok", "version")),
])
def test_uris_parse_to_their_lane(uri: str, target: Target) -> None:
    """Ids are percent-encoded; a parsed URI formats back to the same canonical URI."""
    assert parse(uri) == target
    assert target.uri == uri


@pytest.mark.parametrize("uri", ["wm://resource", "wm:/resource/a", "wm://resource/a/b", "wm://resource/a#x",
                                 "wm://team/a", "wm://resource/%7Bp0%7D", "WM://resource/a", 7])
def test_malformed_uris_are_refused(uri: object) -> None:
    """Anything but the four templates with a valid id is bad input, with a message."""
    with pytest.raises(InvalidInputError):
        parse(uri)


def test_a_lane_updates_its_document_and_version_uris() -> None:
    """A signal of a lane notifies both of its URIs, ids encoded."""
    assert lane_uris("t:a b") == ("wm://thread/a%20b", "wm://thread/a%20b/version")
    assert uri_of("resource", "x", "version") == "wm://resource/x/version"


def test_tokens_file_plain_and_hashed(tmp_path: Path) -> None:
    """A token or the SHA-256 of one names a resource; anything else verifies to nothing."""
    hashed = hashlib.sha256(b"secret-for-bob-1234").hexdigest()
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"secret-for-alice-123": "alice", f"sha256:{hashed}": "bob"}))
    verifier = TokenFileVerifier(str(path))

    async def check() -> None:
        alice = await verifier.verify_token("secret-for-alice-123")
        bob = await verifier.verify_token("secret-for-bob-1234")
        assert alice is not None and alice.subject == "alice"
        assert bob is not None and bob.subject == "bob"
        assert await verifier.verify_token("secret-for-alice-12") is None
        assert await verifier.verify_token(f"sha256:{hashed}") is None, "the hash is not the token"

    anyio.run(check)


@pytest.mark.parametrize(("content", "needle"), [
    ("[]", "non-empty JSON object"), ("{}", "non-empty JSON object"), ("{", "not valid JSON"),
    ('{"short": "alice"}', "at least 16"), ('{"sha256:abc": "alice"}', "64 lowercase hex"),
    ('{"0123456789abcdefXYZ": "a{b}"}', "resource id"), ('{"0123456789abcdefXYZ": 5}', "resource id"),
])
def test_a_bad_tokens_file_is_refused_naming_what_is_wrong(tmp_path: Path, content: str, needle: str) -> None:
    path = tmp_path / "t.json"
    path.write_text(content)
    with pytest.raises(InvalidInputError, match=needle):
        load_tokens(str(path))


def test_a_missing_tokens_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInputError, match="--tokens-file"):
        load_tokens(str(tmp_path / "nope.json"))


@pytest.mark.parametrize(("config", "needle"), [
    (McpConfig("stdio"), "needs --resource"),
    (McpConfig("stdio", resource="a", tokens_file="t"), "for --transport http"),
    (McpConfig("http"), "needs --tokens-file"),
    (McpConfig("http", tokens_file="t", resource="a"), "for --transport stdio"),
    (McpConfig("http", tokens_file="t", port=0), "TCP port"),
])
def test_flags_that_cannot_run_together_are_refused(config: McpConfig, needle: str) -> None:
    with pytest.raises(InvalidInputError, match=needle):
        config.check()


def test_a_changed_tokens_file_takes_effect_and_a_broken_or_missing_one_fails_closed(tmp_path: Path) -> None:
    """A token revoked or added in the file takes effect at the next request after the
    check interval, however the file's timestamps move; a file that breaks a rule or is
    removed refuses every token until it is valid again (revocation never fails open),
    and the error is logged once per change."""
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"secret-for-alice-123": "alice"}))
    verifier = TokenFileVerifier(str(path), check_every_s=0)
    stamp = path.stat()

    async def check() -> None:
        assert await verifier.verify_token("secret-for-alice-123") is not None
        path.write_text(json.dumps({"secret-for-carol-123": "carol"}))  # the same size
        os.utime(path, ns=(stamp.st_atime_ns, stamp.st_mtime_ns))  # and the same timestamps
        assert await verifier.verify_token("secret-for-alice-123") is None, "revoked"
        carol = await verifier.verify_token("secret-for-carol-123")
        assert carol is not None and carol.subject == "carol"
        with structlog.testing.capture_logs() as logs:
            path.write_text('{"short": "alice"}')
            assert await verifier.verify_token("secret-for-carol-123") is None, "a broken file fails closed"
            assert await verifier.verify_token("secret-for-carol-123") is None
            path.unlink()
            assert await verifier.verify_token("secret-for-carol-123") is None, "so does a missing one"
            assert await verifier.verify_token("secret-for-carol-123") is None
        failed = [e for e in logs if e["event"] == "mcp.tokens_reload_failed"]
        assert len(failed) == 2 and "at least 16" in failed[0]["error"], logs
        path.write_text(json.dumps({"secret-for-carol-123": "carol"}))
        assert await verifier.verify_token("secret-for-carol-123") is not None, "valid again"

    anyio.run(check)
