"""Operator actions: absent in read-only mode; on a non-loopback bind, refused without the token;
with it, a requeue goes through its confirmation page."""

from __future__ import annotations

import subprocess
import sys
import urllib.error
import urllib.request
from typing import Any

import anyio
import pytest
from selenium.webdriver.common.by import By

from signals import connect
from signals.streams.deadletters import DeadLetters
from tests.browser.conftest import ROOT, Pipeline, UiServer, start_ui

pytestmark = [pytest.mark.redis, pytest.mark.browser]

TOKEN = "t0ken-for-the-ui-tests-0123456789"


def _status(url: str, *, data: bytes | None = None, headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(url, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as e:
        return int(e.code)


async def _dead_letters(pipeline: Pipeline) -> dict[str, tuple[int, str]]:
    """Every dead letter of the namespace: id -> (partition, its reason)."""
    redis = connect(pipeline.url)
    try:
        letters = await DeadLetters(redis, pipeline.keys).list()
        return {e.id: (e.partition, e.letter.error if e.letter else str(e.problem)) for e in letters}
    finally:
        await redis.aclose()


def _letter(pipeline: Pipeline, reason: str) -> tuple[str, int]:
    """The id and partition of the dead letter whose reason says ``reason``."""
    found = [(i, p) for i, (p, why) in anyio.run(_dead_letters, pipeline).items() if reason in why]
    assert len(found) == 1, found
    return found[0]


def test_read_only_mode_has_no_operator_actions(browser: Any, pipeline: Pipeline, ui: UiServer) -> None:
    """Read-only (the default): a dead letter's page offers no requeue or drop, and the action does not exist."""
    dead_id, partition = _letter(pipeline, "unknown lane")
    browser.get(f"{ui.url}/deadletters")
    assert browser.find_element(By.CSS_SELECTOR, "[data-figure=dead_letters]").text == "2"
    browser.find_element(By.CSS_SELECTOR, f"#dead-letters tr[data-id='{dead_id}'] a").click()
    assert "unknown lane" in browser.find_element(By.ID, "reason").text
    assert browser.find_elements(By.CSS_SELECTOR, "#actions, #requeue, #drop, form[method=post]") == []
    form = f"id={dead_id}&partition={partition}&confirm=yes".encode()
    assert _status(f"{ui.url}/deadletter/requeue", data=form,
                   headers={"Content-Type": "application/x-www-form-urlencoded"}) in (404, 405)
    assert _status(f"{ui.url}/deadletter?id={dead_id}&partition={partition}&confirm=requeue") == 400


def test_a_non_loopback_bind_needs_a_token(pipeline: Pipeline) -> None:
    """Binding 0.0.0.0 without a token is refused at start (exit 2, naming what to pass)."""
    proc = subprocess.run([sys.executable, "-m", "workers", "ui", "--redis-url", pipeline.url, "--namespace",
                           pipeline.keys.namespace, "--partitions", str(pipeline.keys.partitions), "--host", "0.0.0.0",
                           "--operator"], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
                          env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2
    assert "needs a token" in proc.stderr and "Traceback" not in proc.stderr


def test_operator_actions_need_the_token_on_a_non_loopback_bind(browser: Any, pipeline: Pipeline) -> None:
    """On 0.0.0.0 (reached here through 127.0.0.1 only) every page, and the requeue above all,
    is refused without the token; with it, requeue asks for a confirmation, then requeues."""
    server = start_ui(pipeline.url, pipeline.keys, "--host", "0.0.0.0", "--operator", "--token", TOKEN,
                      token=TOKEN)
    try:
        dead_id, partition = _letter(pipeline, "unknown lane")
        form = f"id={dead_id}&partition={partition}&confirm=yes&csrf=x".encode()
        post = {"Content-Type": "application/x-www-form-urlencoded"}
        assert _status(server.url + "/") == 401
        assert _status(server.url + "/deadletter/requeue", data=form, headers=post) == 401
        assert _status(server.url + "/deadletter/requeue", data=form,
                       headers={**post, "Authorization": "Bearer wrong-token-0123456789"}) == 401
        assert _status(server.url + "/deadletter/requeue", data=form,  # the token, but not the page's form
                       headers={**post, "Authorization": f"Bearer {TOKEN}"}) == 403
        assert dead_id in anyio.run(_dead_letters, pipeline)
        browser.delete_all_cookies()
        browser.get(f"{server.url}/deadletter?id={dead_id}&partition={partition}")
        assert "needs its token" in browser.find_element(By.TAG_NAME, "body").text
        browser.get(f"{server.url}/?token={TOKEN}")  # sets the cookie, and leaves the token out of the URL
        assert "token" not in browser.current_url
        browser.get(f"{server.url}/deadletter?id={dead_id}&partition={partition}")
        browser.find_element(By.ID, "requeue").click()
        assert "Put this event back" in browser.find_element(By.ID, "confirm-form").text
        assert dead_id in anyio.run(_dead_letters, pipeline)  # nothing happens before the confirmation
        browser.find_element(By.ID, "confirm-button").click()
        assert f"dead letter {dead_id} requeued" in browser.find_element(By.CSS_SELECTOR, "main .message").text
        assert dead_id not in anyio.run(_dead_letters, pipeline)
        browser.delete_all_cookies()
    finally:
        server.stop()
