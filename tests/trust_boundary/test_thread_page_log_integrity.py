"""The thread page of ``wm-signals ui`` says what ``replay --deliveries`` says of a delivery
log whose history was cut or forged, and never shows that history as complete.

Any agent user may append to any thread's log, and an append may trim (``XADD ... MAXLEN
0``): here the *reader* role of the generated ACL (loaded into the test's server for the
test's namespace) cuts and forges logs a real agent loop wrote over a real worker; the
page is served by the UI app (over HTTP, in the test's event loop) as the operator role,
the UI's own user.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from html import unescape

import httpx
import msgspec
import pytest
from redis.asyncio import Redis

from signals.agent import AgentWorkingMemory
from signals.core.cachekey import cache_key
from signals.core.codec import FIELD, encode_json
from signals.core.models import Attributes, Delivery
from signals.core.signing import Signer
from signals.streams.client import Client, connect
from signals.streams.deliveries import DeliveryLog
from signals.streams.delivery_chain import ChainState, link
from signals.streams.keys import Keys
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import running_workers, wait_caught_up
from tests.trust_boundary.support import PASSWORDS
from workers.runtime.embedded import RedisServer
from workers.ui.app import create_app
from workers.ui.logcheck import VerdictCache, read_verdict
from workers.ui.options import UiOptions

pytestmark = [pytest.mark.anyio, pytest.mark.redis]

KEY = b"a-signing-key-of-32-bytes-here!!"
THREAD = "t-log"


async def _agent_calls(server: RedisServer, redis: Redis, keys: Keys, signer: Signer | None = None) -> None:
    """Three model calls of an agent loop over three versions: three records in the thread's log."""
    store = WorkingMemoryStore(redis, keys=keys)
    overrides = {"signing_key": KEY.decode()} if signer else {}
    async with running_workers(server.url, keys, **overrides):
        agent = AgentWorkingMemory(redis, keys, resource_id="bob", thread_id=THREAD, signer=signer)
        for n in range(3):
            await store.replace("bob", "# Bob\n" + "".join(f"- fact {i}\n" for i in range(n + 1)))
            await wait_caught_up(redis, keys)
            assert (await agent.before_model_call(set())).add


async def _thread_page(operator: Client, keys: Keys, signer: Signer | None = None) -> str:
    app = create_app(operator, keys, UiOptions(), signer=signer)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:8765") as client:
        response = await client.get("/thread", params={"id": THREAD})
    assert response.status_code == 200, response.text[:2000]
    return response.text


def _verdict(html: str) -> str:
    found = re.search(r'data-integrity="(\w+)"', html)
    assert found, html[:2000]
    return found.group(1)


def _banner(html: str) -> str:
    found = re.search(r'<section id="log-integrity".*?</section>', html, re.DOTALL)
    assert found
    return unescape(re.sub(r"<[^>]+>", "", found.group(0)))


def _flagged(html: str) -> dict[str, str]:
    """The records the page marks, by entry id, with what it says of each."""
    return {entry: unescape(note) for entry, note in
            re.findall(r'<div class="flag" data-flag="([0-9-]+)">not trusted: ([^<]*)</div>', html)}


async def test_an_intact_log_shows_nothing_alarming(redis_server: RedisServer, redis: Redis, keys: Keys,
                                                    as_role: Callable[[str], Client]) -> None:
    await _agent_calls(redis_server, redis, keys)
    html = await _thread_page(as_role("operator"), keys)
    assert _verdict(html) == "whole"
    assert "History whole" in _banner(html)
    assert "tampered" not in html and "not complete" not in html and 'class="flag"' not in html
    assert html.count('<tr class="call"') == 3


@pytest.mark.parametrize("kept", [0, 1])
async def test_a_log_the_reader_role_trimmed_is_reported_cut(redis_server: RedisServer, redis: Redis, keys: Keys,
                                                             as_role: Callable[[str], Client], kept: int) -> None:
    """The reader role appends the newest genuine record again with ``MAXLEN 1`` (the log
    keeps that one alone) or ``MAXLEN 0`` (the log is empty): the page says the log was
    tampered with and how many entries were removed, marks the record left (its window's
    first records are gone), and shows no "no record yet" message for an emptied log."""
    await _agent_calls(redis_server, redis, keys)
    operator = as_role("operator")
    last = (await DeliveryLog(operator, keys).read(THREAD))[-1]
    entry_id = await as_role("reader").xadd(keys.deliveries(THREAD), {FIELD: encode_json(last)}, maxlen=kept,
                                            approximate=False)
    html = await _thread_page(operator, keys)
    assert _verdict(html) == "tampered"
    banner = _banner(html)
    assert "has been tampered with" in banner
    removed = 3 + 1 - kept  # the agent's three and the reader's own, less what the trim kept
    assert f"{removed} entries were removed from the log while it holds fewer than its retention" in banner
    assert "History whole" not in html and "No delivery record for this thread" not in html
    if kept:
        assert _flagged(html) == {entry_id: f"its window's first retained record is its #{last.seq}: "
                                            "the records before it were removed"}
    else:
        assert 'tr class="call' not in html and "No delivery record is retained" in html


