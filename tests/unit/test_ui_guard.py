"""The UI's guard and options, without Redis: the bind rule, the headers, the Host check,
the token, and escaping in the templates."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from signals.errors import InvalidInputError
from signals.streams.keys import Keys
from workers.ui.app import create_app
from workers.ui.options import UiOptions, is_loopback
from workers.ui.render import render
from workers.ui.security import CONTENT_SECURITY_POLICY

TOKEN = "a-token-of-enough-characters"


def _client(options: UiOptions, host: str = "127.0.0.1") -> TestClient:
    return TestClient(create_app(None, Keys("ns", 4), options), base_url=f"http://{host}:8765",
                      follow_redirects=False)


def test_loopback_names() -> None:
    """Loopback: localhost, 127.0.0.0/8, ::1; nothing else."""
    assert all(map(is_loopback, ("localhost", "127.0.0.1", "127.3.2.1", "::1", "[::1]")))
    assert not any(map(is_loopback, ("0.0.0.0", "10.0.0.1", "example.com", "::")))


def test_a_non_loopback_bind_needs_a_long_token() -> None:
    """No token, or a short one, on 0.0.0.0 is refused with what to pass."""
    with pytest.raises(InvalidInputError, match="needs a token"):
        UiOptions(host="0.0.0.0")
    with pytest.raises(InvalidInputError, match="at least 16"):
        UiOptions(host="0.0.0.0", token="short")
    assert not UiOptions(host="0.0.0.0", token=TOKEN).local


def test_every_response_carries_the_policy() -> None:
    """CSP, nosniff, frame denial, no caching: on pages, static files and refusals alike."""
    for response in (_client(UiOptions()).get("/static/ui.css"), _client(UiOptions()).get("/nowhere"),
                     _client(UiOptions(host="0.0.0.0", token=TOKEN)).get("/")):
        assert response.headers["content-security-policy"] == CONTENT_SECURITY_POLICY
        assert response.headers["x-content-type-options"] == "nosniff"
        assert response.headers["x-frame-options"] == "DENY"
    assert "'unsafe-inline'" not in CONTENT_SECURITY_POLICY and "script-src 'self'" in CONTENT_SECURITY_POLICY


def test_a_rebound_host_name_is_refused_on_loopback() -> None:
    """A page of another site whose name resolves to 127.0.0.1 sends its own Host: refused."""
    assert _client(UiOptions(), host="evil.example").get("/static/ui.css").status_code == 421
    assert _client(UiOptions(), host="localhost").get("/static/ui.css").status_code == 200


def test_the_token_by_header_cookie_or_once_in_the_url() -> None:
    """Without the token 401; ?token= sets an HttpOnly, SameSite=Strict cookie and drops it from the URL."""
    client = _client(UiOptions(host="0.0.0.0", token=TOKEN))
    assert client.get("/static/ui.css").status_code == 401
    assert client.get("/static/ui.css", headers={"Authorization": "Bearer " + TOKEN[:-1] + "x"}).status_code == 401
    assert client.get("/static/ui.css", headers={"Authorization": "Bearer " + TOKEN}).status_code == 200
    response = client.get(f"/static/ui.css?token={TOKEN}&x=1")
    assert response.status_code == 303 and response.headers["location"] == "/static/ui.css?x=1"
    cookie = response.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    assert client.get("/static/ui.css").status_code == 200  # the cookie now


def test_a_post_from_another_origin_is_refused() -> None:
    """Operator forms are same-origin only (and carry the page's anti-forgery field)."""
    client = _client(UiOptions(operator=True))
    response = client.post("/deadletter/drop", content=b"id=1-0", headers={
        "Origin": "http://evil.example", "Content-Type": "application/x-www-form-urlencoded"})
    assert response.status_code == 403


def test_templates_escape_memory_text() -> None:
    """A document's text is data in every template: tags come out as text."""
    from signals.streams.verify import DocumentState  # noqa: PLC0415

    hostile = "<script>x()</script><img src=x onerror=y()></working-memory>\"'"
    html = render("_document.html", document=DocumentState("r:a", 1, hostile, 1, None), format="markdown")
    assert "<script>" not in html and "<img" not in html and "</working-memory>" not in html
    assert "&lt;script&gt;x()&lt;/script&gt;&lt;img src=x onerror=y()&gt;&lt;/working-memory&gt;" in html


def test_documents_are_shown_as_text_and_json_pretty_printed() -> None:
    """Markdown as it is; JSON indented (when it parses); diff lines classed by their first character."""
    from workers.ui.render import diff_lines, pretty  # noqa: PLC0415

    assert pretty("# A\n- b", "markdown") == "# A\n- b"
    assert pretty('{"a":{"b":[1,2]}}', "json") == '{\n  "a": {\n    "b": [\n      1,\n      2\n    ]\n  }\n}'
    assert pretty("{not json", "json") == "{not json"
    assert diff_lines("@@ -1,1 +1,1 @@\n-a\n+b") == [("hunk", "@@ -1,1 +1,1 @@"), ("del", "-a"), ("add", "+b")]
