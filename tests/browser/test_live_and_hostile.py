"""Live updates (server-sent events) and hostile memory, in a real browser."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote, urlsplit

import anyio
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import WebDriverWait

from signals import AgentWorkingMemory, connect
from signals.streams.store import WorkingMemoryStore
from tests.browser.conftest import Pipeline, UiServer, browser_logs, console_problems
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