async def test_a_forged_record_appended_is_flagged(redis_server: RedisServer, redis: Redis, keys: Keys,
                                                   as_role: Callable[[str], Client]) -> None:
    """A well-formed record (a re-delivery of the newest version, which rebuilds) that does
    not chain to the record before it: the page says the log was tampered with, names the
    entry, and marks that record only."""
    await _agent_calls(redis_server, redis, keys)
    operator = as_role("operator")
    last = (await DeliveryLog(operator, keys).read(THREAD))[-1]
    assert last.seq is not None
    forged = msgspec.structs.replace(last, step=last.step + 1, seq=last.seq + 1, chain="h:" + "0" * 64)
    entry_id = await as_role("reader").xadd(keys.deliveries(THREAD), {FIELD: encode_json(forged)})
    html = await _thread_page(operator, keys)
    assert _verdict(html) == "tampered"
    assert f"entry {entry_id}: its chain does not recompute" in _banner(html)
    assert _flagged(html) == {entry_id: "does not chain to the record before it: changed, or made by someone else"}
    assert html.count('class="badge untrusted"') == 1  # its text is the lane's, which proves nothing


async def test_an_unchained_record_appended_keeps_the_log_from_being_shown_whole(
        redis_server: RedisServer, redis: Redis, keys: Keys, as_role: Callable[[str], Client]) -> None:
    """A well-formed record with no chain at all: the history cannot be proven whole, and the record is marked."""
    await _agent_calls(redis_server, redis, keys)
    operator = as_role("operator")
    last = (await DeliveryLog(operator, keys).read(THREAD))[-1]
    unchained = msgspec.structs.replace(last, step=last.step + 1, seq=None, chain=None)
    entry_id = await as_role("reader").xadd(keys.deliveries(THREAD), {FIELD: encode_json(unchained)})
    html = await _thread_page(operator, keys)
    assert _verdict(html) == "incomplete"
    assert "is not complete" in _banner(html) and "1 record(s) carry no chain" in _banner(html)
    assert list(_flagged(html)) == [entry_id]


async def test_with_the_signing_key_a_record_chained_without_it_is_flagged(
        redis_server: RedisServer, redis: Redis, keys: Keys, as_role: Callable[[str], Client]) -> None:
    """Without the key anyone can chain a record of a window of their own (the chain is a
    plain digest); the UI given the signing key checks HMACs as ``replay --deliveries``
    does and marks it, while the agent's own signed records are not marked."""
    signer = Signer(KEY)
    await _agent_calls(redis_server, redis, keys, signer)
    operator = as_role("operator")
    last = (await DeliveryLog(operator, keys, key=KEY).read(THREAD))[-1]
    forged = link(ChainState(), msgspec.structs.replace(last, step=last.step + 1, window="forged", seq=None,
                                                         chain=None))
    entry_id = await as_role("reader").xadd(keys.deliveries(THREAD), {FIELD: encode_json(forged)})
    html = await _thread_page(operator, keys, signer)
    assert _verdict(html) == "tampered"
    assert "records not signed with the signing key are in the log" in _banner(html)
    assert _flagged(html) == {entry_id: "not signed with the signing key"}


async def test_without_the_signing_key_a_signed_log_is_not_shown_whole(
        redis_server: RedisServer, redis: Redis, keys: Keys, as_role: Callable[[str], Client]) -> None:
    """The agent's records are chained with the signing key (``k:`` HMACs): a UI without the
    key cannot check them (anyone may write ``k:`` and any hex), so the log is not whole and
    the banner says why, claiming no chain."""
    await _agent_calls(redis_server, redis, keys, Signer(KEY))
    html = await _thread_page(as_role("operator"), keys)
    assert _verdict(html) == "incomplete"
    banner = _banner(html)
    assert "3 record(s) are signed and no signing key was given to check them" in banner
    assert "History whole" not in banner and "chains to the one before it" not in banner
    assert 'class="flag"' not in html and html.count('<tr class="call"') == 3


async def test_an_entry_that_is_not_a_record_is_named_and_the_calls_still_shown(
        redis_server: RedisServer, redis: Redis, keys: Keys, as_role: Callable[[str], Client]) -> None:
    """``XADD <log> * x y`` by the reader role (an entry no reader of the log takes): the page
    is served, the log reported tampered with the entry named, and the three genuine calls shown."""
    await _agent_calls(redis_server, redis, keys)
    entry_id = await as_role("reader").xadd(keys.deliveries(THREAD), {"x": "y"})
    html = await _thread_page(as_role("operator"), keys)
    assert _verdict(html) == "tampered"
    assert f"entry {entry_id}: no 'e' field" in _banner(html)
    assert "entries were removed" not in _banner(html)  # the entry counts as held, not as a removal
    assert html.count('<tr class="call"') == 3 and html.count('class="badge ok"') == 3
    assert f"<code>{entry_id}</code> (no &#39;e&#39; field)" in html


