"""A real Redis Sentinel deployment for tests: a master, two replicas and three sentinels on loopback.

The sentinels run as ``redis-server <conf> --sentinel`` with generated ``sentinel.conf``
files in a temporary directory (Sentinel rewrites its file, so each gets its own) and
short timers (``down-after-milliseconds`` 1000, ``failover-timeout`` 3000), so that a
SIGKILLed master is replaced within a few seconds. Each file names its sentinel's id and
the other two (``known-sentinel``), which saves the seconds of hello messages they
would otherwise need to find each other.

Two replicas, not one: writes with a durability setting (``WAIT 1``) need a replica after
the failover too. With a single replica the new master has none until the killed master
comes back and a sentinel turns it into a replica, which Sentinel does only at its
10-second INFO period; with two, the failover itself points the second replica at the
new master.
"""

from __future__ import annotations

import secrets
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from redis import Redis as SyncRedis
from redis import exceptions as redis_exc

from tests.ports import free_port
from workers.runtime.embedded import RedisServer, find_redis_server

__all__ = ("MASTER_NAME", "LocalSentinels")

MASTER_NAME = "wm-master"


#: ``(certificate, key, CA)`` PEM files: the certificate must be valid for 127.0.0.1 as a
#: server and as a client (every node and sentinel uses it both ways).
TLSFiles = tuple[str, str, str]


def _ask(port: int, *command: object, password: str | None = None, tls: TLSFiles | None = None) -> object:
    """One command to a server or sentinel on loopback (set-up runs outside any event loop)."""
    options: dict[str, object] = {}
    if tls:
        options = {"ssl": True, "ssl_certfile": tls[0], "ssl_keyfile": tls[1], "ssl_ca_certs": tls[2]}
    with SyncRedis(host="127.0.0.1", port=port, password=password, decode_responses=True, socket_timeout=2,
                   **options) as client:  # type: ignore[arg-type]
        return client.execute_command(*command)


class LocalSentinels:
    """A master and two replicas (``redis-server``) watched by three sentinels (quorum 2).

    Args:
        password: ``requirepass`` of the data nodes (replicas and sentinels authenticate with it).
        sentinel_password: ``requirepass`` of the sentinels (they use it with each other too).
        tls: serve every node and sentinel on TLS only, client certificates required
            (replication and the sentinels' own connections too).
    """

    def __init__(self, *, down_after_ms: int = 1000, failover_timeout_ms: int = 3000, password: str | None = None,
                 sentinel_password: str | None = None, tls: TLSFiles | None = None) -> None:
        self.password = password
        self.sentinel_password = sentinel_password
        self.tls = tls
        fast_sync = ["--repl-diskless-sync-delay", "0"]  # the default waits 5 s for more replicas
        if password:
            fast_sync += ["--requirepass", password, "--masterauth", password]
        if tls:
            fast_sync += ["--tls-replication", "yes"]
        self.master = RedisServer(extra=fast_sync, tls=tls)
        self.replicas = [RedisServer(extra=[*fast_sync, "--replicaof", "127.0.0.1", str(self.master.port)], tls=tls)
                         for _ in range(2)]
        self.ports = [free_port() for _ in range(3)]
        self.ids = {port: secrets.token_hex(20) for port in self.ports}
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self._dir = tempfile.TemporaryDirectory(prefix="wm-sentinel-")
        self._procs: list[subprocess.Popen[bytes]] = []

    @property
    def addresses(self) -> str:
        """The ``--sentinel`` value: ``127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3``."""
        return ",".join(f"127.0.0.1:{port}" for port in self.ports)

    def _conf(self, port: int) -> Path:
        path = Path(self._dir.name) / f"sentinel-{port}.conf"
        tls = (["port 0", f"tls-port {port}", f"tls-cert-file {self.tls[0]}", f"tls-key-file {self.tls[1]}",
                f"tls-ca-cert-file {self.tls[2]}", "tls-replication yes", "tls-auth-clients yes"]
               if self.tls else [f"port {port}"])
        path.write_text("\n".join([
            *tls, "bind 127.0.0.1", "daemonize no", f"dir {self._dir.name}",
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.master.port} 2",
            f"sentinel down-after-milliseconds {MASTER_NAME} {self.down_after_ms}",
            f"sentinel failover-timeout {MASTER_NAME} {self.failover_timeout_ms}",
            f"sentinel parallel-syncs {MASTER_NAME} 2", f"sentinel myid {self.ids[port]}",
            *(f"sentinel known-sentinel {MASTER_NAME} 127.0.0.1 {other} {self.ids[other]}"
              for other in self.ports if other != port),
            *([f"sentinel auth-pass {MASTER_NAME} {self.password}"] if self.password else []),
            *([f"requirepass {self.sentinel_password}", f"sentinel sentinel-pass {self.sentinel_password}"]
              if self.sentinel_password else []), "",
        ]))
        return path

    def start(self) -> LocalSentinels:
        """Start master, replicas (waiting for their sync) and the sentinels (waiting until
        each sees both replicas and the other two sentinels)."""
        try:
            self.master.start()
            for replica in self.replicas:
                replica.start()
            for replica in self.replicas:
                self._wait(lambda r=replica: _ask(r.port, "INFO", "replication",  # type: ignore[index,misc]
                                                  password=self.password, tls=self.tls)["master_link_status"] == "up",
                           "the replicas to sync")
            binary = find_redis_server()
            for port in self.ports:
                self._procs.append(subprocess.Popen([binary, str(self._conf(port)), "--sentinel"],
                                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
            self._wait(self._sentinels_agree, "the sentinels to see the replica and each other")
        except BaseException:
            self.stop()
            raise
        return self

    def _sentinels_agree(self) -> bool:
        for port in self.ports:
            state: dict[str, str] = _ask(port, "SENTINEL", "MASTER", MASTER_NAME,  # type: ignore[assignment]
                                         password=self.sentinel_password, tls=self.tls)
            if int(state["num-slaves"]) < len(self.replicas) or int(state["num-other-sentinels"]) < 2:
                return False
        return True

    @staticmethod
    def _wait(check: object, what: str, limit_s: float = 30.0) -> None:
        deadline = time.monotonic() + limit_s
        while True:
            try:
                if check():  # type: ignore[operator]
                    return
            except (OSError, ValueError, KeyError, redis_exc.RedisError) as e:  # not up yet
                last: object = e
            else:
                last = "not yet"
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out waiting for {what}: {last}")
            time.sleep(0.05)

    def kill_sentinel(self, index: int) -> None:
        """SIGKILL sentinel ``index`` (of :attr:`ports`)."""
        self._procs[index].kill()
        self._procs[index].wait()

    def _master_port(self, sentinel_port: int) -> int:
        reply = _ask(sentinel_port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME,
                     password=self.sentinel_password, tls=self.tls)
        return int(reply[1])  # type: ignore[index]

    def master_port(self) -> int:
        """The port of the master the sentinels report now."""
        return self._master_port(self.ports[0])

    def wait_promoted(self, old_port: int, limit_s: float = 30.0) -> int:
        """Wait until every sentinel reports a master other than ``old_port``; its port."""
        def promoted() -> bool:
            return all(self._master_port(p) != old_port for p in self.ports)
        self._wait(promoted, "the sentinels to promote a replica", limit_s)
        return self.master_port()

    def stop(self) -> None:
        """Stop the sentinels, the servers, and remove the sentinels' files."""
        for proc in self._procs:
            proc.kill()
            proc.wait()
        self._procs = []
        for server in (*self.replicas, self.master):
            server.stop()
        self._dir.cleanup()

    def __enter__(self) -> LocalSentinels:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()
