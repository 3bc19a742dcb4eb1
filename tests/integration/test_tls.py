"""TLS as a setting (issue 10, finding 12): a TLS-only redis-server requiring client certificates.

The certificates are made with the ``openssl`` command for each run: a CA, a server
certificate for 127.0.0.1 signed by it, a client certificate signed by it, and a second,
unrelated CA (the "wrong CA"). Every command runs as a user runs it, with the TLS flags.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest

from signals.streams.client import connect
from signals.streams.keys import Keys
from signals.streams.progress import wait_caught_up
from signals.streams.urls import TLSOptions
from workers.runtime.embedded import RedisServer
from workers.runtime.settings import Settings

from .helpers import spawn_worker, wait_ready

pytestmark = [pytest.mark.anyio, pytest.mark.redis,
              pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")]
ROOT = Path(__file__).parents[2]


@dataclass(frozen=True)
class PKI:
    """The files of one test run's certificates."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    other_ca: Path


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True, timeout=60)


def _ca(directory: Path, name: str) -> tuple[Path, Path]:
    cert, key = directory / f"{name}.crt", directory / f"{name}.key"
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", key, "-out", cert, "-days", "2", "-subj", f"/CN=wm-signals test {name}")
    return cert, key


def _signed(directory: Path, name: str, ca: tuple[Path, Path], extensions: str) -> tuple[Path, Path]:
    cert, key, csr, ext = (directory / f"{name}{suffix}" for suffix in (".crt", ".key", ".csr", ".ext"))
    _openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", key, "-out", csr, "-subj", f"/CN={name}")
    ext.write_text(extensions)
    _openssl("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial", "-out", cert,
             "-days", "2", "-extfile", ext)
    return cert, key


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    directory = tmp_path_factory.mktemp("pki")
    ca = _ca(directory, "ca")
    other, _ = _ca(directory, "other-ca")
    server = _signed(directory, "server", ca, "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                              "extendedKeyUsage=serverAuth\n")
    client = _signed(directory, "client", ca, "extendedKeyUsage=clientAuth\n")
    return PKI(ca[0], server[0], server[1], client[0], client[1], other)


@pytest.fixture(scope="module")
def tls_server(pki: PKI) -> Iterator[RedisServer]:
    with RedisServer(tls=(str(pki.server_cert), str(pki.server_key), str(pki.ca))) as server:
        yield server


def tls_flags(pki: PKI, *, ca: Path | None = None) -> list[str]:
    return ["--tls-ca", str(ca or pki.ca), "--tls-cert", str(pki.client_cert), "--tls-key", str(pki.client_key)]


def wm(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workers", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False, env={**os.environ, **env})


def one_line(proc: subprocess.CompletedProcess[str], code: int) -> str:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert proc.returncode == code, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("wm-signals: "), proc.stderr
    return lines[0]


async def test_write_worker_subscribe_and_replay_over_tls(tls_server: RedisServer, pki: PKI) -> None:
    """write, a worker, subscribe and replay --verify all work with the TLS flags (client certificate)."""
    keys = Keys("t" + uuid.uuid4().hex[:10], 4)
    base = ["--redis-url", tls_server.url, "--namespace", keys.namespace, "--partitions", str(keys.partitions),
            *tls_flags(pki)]
    for version, text in enumerate(["# Me\n- likes tea", "# Me\n- likes tea\n- lives in Paris"], start=1):
        proc = wm("write", *base, "--resource", "alice", "--markdown", text)
        assert (proc.returncode, proc.stdout.strip()) == (0, str(version)), proc.stderr

    worker = spawn_worker(tls_server.url, keys, "tls-w0", tls_ca=pki.ca, tls_cert=pki.client_cert,
                          tls_key=pki.client_key)
    try:
        await wait_ready(worker)
        client = connect(tls_server.url, tls=TLSOptions(str(pki.ca), str(pki.client_cert), str(pki.client_key)))
        try:
            await wait_caught_up(client, keys)
        finally:
            await client.aclose()
    finally:
        worker.send_signal(signal.SIGTERM)
        assert await anyio.to_thread.run_sync(worker.wait, 30) == 0

    sub = wm("subscribe", *base, "--resource", "alice", "--count", "1", "--from-start", "--json")
    assert sub.returncode == 0, sub.stderr
    assert '"mode":"snapshot"' in sub.stdout.replace(" ", "") and "likes tea" in sub.stdout

    replay = wm("replay", *base, "--resource", "alice", "--verify")
    assert replay.returncode == 0, replay.stderr
    assert "verified 2 signals" in replay.stdout


def test_tls_settings_from_the_environment(tls_server: RedisServer, pki: PKI) -> None:
    """WM_SIGNALS_TLS_* variables work as the flags do."""
    env = {"WM_SIGNALS_REDIS_URL": tls_server.url, "WM_SIGNALS_TLS_CA_FILE": str(pki.ca),
           "WM_SIGNALS_TLS_CERT_FILE": str(pki.client_cert), "WM_SIGNALS_TLS_KEY_FILE": str(pki.client_key),
           "WM_SIGNALS_NAMESPACE": "t" + uuid.uuid4().hex[:10]}
    assert wm("write", "--resource", "bob", "--markdown", "hello", **env).returncode == 0
    got = wm("get", "--resource", "bob", **env)
    assert (got.returncode, got.stdout) == (0, "hello\n"), got.stderr


def test_a_wrong_ca_is_refused(tls_server: RedisServer, pki: PKI) -> None:
    """A server certificate that does not chain to the configured CA: exit 1, one line."""
    proc = wm("get", "--redis-url", tls_server.url, "--resource", "alice", *tls_flags(pki, ca=pki.other_ca))
    assert "certificate verify failed" in one_line(proc, 1)


def test_the_system_trust_store_does_not_trust_a_private_ca(tls_server: RedisServer) -> None:
    """rediss:// with no TLS setting verifies against the system's CAs: the test CA is refused."""
    one_line(wm("get", "--redis-url", tls_server.url, "--resource", "alice"), 1)


def test_a_client_without_a_certificate_is_refused(tls_server: RedisServer, pki: PKI) -> None:
    """The server requires a client certificate: without one the command fails, exit 1, one line."""
    one_line(wm("get", "--redis-url", tls_server.url, "--resource", "alice", "--tls-ca", str(pki.ca)), 1)


def test_a_url_turning_verification_off_is_refused(tls_server: RedisServer, pki: PKI) -> None:
    """``?ssl_cert_reqs=none`` is refused with exit 2, naming the setting to use instead."""
    proc = wm("get", "--redis-url", tls_server.url + "?ssl_cert_reqs=none", "--resource", "alice",
              *tls_flags(pki))
    assert "--tls-insecure-skip-verify" in one_line(proc, 2)


def test_only_the_named_setting_skips_verification(tls_server: RedisServer, pki: PKI) -> None:
    """--tls-insecure-skip-verify connects despite a wrong CA, and says so loudly on stderr."""
    namespace = "t" + uuid.uuid4().hex[:10]
    proc = wm("write", "--redis-url", tls_server.url, "--namespace", namespace, "--resource", "carol",
              "--markdown", "hi", *tls_flags(pki, ca=pki.other_ca), "--tls-insecure-skip-verify")
    assert proc.returncode == 0, proc.stderr
    assert "tls.verification_off" in proc.stderr


def test_a_missing_certificate_file_is_named(tls_server: RedisServer, pki: PKI, tmp_path: Path) -> None:
    """A client certificate path that does not exist: exit 2 naming the file."""
    missing = tmp_path / "nope.crt"
    proc = wm("get", "--redis-url", tls_server.url, "--resource", "alice", "--tls-ca", str(pki.ca),
              "--tls-cert", str(missing), "--tls-key", str(pki.client_key))
    assert str(missing) in one_line(proc, 2)


def test_tls_flags_need_a_rediss_url(pki: PKI) -> None:
    """TLS settings with a plain redis:// URL (or none, the embedded server) are refused, exit 2."""
    assert "rediss://" in one_line(wm("get", "--resource", "alice", "--tls-ca", str(pki.ca),
                                      WM_SIGNALS_REDIS_URL=""), 2)
    assert "rediss://" in one_line(wm("get", "--redis-url", "redis://127.0.0.1:1/0", "--resource", "alice",
                                      "--tls-ca", str(pki.ca)), 2)


async def test_the_library_connects_with_tls_options(tls_server: RedisServer, pki: PKI) -> None:
    """signals connect(url, tls=TLSOptions(...)) speaks TLS with a client certificate."""
    client = connect(tls_server.url, tls=TLSOptions(str(pki.ca), str(pki.client_cert), str(pki.client_key)))
    try:
        assert await client.ping()
    finally:
        await client.aclose()


def test_settings_build_tls_options(pki: PKI) -> None:
    """Settings.tls() is None without TLS settings and carries them otherwise."""
    assert Settings(redis_url="rediss://127.0.0.1:6380/0").tls() is None
    settings = Settings(redis_url="rediss://127.0.0.1:6380/0", tls_ca_file=str(pki.ca))
    assert settings.tls() == TLSOptions(ca_file=str(pki.ca))
