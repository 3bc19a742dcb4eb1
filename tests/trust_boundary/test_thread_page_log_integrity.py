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
from signals.core.codec import FIELD, encode_json
from signals.core.signing import Signer
from signals.streams.client import Client
from signals.streams.deliveries import DeliveryLog
from signals.streams.delivery_chain import ChainState, link
from signals.streams.keys import Keys
from signals.streams.store import WorkingMemoryStore
from tests.integration.helpers import running_workers, wait_caught_up
from workers.runtime.embedded import RedisServer
from workers.ui.app import create_app
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
    assert _verdict(await _thread_page(operator, keys)) == "whole"  # without the key it cannot be told
