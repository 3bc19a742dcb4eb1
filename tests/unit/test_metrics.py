"""The worker's metrics and health board, without Redis: exposition, sums, verdicts, settings."""

from __future__ import annotations

import socket
import struct
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from workers.engine.commit import BatchStats
from workers.ops import server as ops_server
from workers.ops.health import Board, liveness_bound
from workers.ops.metrics import Layout, MetricsCollector, WorkerMetrics, dead_letter_reason
from workers.runtime.settings import Settings

ROOT = Path(__file__).parents[2]


def _scrape(layout: Layout, vectors: list[list[float]]) -> dict[str, float]:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(MetricsCollector(lambda: (layout, vectors), "1.2.3"))
    out = {}
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def _metrics(events: int, seconds: float) -> WorkerMetrics:
    m = WorkerMetrics(2)
    m.record_batch(BatchStats(events=events, signalled=events - 1, deduplicated=1, dedup_skips=1, snapshots=1,
                              deltas=events - 2, conflicts=2), seconds)
    return m


def test_counters_and_histograms_are_summed_over_processes() -> None:
    """Two processes' vectors scrape as one worker: counters and histogram buckets add up."""
    layout = Layout(2)
    a, b = _metrics(10, 0.004), _metrics(5, 0.3)
    out = _scrape(layout, [a.vector(layout), b.vector(layout)])
    assert out["wm_signals_events_total{outcome=signalled}"] == 13
    assert out["wm_signals_events_total{outcome=deduplicated}"] == 2
    assert out["wm_signals_signals_emitted_total{mode=delta}"] == 11
    assert out["wm_signals_commit_conflicts_total"] == 4
    assert out["wm_signals_dedup_skips_total"] == 2
    assert out["wm_signals_batch_duration_seconds_bucket{le=0.005}"] == 1
    assert out["wm_signals_batch_duration_seconds_bucket{le=0.5}"] == 2
    assert out["wm_signals_batch_duration_seconds_count"] == 2
    assert out["wm_signals_build_info{version=1.2.3}"] == 1


def test_redis_gauges_come_from_the_freshest_process_and_only_once_read() -> None:
    """Lag is not made up before a monitor read it; then the most recent reading wins;
    ``up`` is 1 only when every process's read loop runs."""
    layout = Layout(2)
    old, new = WorkerMetrics(2), WorkerMetrics(2)
    assert "wm_signals_stream_lag{partition=0}" not in _scrape(layout, [old.vector(layout)])
    old.lag, old.gauges_at, old.up = [9.0, 9.0], 1.0, 1
    new.lag, new.pending, new.gauges_at, new.up = [3.0, 0.0], [1.0, 2.0], 2.0, 0
    out = _scrape(layout, [old.vector(layout), new.vector(layout)])
    assert out["wm_signals_stream_lag{partition=0}"] == 3
    assert out["wm_signals_stream_pending{partition=1}"] == 2
    assert out["wm_signals_up"] == 0


def test_write_to_commit_uses_the_stream_id_time() -> None:
    """An entry id's milliseconds are the write's time; a clock behind it counts as 0 s."""

    class Entry:
        def __init__(self, entry_id: str) -> None:
            self.entry_id = entry_id

    m = WorkerMetrics()
    m.committed([Entry("1000-0"), Entry("1250-3"), Entry("9999-0")], now=1.5)  # type: ignore[list-item]
    assert m.write_to_commit.total == pytest.approx(0.5 + 0.25)
    assert m.write_to_commit.counts[0] == 1  # the one from "the future"


def test_dead_letter_reason_classes() -> None:
    """Reasons as the consumer records them map to poison, attempts or corrupt."""
    assert dead_letter_reason("poison: bad JSON") == "poison"
    assert dead_letter_reason("failed 3 times: ValueError: x") == "attempts"
    assert dead_letter_reason("poison: corrupt document: wm:{p0}:doc:r:x: WRONGTYPE") == "corrupt"


