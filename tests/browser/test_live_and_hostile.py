"""Live updates (server-sent events), hostile memory and a cut or forged delivery log, in a real browser."""

from __future__ import annotations

import uuid
from typing import Any
from urllib.parse import quote, urlsplit

import anyio
import msgspec
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from signals import AgentWorkingMemory, connect
from signals.core.codec import FIELD, encode_json
from signals.streams.acl import ROLES, acl_users
from signals.streams.deliveries import DeliveryLog
from signals.streams.store import WorkingMemoryStore
from tests.browser.conftest import Pipeline, UiServer, browser_logs, console_problems, screenshot
from tests.browser.scenario import HOSTILE

pytestmark = [pytest.mark.redis, pytest.mark.browser]

#: Paths the pages may request: themselves, their script, style and icon, and the live streams.
_OWN_PATHS = ("/", "/lane", "/thread", "/static/ui.css", "/static/live.js", "/static/icon.svg", "/live/lane",
              "/live/thread", "/deadletters", "/deadletter", "/diff", "/search")


async def _write(pipeline: Pipeline, text: str) -> int:
    redis = connect(pipeline.url)
    try:
        return await WorkingMemoryStore(redis, keys=pipeline.keys).replace(pipeline.resource, text)
    finally:
        await redis.aclose()


def test_lane_page_updates_live_when_a_write_lands(browser: Any, pipeline: Pipeline, ui: UiServer) -> None:
    """A write's signal appears at the top of an open lane page, with the new document, without a reload."""
    browser.get(f"{ui.url}/lane?id={quote(pipeline.lane)}")
    WebDriverWait(browser, 10).until(lambda d: "connected" in d.find_element(By.ID, "live-status").text)
    browser.execute_script("window.__sameDocument = 'yes';")
    before = browser.find_element(By.CSS_SELECTOR, "#signal-rows tr.signal").get_attribute("data-version")
    text = browser.find_element(By.ID, "document-text").get_attribute("textContent") + "\n- **Live**: it works"
    version = anyio.run(_write, pipeline, text)
    WebDriverWait(browser, 20).until(
        lambda d: d.find_element(By.CSS_SELECTOR, "#signal-rows tr.signal").get_attribute("data-version")
        != before)
    top = browser.find_element(By.CSS_SELECTOR, "#signal-rows tr.signal")
    assert int(top.get_attribute("data-version")) == int(before) + 1
    assert browser.find_element(By.ID, "document-text").get_attribute("textContent") == text
    assert browser.find_element(By.CSS_SELECTOR, "[data-figure=doc-version]").text == str(version)
    assert browser.execute_script("return window.__sameDocument;") == "yes"  # no reload happened


def _own_origin(url: str, base: str) -> bool:
    parts, own = urlsplit(url), urlsplit(base)
    return (parts.scheme, parts.netloc) == (own.scheme, own.netloc) and parts.path in _OWN_PATHS


def test_hostile_memory_is_text_and_runs_nothing(browser: Any, pipeline: Pipeline, ui: UiServer) -> None:
    """``<script>``, ``<img onerror>`` and ``</working-memory>`` in the memory show as text on the
    lane, diff and thread pages; no script runs, no image loads (the console, the browser's
    request log and the server's request log prove it)."""
    browser.get("about:blank")  # leave any live page of an earlier test, and its log
    browser_logs(browser)
    pages = [f"{ui.url}/lane?id={quote(pipeline.lane)}", f"{ui.url}/thread?id={quote(pipeline.thread)}"]
    for url in pages:
        browser.get(url)
        for details in browser.find_elements(By.CSS_SELECTOR, "details"):
            browser.execute_script("arguments[0].open = true;", details)
        body = browser.find_element(By.TAG_NAME, "main").text
        for line in HOSTILE.strip().splitlines():
            assert line in body
        assert browser.find_elements(By.CSS_SELECTOR, "main script, main img, main working-memory") == []
        assert browser.execute_script("return window.__pwned === undefined;") is True
    console, urls = browser_logs(browser)
    assert console_problems(console) == [], console
    assert urls and all(_own_origin(u, ui.url) for u in urls), urls
    assert "pwned" not in ui.log()


def test_every_page_sends_a_strict_content_security_policy(browser: Any, pipeline: Pipeline, ui: UiServer) -> None:
    """An inline script that would get past escaping is still refused by the browser: the
    policy allows the app's own script file only (the console reports the refusal)."""
    browser.get(f"{ui.url}/lane?id={quote(pipeline.lane)}")
    browser_logs(browser)
    browser.execute_script("""
        const s = document.createElement('script'); s.textContent = "window.__inline = 1;";
        document.body.appendChild(s);
        const i = document.createElement('img'); i.src = 'data:image/gif;base64,R0lGODlhAQABAAAAACw=';
        i.setAttribute('onerror', 'window.__inline = 2'); document.body.appendChild(i);""")
    WebDriverWait(browser, 5).until(lambda d: any("Content Security Policy" in e["message"]
                                                  for e in d.get_log("browser")))
    assert browser.execute_script("return window.__inline === undefined;") is True


async def _new_window_call(pipeline: Pipeline) -> int:
    """A new agent process on the thread makes one model call (its window's first snapshot)."""
    redis = connect(pipeline.url)
    try:
        agent = AgentWorkingMemory(redis, pipeline.keys, resource_id=pipeline.resource, thread_id=pipeline.thread)
        await agent.start()
        result = await agent.before_model_call([])
        assert [inj.reason for inj in result.add] == ["bootstrap"]
        return result.step
    finally:
        await redis.aclose()


