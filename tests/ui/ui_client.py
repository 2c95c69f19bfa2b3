"""Signing in and sending forms as a browser does, over a TestClient or httpx."""

from __future__ import annotations

import re
from typing import Any

CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')


def csrf_of(html: str) -> str:
    match = CSRF_RE.search(html)
    assert match, "no csrf_token on the page"
    return match.group(1)


def sign_in(web: Any, key: str) -> Any:
    """GET the form, POST the key with the form's token; returns the POST's response
    (303 to the namespaces page when signed in)."""
    page = web.get("/ui/login")
    assert page.status_code == 200, page.text
    return web.post("/ui/login", data={"key": key, "csrf_token": csrf_of(page.text)}, follow_redirects=False)


def post_form(web: Any, page_url: str, action: str, data: dict[str, Any]) -> Any:
    """Load `page_url`, take its CSRF token, POST `data` to `action` (no redirect followed)."""
    page = web.get(page_url)
    assert page.status_code == 200, page.text
    return web.post(action, data={"csrf_token": csrf_of(page.text), **data}, follow_redirects=False)
