"""End to end, as a user runs them: the demo, the example agent loop, every benchmark script (tiny inputs)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from workers.runtime.embedded import RedisServer

pytestmark = pytest.mark.redis
ROOT = Path(__file__).parents[2]


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          check=False, env={**os.environ, **env})


def test_demo_runs_on_the_embedded_redis() -> None:
    """``wm-signals demo`` with no Redis configured starts its own and prints the summary."""
    env = {k: v for k, v in os.environ.items() if k != "WM_SIGNALS_REDIS_URL"}
    proc = subprocess.run([sys.executable, "-m", "workers", "demo"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=False, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "started an embedded redis-server" in proc.stderr
    for needle in ("summary", "dedup skips", "re-injections", "wm tokens sent as signals", "patch=\"unified-diff\""):
        assert needle in proc.stdout
    _check_demo_story(proc.stdout)


def _check_demo_story(out: str) -> None:
    """The demo prints its legend and every write with its document version, shows both
    users' agents, and labels ``reinject`` only a version that agent was given before."""
    assert "delivery reasons: bootstrap = " in out and "reinject = " in out
    assert "write alice: its Markdown profile (replace) -> document v1" in out
    assert "-> document v3 (unchanged: the worker emits no signal)" in out
    assert "+ alice profile v1 snapshot (bootstrap)" in out and "+ bob profile v1 snapshot (bootstrap)" in out
    assert "+ bob plan v1 snapshot (bootstrap)" in out
    given: dict[str, set[int]] = {}
    for line in out.splitlines():
        words = line.split()
        if len(words) >= 6 and words[0] == "+" and words[3].startswith("v"):
            agent, version, reason = f"{words[1]} {words[2]}", int(words[3][1:]), words[5]
            if reason == "(reinject)":
                assert version in given.get(agent, set()), line
            given.setdefault(agent, set()).add(version)
    assert any(line.endswith("(reinject)") for line in out.splitlines())


def test_demo_runs_against_a_configured_redis(redis_server: RedisServer) -> None:
    """With a URL the demo uses that server and says how to inspect what it wrote."""
    proc = _run(["-m", "workers", "demo"], WM_SIGNALS_REDIS_URL=redis_server.url)
    assert proc.returncode == 0, proc.stderr
    assert "embedded" not in proc.stderr and "wm-signals replay --namespace demo-" in proc.stdout


def test_example_agent_loop_runs(redis_server: RedisServer) -> None:
    """examples/agent_loop.py delivers a snapshot, then a delta, re-injects the snapshot after
    trimming, and reads back what the model saw."""
    proc = _run(["examples/agent_loop.py", redis_server.url])
    assert proc.returncode == 0, proc.stderr
    assert "+ signal v1 snapshot (bootstrap)" in proc.stdout
    assert "+ signal v2 delta (new)" in proc.stdout and 'patch="unified-diff">@@ -3,1 +3,1 @@' in proc.stdout
    assert "+ signal v2 snapshot (reinject)" in proc.stdout
    assert "- **Location**: Paris" in proc.stdout


def test_benchmarks_run_on_tiny_inputs() -> None:
    """Every benchmark script runs (quick mode); figures are printed, never asserted."""
    proc = _run(["-m", "bench.run_all", "--quick"])
    assert proc.returncode == 0, proc.stderr
    for section in ("Delta computation", "Worker throughput", "latency", "replay --verify", "RSS", "Token economics",
                    "Framework adapters", "wm-signals ui"):
        assert section in proc.stdout


def test_script_cost_diagnostic_runs_on_tiny_inputs() -> None:
    """``bench.bench_scripts`` (not part of ``make bench``) runs and prints both rows."""
    proc = _run(["-m", "bench.bench_scripts", "--lanes", "5", "--rounds", "2"])
    assert proc.returncode == 0, proc.stderr
    assert "per write (write script" in proc.stdout and "per committed lane (commit script" in proc.stdout


def test_simulate_reads_stdin() -> None:
    """``simulate`` reads the scenario from stdin when no file is given."""
    scenario = (ROOT / "tests/vectors/scenarios/first_snapshot.json").read_text()
    proc = subprocess.run([sys.executable, "-m", "workers", "simulate"], cwd=ROOT, input=scenario,
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0
    assert proc.stdout == (ROOT / "tests/vectors/expected/first_snapshot.jsonl").read_text()