def test_thread_page_updates_live_when_a_model_call_is_logged(browser: Any, pipeline: Pipeline,
                                                              ui: UiServer) -> None:
    """A model call logged while the thread page is open appears at its top without a reload."""
    browser.get(f"{ui.url}/thread?id={quote(pipeline.thread)}")
    WebDriverWait(browser, 10).until(lambda d: "connected" in d.find_element(By.ID, "live-status").text)
    browser.execute_script("window.__sameDocument = 'yes';")
    step = anyio.run(_new_window_call, pipeline)
    WebDriverWait(browser, 20).until(
        lambda d: d.find_element(By.CSS_SELECTOR, "#call-rows tr.call").get_attribute("data-step") == str(step))
    top = browser.find_element(By.CSS_SELECTOR, "#call-rows tr.call")
    assert top.find_element(By.CSS_SELECTOR, ".record").get_attribute("data-reason") == "bootstrap"
    assert browser.execute_script("return window.__sameDocument;") == "yes"


async def _two_windows(pipeline: Pipeline, thread: str) -> None:
    """Two agent processes on a thread of their own: one record each (their windows' first snapshots)."""
    redis = connect(pipeline.url)
    try:
        for _ in range(2):
            agent = AgentWorkingMemory(redis, pipeline.keys, resource_id=pipeline.resource, thread_id=thread)
            await agent.start()
            assert (await agent.before_model_call([])).add
    finally:
        await redis.aclose()


async def _as_reader(pipeline: Pipeline, thread: str, action: str) -> None:
    """The generated ``reader`` role (any agent user may append to any thread's log) appends
    to the thread's log: a forged record that does not chain (``forge``), or its newest
    record again with ``MAXLEN 0``, which empties the log (``cut``)."""
    admin = connect(pipeline.url)
    users = acl_users(pipeline.keys, {role: f"{role}-pw" for role in ROLES})
    reader = None
    try:
        user = f"{pipeline.keys.namespace}-reader"
        await admin.execute_command("ACL SETUSER", user, *users[user])
        reader = connect(pipeline.url.replace("redis://", f"redis://{user}:reader-pw@"))
        last = (await DeliveryLog(admin, pipeline.keys).read(thread))[-1]
        assert last.seq is not None
        if action == "forge":
            forged = msgspec.structs.replace(last, step=last.step + 1, seq=last.seq + 1, chain="h:" + "0" * 64)
            await reader.xadd(pipeline.keys.deliveries(thread), {FIELD: encode_json(forged)})
        else:
            await reader.xadd(pipeline.keys.deliveries(thread), {FIELD: encode_json(last)}, maxlen=0,
                              approximate=False)
    finally:
        if reader is not None:
            await reader.aclose()
        await admin.execute_command("ACL DELUSER", f"{pipeline.keys.namespace}-reader")
        await admin.aclose()


def _integrity(browser: Any) -> tuple[str, str]:
    box = browser.find_element(By.ID, "log-integrity")
    return box.get_attribute("data-integrity"), box.text


def test_thread_page_reports_a_forged_and_a_cut_log_live(browser: Any, pipeline: Pipeline, ui: UiServer) -> None:
    """An intact log shows no warning; a record forged by the reader role (well-formed, not
    chained) arrives on the open page marked, and the page says the log was tampered with;
    the reader's ``XADD ... MAXLEN 0`` (no entry arrives) turns the verdict to a cut live;
    reloaded, the emptied log is reported cut, not as a thread with no records yet."""
    thread = "cut-" + uuid.uuid4().hex[:8]
    anyio.run(_two_windows, pipeline, thread)
    url = f"{ui.url}/thread?id={quote(thread)}"
    browser.get(url)
    state, text = _integrity(browser)
    assert state == "whole" and "tampered" not in text and "not complete" not in text
    assert browser.find_elements(By.CSS_SELECTOR, ".flag, tr.call.flagged") == []
    WebDriverWait(browser, 10).until(lambda d: "connected" in d.find_element(By.ID, "live-status").text)
    anyio.run(_as_reader, pipeline, thread, "forge")
    WebDriverWait(browser, 20).until(lambda d: _integrity(d)[0] == "tampered")
    assert "has been tampered with" in _integrity(browser)[1]
    assert "its chain does not recompute" in _integrity(browser)[1]
    flags = browser.find_elements(By.CSS_SELECTOR, "#call-rows .record.flagged .flag")
    assert [f.text for f in flags] == ["not trusted: does not chain to the record before it: changed, or made by "
                                       "someone else"]
    top = browser.find_elements(By.CSS_SELECTOR, "#call-rows tr.call")[0]
    assert top.get_attribute("class") == "call flagged"
    assert top.find_element(By.CSS_SELECTOR, ".badge").text == "untrusted"  # its text matches, but proves nothing
    screenshot(browser, "thread-tampered")
    anyio.run(_as_reader, pipeline, thread, "cut")
    WebDriverWait(browser, 20).until(lambda d: "entries were removed" in _integrity(d)[1])
    browser.get(url)
    state, text = _integrity(browser)
    assert state == "tampered" and "4 entries were removed from the log" in text
    assert "No delivery record is retained" in browser.find_element(By.TAG_NAME, "main").text
    console, _ = browser_logs(browser)
    assert console_problems(console) == []