def test_board_verdicts() -> None:
    """A slot is live while its progress is within the bound, ready while its last check
    passed and is fresh; the reasons name the process."""
    board = Board(2, Layout(1))
    now = time.monotonic()
    assert board.readiness(10) == "worker process 0: starting: no readiness check has run yet"
    for slot in (0, 1):
        board.write(slot, now, 0, now, [0.0] * Layout(1).size)
    assert board.liveness(30) is None
    assert board.readiness(10) is None
    board.write(1, now - 100, 2, now, [0.0] * Layout(1).size)
    assert "worker process 1: no read loop progress" in (board.liveness(30) or "")
    assert board.readiness(10) == "worker process 1: Redis does not answer"
    assert board.liveness(30, alive=lambda slot: slot != 0) == "worker process 0 is not running"
    assert liveness_bound(30, 100) == 30
    assert liveness_bound(1, 20_000) == 60


def test_processes_setting() -> None:
    """``auto`` is one per core, at most one per partition; more processes than partitions is refused."""
    assert Settings(processes="auto", partitions=1).process_count() == 1
    assert Settings(processes=3, partitions=4).process_count() == 3
    with pytest.raises(ValueError, match="processes must be between 1 and the partition count"):
        Settings(processes=5, partitions=4)
    with pytest.raises(ValueError, match="processes must be between"):
        Settings(processes=0)
    with pytest.raises(ValueError, match="metrics_port"):
        Settings(metrics_port=70_000)
    with pytest.raises(ValueError, match="must exceed health_interval_s"):
        Settings(heartbeat_ttl_s=1, health_interval_s=2)


@pytest.mark.parametrize(("flags", "named"), [
    (["--processes", "many"], "processes"),
    (["--metrics-addr", "example.com"], "metrics_addr"),
])
def test_bad_worker_flags_are_one_line_and_exit_2(flags: list[str], named: str) -> None:
    """Bad ops flags stop the worker before it starts: exit 2, one line naming the setting."""
    proc = subprocess.run([sys.executable, "-m", "workers", "worker", *flags], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert named in proc.stderr


def test_progress_is_the_least_recent_loop_and_a_stop_restarts_the_clock() -> None:
    """Liveness follows the slowest read loop; once the last loop ends, the stopping
    worker is judged from that moment (not from its start, long ago)."""
    m = WorkerMetrics()
    m.started = 0.0
    m.mark("a", 10.0)
    m.mark("b", 20.0)
    assert m.progress() == 10.0
    m.unmark("a")
    m.unmark("b")
    assert m.progress() > 20.0


def test_ops_server_closes_idle_connections_and_keeps_stderr_clean(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A connection that never finishes its request is closed after the request timeout
    (each used to hold a thread and a descriptor for good: a few hundred made the probes
    time out), so is one that trickles header lines (the timeout is a deadline for the
    whole request, not for each read: a review caught it), the probes keep answering
    meanwhile, and a client that leaves early prints no traceback into the log stream."""
    monkeypatch.setattr(ops_server, "REQUEST_TIMEOUT_S", 0.3)
    board = Board(1, Layout(1))
    now = time.monotonic()
    board.write(0, now, 0, now, [0.0] * Layout(1).size)
    server = ops_server.OpsServer("127.0.0.1", 0, board, live_bound_s=30, ready_max_age_s=10).start()
    try:
        idle = [socket.create_connection(("127.0.0.1", server.port), timeout=5) for _ in range(20)]
        for sock in idle:
            sock.sendall(b"GET /livez HTTP/1.1\r\n")  # and never the blank line
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/livez", timeout=5) as reply:
            assert reply.status == 200
        for sock in idle:
            assert sock.recv(1024) == b""  # closed by the server, not by this test's timeout
            sock.close()
        slow = socket.create_connection(("127.0.0.1", server.port), timeout=0.05)
        slow.sendall(b"GET /livez HTTP/1.1\r\n")
        started, closed = time.monotonic(), False
        while not closed and time.monotonic() - started < 5:  # a header line every 0.1 s, never the end
            try:
                slow.sendall(b"X-Slow: yes\r\n")
                closed = slow.recv(1024) == b""
            except TimeoutError:
                time.sleep(0.05)
            except OSError:  # broken pipe, reset: closed by the server
                closed = True
        slow.close()
        assert closed  # by the deadline: each header line resets the per-read timeout
        for _ in range(5):  # ask, then go before the answer
            rude = socket.create_connection(("127.0.0.1", server.port))
            rude.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            rude.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
            rude.close()
        time.sleep(0.5)
    finally:
        server.stop()
    assert "Traceback" not in capfd.readouterr().err
