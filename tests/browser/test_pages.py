"""Each page of ``wm-signals ui`` in a real browser shows the figures the library reads
(and the thread timeline the records of ``replay --deliveries``). Screenshots go to docs/img."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any
from urllib.parse import quote

import anyio
import pytest
from selenium.webdriver.common.by import By

from signals import connect
from signals.core.tokens import approx_tokens
from signals.streams.deliveries import DeliveryLog
from signals.streams.replay import materialise, read_signals
from signals.streams.status import inspect
from tests.browser.conftest import ROOT, Pipeline, UiServer, browser_logs, console_problems, screenshot

pytestmark = [pytest.mark.redis, pytest.mark.browser]


def _figure(driver: Any, name: str) -> str:
    return str(driver.find_element(By.CSS_SELECTOR, f"[data-figure={name}]").text)


async def _read(pipeline: Pipeline, fn: Any) -> Any:
    redis = connect(pipeline.url)
    try:
        return await fn(redis)
    finally:
        await redis.aclose()


def test_overview_shows_the_namespace(browser: Any, pipeline: Pipeline, ui: UiServer) -> None:
    """Partitions, live workers, lanes, pending, lag and dead letters as ``inspect`` reads them."""
    report = anyio.run(_read, pipeline, lambda r: inspect(r, pipeline.keys))
    browser.get(ui.url + "/")
    totals = report.totals
    assert _figure(browser, "partitions") == str(pipeline.keys.partitions)
    assert _figure(browser, "lanes") == str(totals["lanes"])
    assert _figure(browser, "pending") == str(totals["pending"])
    assert _figure(browser, "lag") == str(totals["lag"])
    assert _figure(browser, "dead_letters") == str(totals["dead_letters"]) == "2"
    assert _figure(browser, "workers") == "1"
    assert "ui-worker" in browser.find_element(By.ID, "workers").text
    rows = browser.find_elements(By.CSS_SELECTOR, "#partitions tr[data-partition]")
    assert [r.find_element(By.CSS_SELECTOR, ".dlq").text for r in rows] == \
        [str(p.dead_letters) for p in report.partitions]
    assert pipeline.lane in browser.find_element(By.ID, "recent").text
    screenshot(browser, "overview")
    browser.find_element(By.NAME, "q").send_keys(pipeline.resource + "\n")
    assert browser.find_element(By.ID, "lane-id").text == pipeline.lane  # search: one match opens it


def test_lane_page_shows_document_signals_and_retention(browser: Any, pipeline: Pipeline, ui: UiServer) -> None:
    """The document now, the newest signals with mode, cacheKey, policy and tokens, and where
    retention starts (the worker keeps few signals)."""
    async def read(redis: Any) -> Any:
        return (await redis.hget(pipeline.keys.doc(pipeline.lane), "data"),
                await read_signals(redis, pipeline.keys, pipeline.lane))
    data, signals = anyio.run(_read, pipeline, read)
    browser.get(f"{ui.url}/lane?id={quote(pipeline.lane)}")
    assert browser.find_element(By.ID, "document-text").get_attribute("textContent") == data
    assert _figure(browser, "signals") == str(len(signals))
    rows = browser.find_elements(By.CSS_SELECTOR, "#signal-rows tr.signal")
    newest = list(reversed(signals))[:len(rows)]
    assert [r.get_attribute("data-version") for r in rows] == [str(s.version) for _, s in newest]
    for row, (entry_id, signal) in zip(rows, newest, strict=True):
        assert row.get_attribute("data-entry") == entry_id
        assert row.find_element(By.CSS_SELECTOR, ".mode").text.startswith(signal.mode)
        assert row.find_element(By.CSS_SELECTOR, ".tokens").get_attribute("data-tokens") == \
            str(approx_tokens(signal.contents))
        assert signal.cache_key.startswith(row.find_element(By.CSS_SELECTOR, ".key").text.rstrip("…"))
        assert (signal.policy or "mastra") in row.text
    first = signals[0][1].version
    assert first > 1, "the worker's retention trimmed this lane"
    assert _figure(browser, "first-version") == str(first)
    assert "was trimmed" in browser.find_element(By.ID, "retention-start").text
    assert "matches the stored document" in browser.find_element(By.ID, "latest-check").text
    screenshot(browser, "lane")


def test_diff_between_two_retained_versions(browser: Any, pipeline: Pipeline, ui: UiServer) -> None:
    """The diff page rebuilds both versions (as replay does) and shows the lines that changed."""
    signals = anyio.run(_read, pipeline, lambda r: read_signals(r, pipeline.keys, pipeline.lane))
    texts = {m.signal.version: m.value for m in materialise(signals)}
    low, high = min(texts), max(texts)
    browser.get(f"{ui.url}/diff?id={quote(pipeline.lane)}&a={high}&b={low}")
    assert browser.find_element(By.ID, "old-text").get_attribute("textContent") == texts[low]
    assert browser.find_element(By.ID, "new-text").get_attribute("textContent") == texts[high]
    added = [e.get_attribute("textContent") for e in browser.find_elements(By.CSS_SELECTOR, "#diff .add")]
    assert "+- **Location**: Rome" in added
    browser.get(f"{ui.url}/diff?id={quote(pipeline.lane)}&a=1&b={high}")
    assert "not retained" in browser.find_element(By.CSS_SELECTOR, "main .problem").text


def _timeline(browser: Any, url: str) -> list[dict[str, Any]]:
    """Every delivery record the thread pages show, oldest first, following the pager."""
    records: list[dict[str, Any]] = []
    browser.get(url)
    while True:
        for call in browser.find_elements(By.CSS_SELECTOR, "#call-rows tr.call"):
            text = call.find_element(By.CSS_SELECTOR, ".call-text").get_attribute("textContent") \
                if call.find_elements(By.CSS_SELECTOR, ".call-text") else None
            for record in reversed(call.find_elements(By.CSS_SELECTOR, ".record")):
                records.append({"step": int(call.get_attribute("data-step")),
                                "window": call.get_attribute("data-window"),
                                "held": call.get_attribute("data-version"), "text": text,
                                "version": int(record.get_attribute("data-record-version")),
                                "mode": record.get_attribute("data-mode"),
                                "reason": record.get_attribute("data-reason"),
                                "contents": record.find_element(By.CSS_SELECTOR, ".record-contents")
                                .get_attribute("textContent")})
        older = browser.find_elements(By.ID, "older")
        if not older:
            return list(reversed(records))
        browser.get(older[0].get_attribute("href"))


def test_thread_timeline_matches_replay_deliveries(browser: Any, pipeline: Pipeline, ui: UiServer) -> None:
    """Every record of ``replay --deliveries`` (snapshots, deltas, a coalesced catch-up,
    re-injections) is on the timeline with its version and text, over several pages; each
    call's memory text is what ``view_at`` rebuilds for it."""
    proc = subprocess.run([sys.executable, "-m", "workers", "replay", "--redis-url", pipeline.url,
                           "--namespace", pipeline.keys.namespace, "--partitions", str(pipeline.keys.partitions),
                           "--resource", pipeline.resource, "--thread", pipeline.thread, "--deliveries", "--json"],
                          cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    replayed = [json.loads(line) for line in proc.stdout.splitlines()]
    assert {r["mode"] for r in replayed} == {"snapshot", "delta"}
    assert {"bootstrap", "new", "reinject"} <= {r["reason"] for r in replayed}
    assert any("baseVersion" in r for r in replayed), "a coalesced catch-up"
    browser.get("about:blank")  # leave any live page of an earlier test, and its log
    browser_logs(browser)
    shown = _timeline(browser, f"{ui.url}/thread?id={quote(pipeline.thread)}")
    assert [(s["step"], s["version"], s["mode"], s["reason"], s["contents"]) for s in shown] == \
        [(r["step"], r["version"], r["mode"], r["reason"], r["contents"]) for r in replayed]
    async def views(redis: Any) -> list[Any]:
        log = DeliveryLog(redis, pipeline.keys)
        return [await log.view_at(pipeline.thread, s["step"], window=s["window"]) for s in shown]
    for s, view in zip(shown, anyio.run(_read, pipeline, views), strict=True):
        assert (s["held"], s["text"]) == (str(view.version), view.text)
    browser.get(f"{ui.url}/thread?id={quote(pipeline.thread)}")
    badges = {b.text for b in browser.find_elements(By.CSS_SELECTOR, ".badge")}
    assert "verified" in badges and "mismatch" not in badges
    browser.execute_script("""for (const d of document.querySelectorAll('#call-rows details')) {
        if (d.querySelector('summary').textContent.startsWith('diff')) { d.open = true; } }""")
    screenshot(browser, "thread")
    console, _ = browser_logs(browser)
    assert console_problems(console) == []