async def test_a_chained_record_whose_text_is_not_its_cache_key_is_named_and_marked(
        redis_server: RedisServer, redis: Redis, keys: Keys, as_role: Callable[[str], Client]) -> None:
    """A record of a window of the reader's own, chained (a plain digest anyone can make),
    whose contents do not match its cacheKey: the chain check alone finds nothing; the page
    is served, says the log was tampered with, names the entry and marks its call."""
    await _agent_calls(redis_server, redis, keys)
    operator = as_role("operator")
    first = (await DeliveryLog(operator, keys).read(THREAD))[0]
    assert first.mode == "snapshot"
    forged = link(ChainState(), msgspec.structs.replace(first, step=9, window="forged", contents="# Bob\n- owes us",
                                                         seq=None, chain=None))
    entry_id = await as_role("reader").xadd(keys.deliveries(THREAD), {FIELD: encode_json(forged)})
    html = await _thread_page(operator, keys)
    assert _verdict(html) == "tampered"
    assert f"entry {entry_id}: cacheKey does not match the rebuilt text" in _banner(html)
    assert _flagged(html) == {entry_id: "cacheKey does not match the rebuilt text"}
    assert html.count('<tr class="call') == 4 and html.count('class="badge untrusted"') == 1
    assert html.count('class="badge ok"') == 3 and html.count("not rebuildable from the retained records") == 1
    assert html.count('<pre class="memory call-text">') == 3  # no text shown as the forged call's memory


def _bounded_operator(server: RedisServer, keys: Keys) -> Client:
    """The operator role's client, taking at most 1 MiB a reply (the ``as_role`` fixture made the user)."""
    return connect(f"redis://{keys.namespace}-operator:{PASSWORDS['operator']}@127.0.0.1:{server.port}/0",
                   max_reply_bytes=1 << 20)


@pytest.mark.parametrize("size", [600_000, 2_000_000])
async def test_records_over_the_reply_bound_leave_a_message_on_the_page(
        redis_server: RedisServer, redis: Redis, keys: Keys, as_role: Callable[[str], Client], size: int) -> None:
    """Entries the reader role appends, read by a UI whose client takes at most 1 MiB a
    reply: the thread page is served and says the calls cannot be shown. The log's check
    reads entries of 600 KB one at a time and names them; one of 2 MB it cannot read, and
    says the log could not be checked (never that it is whole)."""
    await _agent_calls(redis_server, redis, keys)
    added = [await as_role("reader").xadd(keys.deliveries(THREAD), {"x": "y" * size}) for _ in range(3)]
    bounded = _bounded_operator(redis_server, keys)
    try:
        html = await _thread_page(bounded, keys)
        over = "a reply from Redis over 1,048,576 bytes (the client's max_reply_bytes): not read"
        assert f"the calls cannot be shown: {over}" in unescape(html)
        assert "No delivery record" not in html
        if size < 1 << 20:
            assert _verdict(html) == "tampered"
            assert all(f"entry {entry_id}: no 'e' field" in _banner(html) for entry_id in added)
        else:
            assert _verdict(html) == "incomplete"
            assert f"the log could not be read to be checked: {over}" in _banner(html)
    finally:
        await bounded.aclose()


async def test_a_verdict_is_read_once_per_state_of_the_log(redis_server: RedisServer, redis: Redis, keys: Keys,
                                                           as_role: Callable[[str], Client]) -> None:
    """With a cache, the verdict read at an unchanged fingerprint is the one kept (the live
    pages of a thread do not each read the whole log again); any append reads it again."""
    await _agent_calls(redis_server, redis, keys)
    operator, cache = as_role("operator"), VerdictCache()
    first = await read_verdict(operator, keys, THREAD, cache=cache)
    assert first.state == "whole" and await read_verdict(operator, keys, THREAD, cache=cache) is first
    await as_role("reader").xadd(keys.deliveries(THREAD), {"x": "y"})
    again = await read_verdict(operator, keys, THREAD, cache=cache)
    assert again.state == "tampered" and again.fingerprint != first.fingerprint
    assert await read_verdict(operator, keys, THREAD, cache=cache) is again


async def test_a_log_of_large_records_is_checked_in_smaller_reads_under_the_bound(
        redis_server: RedisServer, redis: Redis, keys: Keys, as_role: Callable[[str], Client]) -> None:
    """Fifteen genuine snapshot records of 100 KB each (1.5 MB, over a 1 MiB reply bound
    together, each well under it): the log's check reads them in fewer entries a reply and
    finds the log whole, rather than giving up on it."""
    state = ChainState()
    for step in range(1, 16):
        text = f"# Bob\n- visit {step}\n" + "- a fact\n" * 10_000
        record = Delivery(thread_id=THREAD, step=step, lane="r:bob", version=step, mode="snapshot",
                          reason="reinject", cache_key=cache_key("markdown", text), contents=text,
                          attributes=Attributes(format="markdown", scope="resource"), window="w1")
        await redis.xadd(keys.deliveries(THREAD), {FIELD: encode_json(link(state, record))})
    bounded = _bounded_operator(redis_server, keys)
    try:
        verdict = await read_verdict(bounded, keys, THREAD)
        assert verdict.state == "whole", verdict.integrity.problems
    finally:
        await bounded.aclose()
