"""The operator UI end to end in a real browser: Debian's chromium driven by
Playwright (no browser download) against a real uvicorn server. Sign in; preview
what an agent would get (the context block is the API's, nothing logged) and see
what that retrieval served and credited; find a reflection by search; open its
evidence and land on the step; edit it and see the new version and its diff;
retire it and see it leave retrieval over the API; work three items through the
review queue from the keyboard; retry a failed job; sign out. Every page is
screenshotted (REFLEXA_UI_SCREENSHOTS, default test-artifacts/ui) at 1280 px and a
phone's width."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import func, select

from migrations import upgrade
from store.database import Database
from store.models import Reflection, Retrieval
from tests.conftest import ADMIN_KEY, REPO, LiveServer, start_server
from tests.ui.seed import (
    LLM_REFLECTOR,
    LONG_GUIDELINE,
    STATES,
    Seeded,
    add_failed_job,
    add_llm_candidates,
    add_merges,
    add_retrievals,
    make_review_cases,
    seed,
)

CHROMIUM = "/usr/bin/chromium"
SHOTS = Path(os.environ.get("REFLEXA_UI_SCREENSHOTS", REPO / "test-artifacts" / "ui"))

if not Path(CHROMIUM).exists():
    # CI installs it (.ci/run); a developer machine without it skips, loudly.
    if os.environ.get("CI"):
        raise RuntimeError(f"{CHROMIUM} is missing: .ci/run installs Debian's chromium")
    pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium)", allow_module_level=True)

sync_api = pytest.importorskip("playwright.sync_api")


def _wait_for_jobs(api: httpx.Client, ns: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        queued = api.get(f"/v1/namespaces/{ns}/jobs", params={"status": "queued"}).json()["items"]
        running = api.get(f"/v1/namespaces/{ns}/jobs", params={"status": "running"}).json()["items"]
        if not queued and not running:
            return
        time.sleep(0.2)
    raise AssertionError("the server's worker did not finish the seed's jobs in 60 s")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[LiveServer, httpx.Client, Seeded, list[str], int]]:
    root = tmp_path_factory.mktemp("ui-browser")
    url = f"sqlite:///{root / 'reflexa.db'}"
    upgrade(url)
    server = start_server(url, root, log=root / "server.log")
    api = httpx.Client(base_url=server.url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=30)
    try:
        main = seed(api, "mem")
        seed(api, "other", episodes=2)
        _wait_for_jobs(api, "mem")
        add_retrievals(api, main)
        db = Database(url)
        job_id = add_failed_job(db, "mem")
        review_ids = make_review_cases(db, "mem", candidates=2, below=2, spare=STATES[1])
        db.dispose()
        if SHOTS.exists():
            shutil.rmtree(SHOTS)
        SHOTS.mkdir(parents=True)
        yield server, api, main, review_ids, job_id
    finally:
        api.close()
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


def shot(page: Any, name: str) -> None:
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


WIDER_THAN_SCREEN = """() => [...document.querySelectorAll('body *')]
  .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)
  .map(e => e.tagName.toLowerCase() + (e.className ? '.' + e.className : ''))"""


def wider_than_screen(page: Any) -> list[str]:
    """The elements that stick out sideways (empty: the page reads without scrolling)."""
    if page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"):
        return []
    return list(page.evaluate(WIDER_THAN_SCREEN))[:10]


def test_an_operator_session_from_sign_in_to_sign_out(site: Any, browser: Any) -> None:
    server, api, main, review_ids, job_id = site
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=server.url)
    page = context.new_page()
    page.set_default_timeout(15_000)

    # Sign in: the protected page sends us to the form and back.
    page.goto("/ui/ns/mem")
    assert "/ui/login" in page.url
    shot(page, "01-sign-in")
    page.get_by_label("API key").fill(ADMIN_KEY)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/ui/ns/mem")
    assert page.get_by_role("heading", name="Trajectories per day and success rate").is_visible()
    shot(page, "02-overview")
    page.goto("/ui/namespaces")
    shot(page, "03-namespaces")

    # Keyboard basics: the first Tab lands on the skip link, and focus is visible.
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Skip to content"
    assert page.evaluate("getComputedStyle(document.activeElement).outlineStyle") != "none"

    # What would the agent get: the preview, from the nav. The context block is the
    # very string POST …/retrieve with render gives; nothing is logged or credited.
    db = Database(server.database_url)

    def logged() -> tuple[int, int]:
        with db.read() as s:
            uses = s.scalar(select(func.sum(Reflection.uses)).where(Reflection.namespace == "mem")) or 0
            return s.scalar(select(func.count()).select_from(Retrieval)) or 0, int(uses)

    before = logged()
    page.goto("/ui/ns/mem")
    page.get_by_role("link", name="Preview", exact=True).click()
    page.wait_for_url("**/ui/ns/mem/preview")
    page.get_by_label("State (the observation").fill(STATES[1])
    page.get_by_label("k (items").fill("5")
    page.get_by_label("Context budget").fill("600")
    page.get_by_label("Action to check").fill("go left")
    page.get_by_role("button", name="Preview").click()
    page.wait_for_url("**state=*")
    body = {"state": {"observation": STATES[1]}, "k": 5, "render": {"format": "markdown", "max_chars": 600}}
    assert logged() == before
    served = api.post("/v1/namespaces/mem/retrieve", json=body).json()
    assert served["context"] and page.locator("#context").text_content() == served["context"]
    assert page.locator("table.served tbody tr").count() == len(served["items"])
    assert "exact" in page.locator("table.served tbody tr").first.inner_text()
    assert page.locator("#verdict").is_visible()
    shot(page, "18-preview")
    response = page.goto("/ui/ns/mem/preview?state=a+state&k=0")
    assert response is not None and response.status == 422
    assert "k" in page.get_by_role("alert").inner_text() and page.locator("#pv-state").input_value() == "a state"
    shot(page, "19-preview-invalid")
    # That retrieval's page: the context it served and, after the outcome, what it credited.
    outcome = {"success": True, "item_ids": [served["items"][0]["id"]]}
    assert api.post(f"/v1/namespaces/mem/retrievals/{served['retrieval_id']}/outcome", json=outcome).is_success
    page.goto(f"/ui/ns/mem/retrievals/{served['retrieval_id']}")
    assert page.locator("#served-context").text_content() == served["context"]
    credit = page.locator("td.credit").all_inner_texts()
    assert credit == ["✓ credited"] + ["not credited"] * (len(served["items"]) - 1)
    shot(page, "20-retrieval-credited")
    db.dispose()

    # Find a reflection by search (the real retrieval path), open it.
    page.goto("/ui/ns/mem/reflections")
    shot(page, "04-reflections")
    page.goto("/ui/ns/mem/reflections?status=active")  # the search keeps the filter: what agents are served
    page.get_by_label("Search by state text").fill(STATES[1])
    page.get_by_label("Search by state text").press("Enter")
    page.wait_for_url("**q=*")
    results = page.locator("table tbody tr")
    assert results.count() >= 1
    assert "exact" in results.first.inner_text()
    shot(page, "05-search")
    results.first.locator("a").first.click()
    page.wait_for_url("**/reflections/ex_*")
    reflection_url = page.url
    rid = reflection_url.rsplit("/", 1)[1]
    shot(page, "06-reflection")

    # Its evidence links into the exact trajectory step.
    evidence = page.locator("ul.evidence a").first
    href = evidence.get_attribute("href")
    step = href.rsplit("#step-", 1)[1]
    evidence.click()
    page.wait_for_url(f"**#step-{step}")
    target = page.locator(f"#step-{step}")
    assert "highlight" in (target.get_attribute("class") or "")
    assert target.is_visible() and target.bounding_box()["y"] < 900  # scrolled to it
    assert "cited as evidence" in target.inner_text()
    shot(page, "07-trajectory-step")

    # Edit: a new version, and the diff in the history.
    page.goto(reflection_url)
    page.get_by_text("Edit (a new version").click()
    content = page.get_by_label("Content (JSON object)")
    before = content.input_value()
    content.fill(before.replace('"action": "go left"', '"action": "go left carefully"'))
    page.get_by_label("Note", exact=True).fill("more precise")
    page.get_by_role("button", name="Save as version 2").click()
    page.wait_for_url("**done=edit")
    assert page.get_by_text("Saved as a new version").is_visible()
    assert page.locator("h1").get_by_text("version 2").is_visible()
    assert page.locator(".diff ins", has_text="carefully").count() == 1  # a word-level diff
    assert page.locator(".diff", has_text="go left carefully").count() == 1
    shot(page, "08-reflection-edited")

    # A stale edit: someone saves version 3 while this form still expects version 2; the
    # 409 page keeps the text as typed, shows what changed, and saves it over version 3.
    page.get_by_text("Edit (a new version").click()
    content = page.get_by_label("Content (JSON object)")
    content.fill(content.input_value().replace("go left carefully", "go left slowly"))
    r = api.patch(f"/v1/namespaces/mem/reflections/{rid}", json={"text": "edited elsewhere", "note": "meanwhile"})
    assert r.status_code == 200 and r.json()["version"] == 3, r.text
    page.get_by_role("button", name="Save as version 3").click()
    stale = page.locator(".stale")
    assert stale.is_visible() and "meanwhile" in stale.inner_text()
    assert "go left slowly" in page.get_by_label("Content (JSON object)").input_value()  # nothing typed is lost
    shot(page, "22-stale-edit")
    page.get_by_role("button", name="Save my edit over version 3").click()
    page.wait_for_url("**done=edit")
    saved = api.get(f"/v1/namespaces/mem/reflections/{rid}").json()
    assert saved["version"] == 4 and saved["content"]["action"] == "go left slowly"

    # Retire: it leaves retrieval results over the API.
    def served() -> list[str]:
        r = api.post("/v1/namespaces/mem/retrieve", json={"state": {"observation": STATES[1]}, "k": 50})
        return [i["id"] for i in r.json()["items"]]

    assert rid in served()
    page.locator("#note-retire").fill("misleading near the door")
    page.get_by_role("button", name="Retire").click()
    page.wait_for_url("**done=retire")
    assert rid not in served()

    # The review queue, from the keyboard: keep/approve, skip, retire, approve.
    page.goto("/ui/ns/mem/review")
    shot(page, "09-review")
    first = page.locator(".review-item.current h2 a").get_attribute("href").rsplit("/", 1)[1]
    with page.expect_navigation():
        page.keyboard.press("a")
    second = page.locator(".review-item.current h2 a").get_attribute("href").rsplit("/", 1)[1]
    page.keyboard.press("s")  # skip: focus moves on, nothing recorded
    third = page.locator(".review-item.current h2 a").get_attribute("href").rsplit("/", 1)[1]
    assert third != second
    with page.expect_navigation():
        page.keyboard.press("r")
    assert "done=retire" in page.url
    page.keyboard.press("k")  # back up to the skipped one
    assert page.locator(".review-item.current h2 a").get_attribute("href").endswith(second)
    with page.expect_navigation():
        page.keyboard.press("a")
    decided = {first, second, third}
    assert len(decided) == 3 and decided <= set(review_ids) | {rid}
    for item in decided:  # (a reflector may have recounted an item since: look for the decision)
        history = api.get(f"/v1/namespaces/mem/reflections/{item}/history").json()
        assert any(h["actor"] == "key:admin-env" and h["action"] in ("approve", "keep", "retire") for h in history), (
            item,
            history,
        )
    assert api.get(f"/v1/namespaces/mem/reflections/{third}").json()["status"] == "retired"
    shot(page, "10-review-after")

    # Jobs: a failed job with its error, retried.
    page.goto("/ui/ns/mem/jobs")
    assert page.get_by_text("ValueError: boom").is_visible()
    shot(page, "11-jobs")
    page.get_by_role("button", name=f"Retry job {job_id}").click()
    page.wait_for_url("**retried=*")
    assert page.get_by_text(f"Job {job_id} is queued again.").is_visible()
    assert api.get(f"/v1/namespaces/mem/jobs/{job_id}").json()["status"] in ("queued", "running", "done", "failed")

    # Live regions: with the review page open, an item decided elsewhere leaves the
    # count without a reload (ui.js refetches every 15 s).
    page.goto("/ui/ns/mem/review")
    total = page.locator("#review-total").inner_text()
    first = page.locator(".review-item h2 a").first.get_attribute("href").rsplit("/", 1)[-1]
    assert api.patch(f"/v1/namespaces/mem/reflections/{first}", json={"status": "retired"}).status_code == 200
    sync_api.expect(page.locator("#review-total")).not_to_have_text(total, timeout=40_000)  # no reload here
    assert int(page.locator("#review-total").inner_text().split()[0]) == int(total.split()[0]) - 1

    # Learning over time: curves with legends and axis labels, the same numbers in tables.
    page.goto("/ui/ns/mem/learning")
    assert page.locator("svg.chart").count() == 5
    assert page.locator("svg.chart g.legend text", has_text="all episodes").first.is_visible()
    assert page.locator("th[scope=row]", has_text="v1").count() == 1  # a policy version's row
    shot(page, "18-learning")

    # The other pages, for the record.
    for name, url in [
        ("12-trajectories", "/ui/ns/mem/trajectories"),
        ("13-retrievals", "/ui/ns/mem/retrievals"),
        ("14-retrieval", f"/ui/ns/mem/retrievals/{main.retrievals[0]}"),
        ("15-bulk-confirm", "/ui/ns/mem/reflections/bulk?action=retire&kind=heuristic"),
        ("16-keys", "/ui/admin/keys"),
        ("17-settings", "/ui/ns/mem/settings"),
    ]:
        page.goto(url)
        assert page.locator("h1").is_visible(), url
        shot(page, name)

    # A phone's width: every page reads without sideways scrolling.
    phone = browser.new_context(viewport={"width": 390, "height": 844}, base_url=server.url)
    phone.add_cookies(context.cookies())
    small = phone.new_page()
    for name, url in [
        ("phone-overview", "/ui/ns/mem"),
        ("phone-review", "/ui/ns/mem/review"),
        ("phone-reflection", reflection_url),
        ("phone-trajectory", f"/ui/ns/mem/trajectories/{main.trajectories[0]}"),
        ("phone-preview", f"/ui/ns/mem/preview?state={STATES[1]}&action=go+left"),
        ("phone-learning", "/ui/ns/mem/learning"),
    ]:
        small.goto(url)
        assert wider_than_screen(small) == [], url
        shot(small, name)
    phone.close()

    # Dark mode follows the system's setting, charts included.
    dark = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=server.url, color_scheme="dark")
    dark.add_cookies(context.cookies())
    night = dark.new_page()
    night.goto("/ui/ns/mem")
    background = night.evaluate("getComputedStyle(document.body).backgroundColor")
    assert background == "rgb(22, 24, 28)", background
    assert night.evaluate("getComputedStyle(document.querySelector('svg .tick')).fill") != "rgb(68, 68, 68)"
    shot(night, "dark-overview")
    dark.close()

    # Sign out: the session is gone.
    page.goto("/ui/ns/mem")
    page.get_by_role("button", name="Sign out").click()
    page.wait_for_url("**/ui/login")
    page.goto("/ui/ns/mem")
    assert "/ui/login" in page.url
    context.close()


def test_the_review_queue_filtered_to_llm_candidates_from_the_keyboard(site: Any, browser: Any) -> None:
    server, api, main, _, _ = site
    db = Database(server.database_url)
    try:
        bulk = add_llm_candidates(db, "mem", main.trajectories[0])[:2]
        single = add_llm_candidates(db, "mem", main.trajectories[0], suffix="-2")[:2]
        add_merges(db, "mem", bulk[0], 22)
    finally:
        db.dispose()
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=server.url)
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.goto("/ui/login")
    page.get_by_label("API key").fill(ADMIN_KEY)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/ui/namespaces")

    def current() -> str:
        return page.locator(".review-item.current h2 a").get_attribute("href").rsplit("/", 1)[1]

    page.goto(f"/ui/ns/mem/review?reflector={LLM_REFLECTOR}")
    assert page.locator("h1").inner_text().endswith("4 waiting")
    assert page.get_by_text(LONG_GUIDELINE).first.is_visible()  # the whole guideline
    assert page.locator(".review-item").first.locator("dl.excerpt").first.is_visible()  # a cited step
    shot(page, "18-review-llm")

    # `?` shows the shortcuts over the page; Escape hides them.
    page.keyboard.press("?")
    assert page.locator("#shortcuts.overlay dl").is_visible()
    shot(page, "19-review-shortcuts")
    page.keyboard.press("Escape")
    assert page.locator("#shortcuts.overlay").count() == 0

    # The newest first at equal impact: the second batch, then the first.
    order = [current()]
    page.keyboard.press("j")
    order.append(current())
    page.keyboard.press("k")
    assert current() == order[0] and order[1] != order[0]

    # r retires the focused item, a approves the next (each a decision of its own).
    with page.expect_navigation():
        page.keyboard.press("r")
    assert "done=retire" in page.url and f"reflector={LLM_REFLECTOR}" in page.url
    retired = order[0]
    approved = current()
    with page.expect_navigation():
        page.keyboard.press("a")
    assert page.get_by_text("Approved.").is_visible()
    assert {retired, approved} == set(single)

    # x selects rows; one decision on the selected ones.
    assert {current()} | {
        page.locator(".review-item").nth(1).locator("h2 a").get_attribute("href").rsplit("/", 1)[1]
    } == set(bulk)
    page.keyboard.press("x")
    page.keyboard.press("j")
    page.keyboard.press("x")
    assert page.locator("[data-select]:checked").count() == 2
    assert page.locator("[data-selected-count]").inner_text() == "2 ticked"
    page.get_by_label("Note for the selected").fill("both hold up")
    page.get_by_role("button", name="Approve selected").click()
    page.wait_for_url("**decided=2*")
    assert page.get_by_text("2 approved.").is_visible()
    assert page.get_by_text("Nothing to review under these filters").is_visible()
    shot(page, "20-review-decided")
    for rid, action, note in [(retired, "retire", None), (approved, "approve", None)] + [
        (rid, "approve", "both hold up") for rid in bulk
    ]:
        last = api.get(f"/v1/namespaces/mem/reflections/{rid}/history").json()[-1]
        assert (last["action"], last["actor"], last["note"]) == (action, "key:admin-env", note), rid

    # Its history: the 22 automatic merges are one row until opened.
    page.goto(f"/ui/ns/mem/reflections/{bulk[0]}")
    votes = page.locator("li.votes")
    assert votes.locator("summary").inner_text().startswith("22 merges, importance 1→23")
    assert not votes.locator("li").first.is_visible()
    height = page.evaluate("document.documentElement.scrollHeight")
    votes.locator("summary").click()
    assert votes.locator("li").count() == 22 and votes.locator("li").first.is_visible()
    assert page.evaluate("document.documentElement.scrollHeight") > height + 500  # what folding saved
    shot(page, "21-reflection-merges-opened")
    context.close()
