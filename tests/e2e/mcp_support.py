"""Run ``wm-signals mcp`` as a user runs it (``python -m workers mcp ...``) and talk to it with the SDK's client."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import httpx2
from mcp import Client
from mcp.client.session import MessageHandlerFnT
from mcp.client.streamable_http import streamable_http_client

from signals.streams.keys import Keys

ROOT = Path(__file__).resolve().parents[2]
ALICE, BOB, CAROL = "token-for-alice-0123456789", "token-for-bob-0123456789ab", "token-for-carol-012345678"
TOKENS = {ALICE: "alice", BOB: "bob", CAROL: "carol"}


def wm_argv(url: str, keys: Keys, *args: str) -> list[str]:
    """``python -m workers ARGS`` against a test namespace."""
    return [sys.executable, "-m", "workers", *args, "--redis-url", url, "--namespace", keys.namespace,
            "--partitions", str(keys.partitions)]


def tokens_file(directory: Path, tokens: dict[str, str] | None = None) -> str:
    path = directory / "tokens.json"
    path.write_text(json.dumps(tokens or TOKENS))
    return str(path)




def spawn_mcp_http(url: str, keys: Keys, port: int, tokens: str, *extra: str) -> subprocess.Popen[bytes]:
    """A ``wm-signals mcp --transport http`` process; its stderr goes to ``proc.log_path``."""
    log = tempfile.NamedTemporaryFile(prefix="wm-mcp-", suffix=".log", delete=False)  # noqa: SIM115
    argv = wm_argv(url, keys, "mcp", "--transport", "http", "--port", str(port), "--tokens-file", tokens, *extra)
    env = {**os.environ, "WM_SIGNALS_LOG_FORMAT": "json", "WM_SIGNALS_LOG_LEVEL": "info"}
    proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=log)
    log.close()
    proc.log_path = log.name  # type: ignore[attr-defined]
    return proc


def log_of(proc: subprocess.Popen[bytes]) -> str:
    return Path(proc.log_path).read_text()  # type: ignore[attr-defined]


async def wait_listening(proc: subprocess.Popen[bytes], port: int, limit_s: float = 30.0) -> None:
    """Wait until the server accepts connections on ``port``."""
    with anyio.fail_after(limit_s):
        while True:
            assert proc.poll() is None, f"mcp server exited with {proc.returncode}: {log_of(proc)[-2000:]}"
            try:
                stream = await anyio.connect_tcp("127.0.0.1", port)
            except OSError:
                await anyio.sleep(0.05)
                continue
            await stream.aclose()
            return


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@asynccontextmanager
async def http_client(port: int, token: str | None, *, mode: str = "legacy",
                      message_handler: MessageHandlerFnT | None = None) -> AsyncIterator[Client]:
    """The SDK's client over streamable HTTP, with a bearer token (``mode``: legacy = 2025, auto = 2026)."""
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as http:
        transport = streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http)
        async with Client(transport, mode=mode, message_handler=message_handler) as client:
            yield client


async def cli(url: str, keys: Keys, *args: str) -> tuple[int, str, str]:
    """Run a ``wm-signals`` command in its own process: exit code, stdout, stderr."""
    proc = await anyio.run_process(wm_argv(url, keys, *args), cwd=ROOT, check=False)
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()
