"""Every page renders what it promises, and every curation form does what it says
(recorded with actor and note), on SQLite and PostgreSQL, through the real app."""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pytest
from markupsafe import escape
from sqlalchemy import func, select

from store.models import Reflection, Retrieval, RetrievalItem
from tests.conftest import ADMIN_KEY
from tests.ui.conftest import UiWorld, build_world
from tests.ui.seed import LLM_REFLECTOR, LONG_GUIDELINE, STATES, add_holdout, add_llm_candidates, add_merges
from tests.ui.ui_client import csrf_of, post_form


def _reflection_ids(world: UiWorld, status: str | None = None, kind: str = "exemplar") -> list[str]:
    with world.db.read() as s:
        stmt = (
            select(Reflection.id).where(Reflection.namespace == "mem", Reflection.kind == kind).order_by(Reflection.pk)
        )
        if status:
            stmt = stmt.where(Reflection.status == status)
        return list(s.scalars(stmt))


def test_overview_shows_counts_charts_queue_and_latency(world: UiWorld) -> None:
    page = world.web(ADMIN_KEY).get("/ui/ns/mem").text
    assert page.count('<svg class="chart"') == 3
    assert "Trajectories per day" in page and "Success rate per day" in page
    assert "reflect.contrastive" in page  # the failed job's kind in the queue table
    assert re.search(r"<p class=\"big\">6</p><p>67% of all episodes succeeded", page)  # 6 episodes, 4 succeeded
    assert re.search(r"\d+\.\d ms</p><p>p50", page)  # retrievals carry their server time
    assert "No snapshot pins" in page
    assert (
        world.api.post("/v1/namespaces/mem/snapshots", json={"id": "run-7", "note": "before training"}).status_code
        == 201
    )
    page = world.web(ADMIN_KEY).get("/ui/ns/mem").text
    assert "run-7" in page and "before training" in page


def test_trajectory_list_filters_and_the_step_viewer(world: UiWorld) -> None:
    web = world.web(ADMIN_KEY)
    failed = web.get("/ui/ns/mem/trajectories?success=false").text
    assert "mem-ep2" in failed and "mem-ep5" in failed and "mem-ep0" not in failed
    assert "mem-ep1" in web.get("/ui/ns/mem/trajectories?agent=agent-1&policy_version=v0").text
    assert "mem-ep0" not in web.get("/ui/ns/mem/trajectories?task=reach+the+garden").text
    # The task filter is a case-insensitive substring search; % and _ are plain characters.
    found = web.get("/ui/ns/mem/trajectories?task=THE+GARD").text
    assert "mem-ep1" in found and "mem-ep3" in found and "mem-ep0" not in found
    assert "No trajectory matches" in web.get("/ui/ns/mem/trajectories?task=the%25garden").text
    assert "No trajectory matches" in web.get("/ui/ns/mem/trajectories?environment=nowhere").text
    episode = web.get("/ui/ns/mem/trajectories/mem-ep0?highlight=1-1").text
    assert 'id="step-0"' in episode and 'id="step-2"' in episode
    assert 'id="step-1" class="step highlight"' in episode
    assert "subgoal 1" in episode and "take red key" in episode
    for rid in world.main.retrievals:  # the retrievals made during the episode, with what they served
        assert rid in episode
    assert "✓ success" in episode and "✗ failure" in episode


def test_the_trajectories_page_exports_its_filtered_set_as_a_trainer_dataset(world: UiWorld) -> None:
    web = world.web(world.key("operator", ["mem"]))
    page = web.get("/ui/ns/mem/trajectories?task=GARDEN&success=true").text
    form = page[page.index('action="/ui/ns/mem/export"') :]
    assert 'name="task" value="GARDEN"' in form and 'name="success" value="true"' in form
    r = web.get("/ui/ns/mem/export?dataset=trajectories&format=jsonl&task=GARDEN&success=true")
    assert r.status_code == 200 and "attachment" in r.headers["content-disposition"]
    rows = [json.loads(line) for line in r.text.splitlines()]
    api = world.api.get(
        "/v1/namespaces/mem/export", params={"dataset": "trajectories", "task_contains": "GARDEN", "success": "true"}
    )
    assert [row["id"] for row in rows] == [json.loads(line)["id"] for line in api.text.splitlines()]
    assert sorted(row["id"] for row in rows) == ["mem-ep1", "mem-ep3"]  # "reach the garden", succeeded
    r = web.get("/ui/ns/mem/export?dataset=poems")
    assert r.status_code == 422 and "<code>dataset</code>" in r.text
    assert web.get("/ui/ns/other/export?dataset=trajectories").status_code == 404


def test_bad_filters_are_a_422_naming_the_field(world: UiWorld) -> None:
    web = world.web(ADMIN_KEY)
    for url, field in [
        ("/ui/ns/mem/reflections?utility_min=abc", "utility_min"),
        ("/ui/ns/mem/reflections?kind=poem", "kind"),
        ("/ui/ns/mem/trajectories?success=maybe", "success"),
        ("/ui/ns/mem/trajectories?created_after=yesterday", "created_after"),
        ("/ui/ns/mem/reflections?cursor=bm9wZQ", "cursor"),
        ("/ui/ns/mem/trajectories/mem-ep0?highlight=9-2", "highlight"),
    ]:
        r = web.get(url)
        assert r.status_code == 422, url
        assert f"<code>{field}</code>" in r.text, url
    for page in ("reflections", "trajectories", "retrievals", "review", "jobs", "settings"):
        r = web.get(f"/ui/ns/mem/{page}?cursor=" + "x" * 401)  # refused for its length, before it is decoded
        assert r.status_code == 422 and "rule: <code>max_length</code>" in r.text, page


def test_lists_page_with_a_cursor(database_url: str, tmp_path: Path) -> None:
    for world in build_world(database_url, tmp_path, page_size=2):
        web = world.web(ADMIN_KEY)
        seen: list[str] = []
        url = "/ui/ns/mem/trajectories"
        while url:
            page = web.get(url).text
            seen += re.findall(r'href="/ui/ns/mem/trajectories/(mem-ep\d)"', page)
            nxt = re.search(r'rel="next" href="([^"]+)"', page)
            url = nxt.group(1).replace("&amp;", "&") if nxt else ""
        assert seen == [f"mem-ep{i}" for i in range(5, -1, -1)]
        retrievals = web.get("/ui/ns/mem/retrievals").text
        nxt = re.search(r'rel="next" href="([^"]+)"', retrievals)
        assert nxt, "4 retrievals at 2 a page"
        second = web.get(nxt.group(1).replace("&amp;", "&")).text
        first_ids = set(re.findall(r"r_[0-9a-f]{32}", retrievals))
        assert first_ids.isdisjoint(re.findall(r"r_[0-9a-f]{32}", second))


def test_reflection_page_edit_makes_a_version_with_a_diff(world: UiWorld) -> None:
    web = world.web(ADMIN_KEY)
    rid = _reflection_ids(world, "active")[-1]
    url = f"/ui/ns/mem/reflections/{rid}"
    page = web.get(url).text
    assert "Posterior mean" in page and "Evidence (" in page and "History" in page
    assert re.search(r'href="/ui/ns/mem/trajectories/mem-ep\d\?highlight=\d-\d#step-\d"', page)
    content = world.api.get(f"/v1/namespaces/mem/reflections/{rid}").json()["content"]
    edited = {**content, "action": "open the door gently"}
    r = post_form(
        web,
        url,
        f"{url}/edit",
        {"content": json.dumps(edited), "text": "edited text", "note": "clearer", "expected_version": "1"},
    )
    assert r.status_code == 303 and r.headers["location"].endswith("?done=edit")
    page = web.get(r.headers["location"]).text
    assert "Saved as a new version" in page and "version 2" in page
    # A word-level diff of the field that changed, escaped.
    diff = re.search(r'<div class="diff" aria-label="changes in version 2">(.*?)</div>', page, re.S).group(1)
    assert '<span class="field">action</span>: ' in diff and "<ins>open the door gently</ins>" in diff
    assert re.search(r"<del>[^<]+</del>", diff)
    assert "“clearer”" in page and "key:admin-env" in page
    after = world.api.get(f"/v1/namespaces/mem/reflections/{rid}").json()
    assert (
        after["version"] == 2
        and after["text"] == "edited text"
        and after["content"]["action"] == "open the door gently"
    )


def test_an_edit_that_is_not_json_or_is_stale_changes_nothing(world: UiWorld) -> None:
    web = world.web(ADMIN_KEY)
    rid = _reflection_ids(world, "active")[-1]
    url = f"/ui/ns/mem/reflections/{rid}"
    r = post_form(web, url, f"{url}/edit", {"content": "{not json", "text": "x"})
    assert r.status_code == 422 and "not a JSON object" in r.text and "{not json" in r.text  # what was typed is kept
    r = post_form(web, url, f"{url}/edit", {"content": json.dumps({"observation": "o"}), "text": "x"})
    assert r.status_code == 422 and "observation and action" in r.text
    r = post_form(
        web, url, f"{url}/edit", {"content": json.dumps({"observation": "o", "action": "a"}), "expected_version": "7"}
    )
    assert r.status_code == 409 and "is at version 1, not 7" in r.text
    assert world.api.get(f"/v1/namespaces/mem/reflections/{rid}").json()["version"] == 1


def test_a_stale_edit_keeps_the_form_shows_what_changed_and_can_be_resubmitted(world: UiWorld) -> None:
    web = world.web(ADMIN_KEY)
    rid = _reflection_ids(world, "active")[-1]
    url = f"/ui/ns/mem/reflections/{rid}"
    page = web.get(url).text  # the operator opens version 1 ...
    content = world.api.get(f"/v1/namespaces/mem/reflections/{rid}").json()["content"]
    theirs = {**content, "action": "open the door gently"}
    # ... while someone else saves version 2.
    other = {**content, "result": "the door creaks"}
    r = world.api.patch(
        f"/v1/namespaces/mem/reflections/{rid}", json={"content": other, "note": "meanwhile", "expected_version": 1}
    )
    assert r.status_code == 200, r.text
    form = {"content": json.dumps(theirs), "text": "my text", "note": "mine", "expected_version": "1"}
    r = web.post(f"{url}/edit", data={"csrf_token": csrf_of(page), **form})
    assert r.status_code == 409
    assert "open the door gently" in r.text and ">my text</textarea>" in r.text  # what was typed is kept
    assert "Changed since version 1" in r.text and "the door creaks" in r.text and "“meanwhile”" in r.text
    assert "Your edit against version 2" in r.text
    assert 'name="expected_version" value="2"' in r.text and "Save my edit over version 2" in r.text
    assert world.api.get(f"/v1/namespaces/mem/reflections/{rid}").json()["version"] == 2
    # Resubmitting the form as the 409 page holds it saves it over version 2.
    r = web.post(
        f"{url}/edit", data={"csrf_token": csrf_of(r.text), **form, "expected_version": "2"}, follow_redirects=False
    )
    assert r.status_code == 303
    after = world.api.get(f"/v1/namespaces/mem/reflections/{rid}").json()
    assert (after["version"], after["text"], after["content"]["action"]) == (3, "my text", "open the door gently")


def test_retire_and_restore_leave_and_rejoin_retrieval(world: UiWorld) -> None:
    web = world.web(ADMIN_KEY)
    rid = _reflection_ids(world, "active")[-1]
    text = world.api.get(f"/v1/namespaces/mem/reflections/{rid}").json()["text"]

    def served() -> list[str]:
        body = {"state": {"observation": text}, "k": 50}
        return [i["id"] for i in world.api.post("/v1/namespaces/mem/retrieve", json=body).json()["items"]]

    assert rid in served()
    url = f"/ui/ns/mem/reflections/{rid}"
    r = post_form(web, url, f"{url}/status", {"status": "retired", "note": "misleading"})
    assert r.status_code == 303
    assert "Retired" in web.get(r.headers["location"]).text
    assert rid not in served()
    r = post_form(web, url, f"{url}/status", {"status": "active"})
    assert "Restored" in web.get(r.headers["location"]).text
    assert rid in served()
    history = world.api.get(f"/v1/namespaces/mem/reflections/{rid}/history").json()
    assert [(h["action"], h["note"]) for h in history[-2:]] == [("retire", "misleading"), ("restore", None)]


def test_search_goes_through_retrieval_and_logs_nothing(world: UiWorld) -> None:
    web = world.web(ADMIN_KEY)
    logged = len(world.api.get("/v1/namespaces/mem/trajectories/mem-ep0").json()["retrieval_ids"] or [])
    before = web.get("/ui/ns/mem/retrievals").text.count("<article")
    page = web.get(
        "/ui/ns/mem/reflections",
        params={"q": "You are in a kitchen. A red key lies on the table. The door to the north is locked."},
    ).text
    assert "Retrieval results for" in page
    assert "exact" in page  # the very state comes first, as an agent gets it
    first = re.search(r"<td>1</td><td><a href=\"[^\"]+\">([^<]+)</a>", page)
    assert first and "kitchen" in first.group(1)
    assert web.get("/ui/ns/mem/retrievals").text.count("<article") == before
    assert len(world.api.get("/v1/namespaces/mem/trajectories/mem-ep0").json()["retrieval_ids"] or []) == logged


def test_review_queue_orders_by_impact_and_records_decisions(world: UiWorld) -> None:
    web = world.web(ADMIN_KEY)
    page = web.get("/ui/ns/mem/review").text
    candidates, below = world.review_ids[:2], world.review_ids[2:]
    for rid in world.review_ids:
        assert rid in page
    assert "4 waiting" in page
    impacts = [float(x) for x in re.findall(r"impact (-?\d+\.\d+)", page)]
    assert len(impacts) == 4 and impacts == sorted(impacts, reverse=True)
    # Underperformers credited 100 times at 1/100 cost more than a candidate's few evidence rows weigh.
    assert page.index(below[0]) < page.index(candidates[0])
    r = post_form(
        web, "/ui/ns/mem/review", f"/ui/ns/mem/review/{below[0]}", {"decision": "retire", "note": "hurts", "focus": "0"}
    )
    assert r.status_code == 303 and "done=retire" in r.headers["location"]
    r = post_form(
        web, "/ui/ns/mem/review", f"/ui/ns/mem/review/{below[1]}", {"decision": "keep", "note": "rare but right"}
    )
    r = post_form(web, "/ui/ns/mem/review", f"/ui/ns/mem/review/{candidates[0]}", {"decision": "approve"})
    page = web.get(r.headers["location"]).text
    assert "1 waiting" in page and candidates[1] in page
    assert world.api.get(f"/v1/namespaces/mem/reflections/{below[0]}").json()["status"] == "retired"
    assert world.api.get(f"/v1/namespaces/mem/reflections/{candidates[0]}").json()["status"] == "active"
    kept = world.api.get(f"/v1/namespaces/mem/reflections/{below[1]}/history").json()[-1]
    assert (kept["action"], kept["actor"], kept["note"]) == ("keep", "key:admin-env", "rare but right")
    # A decision the item's state does not allow is a conflict, not a change.
    r = post_form(web, "/ui/ns/mem/review", f"/ui/ns/mem/review/{below[0]}", {"decision": "keep"})
    assert r.status_code == 409


def test_bulk_actions_confirm_the_count_and_refuse_a_changed_set(world: UiWorld) -> None:
    web = world.web(ADMIN_KEY)
    active = _reflection_ids(world, "active")
    page = web.get("/ui/ns/mem/reflections/bulk?action=retire&status=active&kind=exemplar").text
    n = len(active)
    assert f"Retire {n} reflection{'' if n == 1 else 's'}?" in page
    token = csrf_of(page)
    stale = {
        "csrf_token": token,
        "action": "retire",
        "status": "active",
        "kind": "exemplar",
        "confirm_count": str(len(active) + 1),
    }
    r = web.post("/ui/ns/mem/reflections/bulk", data=stale)
    assert r.status_code == 409 and "The set changed" in r.text
    assert _reflection_ids(world, "active") == active
    r = web.post(
        "/ui/ns/mem/reflections/bulk", data={**stale, "confirm_count": str(len(active)), "note": "spring cleaning"}
    )
    assert r.status_code == 200 and f"{n} reflection{'' if n == 1 else 's'} retired" in r.text
    assert _reflection_ids(world, "active") == []
    history = world.api.get(f"/v1/namespaces/mem/reflections/{active[0]}/history").json()[-1]
    assert (history["action"], history["note"]) == ("retire", "spring cleaning")


def test_a_bulk_action_without_a_filter_needs_the_explicit_everything_confirmation(world: UiWorld) -> None:
    web = world.web(ADMIN_KEY)
    page = web.get("/ui/ns/mem/reflections/bulk?action=retire").text
    not_retired = [r for r in _reflection_ids(world, kind="exemplar") if r not in _reflection_ids(world, "retired")]
    assert 'name="everything" value="true" required' in page  # no filter: the box must be ticked
    for rid in not_retired[-3:]:  # the preview lists (the newest of) what would change
        assert rid in page
    count = re.search(r'name="confirm_count" value="(\d+)"', page).group(1)
    form = {"csrf_token": csrf_of(page), "action": "retire", "confirm_count": count}
    r = web.post("/ui/ns/mem/reflections/bulk", data=form)
    assert r.status_code == 422 and "<code>everything</code>" in r.text
    assert _reflection_ids(world, "retired") == []
    r = web.post("/ui/ns/mem/reflections/bulk", data={**form, "everything": "true"})
    assert r.status_code == 200 and f"{count} reflections retired" in r.text
    filtered = web.get("/ui/ns/mem/reflections/bulk?action=approve&kind=exemplar").text
    assert 'name="everything"' not in filtered  # a filter is set: no extra confirmation


def test_failed_jobs_show_their_error_and_retry(world: UiWorld) -> None:
    web = world.web(ADMIN_KEY)
    page = web.get("/ui/ns/mem/jobs").text
    assert f"Job {world.failed_job_id}" in page and "ValueError: boom" in page
    assert "failed permanently after 5 attempts" in page and "of 5 attempts" not in page
    r = post_form(web, "/ui/ns/mem/jobs", f"/ui/ns/mem/jobs/{world.failed_job_id}/retry", {})
    assert r.status_code == 303
    assert "is queued again" in web.get(r.headers["location"]).text
    assert world.api.get(f"/v1/namespaces/mem/jobs/{world.failed_job_id}").json()["status"] == "queued"
    r = post_form(web, "/ui/ns/mem/jobs", f"/ui/ns/mem/jobs/{world.failed_job_id}/retry", {})
    assert r.status_code == 409 and "only failed jobs" in r.text


def test_review_and_jobs_pages_reload_on_request_and_mark_their_live_regions(world: UiWorld) -> None:
    web = world.web(ADMIN_KEY)
    for url, regions in [("/ui/ns/mem/jobs", ("jobs-queue", "jobs-failed")), ("/ui/ns/mem/review", ("review-total",))]:
        page = web.get(url).text
        assert 'http-equiv="refresh"' not in page and f'href="{url}?refresh=30">Reload every 30 s' in page
        for region in regions:  # what ui.js refetches and swaps in
            assert f'id="{region}" data-live' in page
        page = web.get(f"{url}?refresh=30").text
        assert '<meta http-equiv="refresh" content="30">' in page and f'href="{url}">stop</a>' in page
        assert web.get(f"{url}?refresh=1").status_code == 422  # at least 5 s


def test_retrieval_log_shows_state_scores_and_outcome(world: UiWorld) -> None:
    web = world.web(ADMIN_KEY)
    rid = world.main.retrievals[0]
    page = web.get(f"/ui/ns/mem/retrievals/{rid}").text
    assert "A red key lies on the table" in page and "✓ success" in page and "Similarity" in page
    assert 'href="/ui/ns/mem/trajectories/mem-ep0?highlight=0#step-0">mem-ep0, step 0</a>' in page  # the step it served
    assert re.search(r"<td class=\"n\">1</td><td><a href=\"/ui/ns/mem/reflections/", page)
    assert "mem-ep0" in web.get("/ui/ns/mem/retrievals?trajectory_id=mem-ep0").text


def test_admin_creates_a_key_seen_once_and_revokes_it(world: UiWorld) -> None:
    web = world.web(ADMIN_KEY)
    r = post_form(
        web, "/ui/admin/keys", "/ui/admin/keys", {"role": "agent", "namespaces": "mem, other", "description": "bot"}
    )
    assert r.status_code == 201
    secret = re.search(r'id="secret" readonly value="(rfx_[^"]+)"', r.text).group(1)
    assert (
        world.api.get("/v1/namespaces/mem/trajectories", headers={"Authorization": f"Bearer {secret}"}).status_code
        == 200
    )
    listing = web.get("/ui/admin/keys").text
    assert secret not in listing and "bot" in listing
    key_id = [k for k in world.api.get("/v1/keys").json() if k["description"] == "bot"][0]["id"]
    r = post_form(web, "/ui/admin/keys", f"/ui/admin/keys/{key_id}/revoke", {})
    assert r.status_code == 303
    assert (
        world.api.get("/v1/namespaces/mem/trajectories", headers={"Authorization": f"Bearer {secret}"}).status_code
        == 401
    )
    r = post_form(web, "/ui/admin/keys", "/ui/admin/keys", {"role": "agent", "namespaces": "Not A Name"})
    assert r.status_code == 422 and "namespaces[0]" in r.text
    r = post_form(web, "/ui/admin/keys", "/ui/admin/keys", {"role": "agent", "namespaces": "mem, nowhere"})
    assert r.status_code == 422 and "namespaces[1]" in r.text and "no such namespace" in r.text
    assert len(world.api.get("/v1/keys").json()) == 2  # the admin key and the revoked one


def test_admin_sees_when_a_key_was_last_used_and_rotates_it(world: UiWorld) -> None:
    web = world.web(ADMIN_KEY)
    r = post_form(web, "/ui/admin/keys", "/ui/admin/keys", {"role": "agent", "namespaces": "mem", "description": "rot"})
    old = re.search(r'id="secret" readonly value="(rfx_[^"]+)"', r.text).group(1)
    key_id = [k for k in world.api.get("/v1/keys").json() if k["description"] == "rot"][0]["id"]
    assert world.api.get("/v1/keys").json()[-1]["last_used_at"] is None
    headers = {"Authorization": f"Bearer {old}"}
    assert world.api.get("/v1/namespaces/mem/trajectories", headers=headers).status_code == 200
    used = [k for k in world.api.get("/v1/keys").json() if k["id"] == key_id][0]["last_used_at"]
    assert used is not None
    row = re.search(rf"<code>{key_id}</code>.*?</tr>", web.get("/ui/admin/keys").text, re.S).group(0)
    assert "s ago" in row and "Rotate" in row  # last used, and a rotate button
    r = post_form(web, "/ui/admin/keys", f"/ui/admin/keys/{key_id}/rotate", {"grace_seconds": "3600"})
    assert r.status_code == 201 and f"(replaces <code>{key_id}</code>)" in r.text
    new = re.search(r'id="secret" readonly value="(rfx_[^"]+)"', r.text).group(1)
    assert new != old
    for secret in (old, new):  # the old one still works in its grace period
        auth = {"Authorization": f"Bearer {secret}"}
        assert world.api.get("/v1/namespaces/mem/trajectories", headers=auth).status_code == 200
    assert "rotated: valid until" in web.get("/ui/admin/keys").text


def test_admin_edits_namespace_settings_validated_whole(world: UiWorld) -> None:
    web = world.web(ADMIN_KEY)
    page = web.get("/ui/ns/mem/settings").text
    current = json.loads(
        re.search(r'<textarea id="settings"[^>]*>(.*?)</textarea>', page, re.S).group(1).replace("&#34;", '"')
    )
    current["gamma"] = 0.5
    r = post_form(web, "/ui/ns/mem/settings", "/ui/ns/mem/settings", {"settings": json.dumps(current)})
    assert r.status_code == 303
    assert world.api.get("/v1/namespaces/mem").json()["settings"]["gamma"] == 0.5
    for bad, field in [({**current, "gamma": 7}, "settings.gamma"), ({**current, "nonsense": 1}, "settings.nonsense")]:
        r = post_form(web, "/ui/ns/mem/settings", "/ui/ns/mem/settings", {"settings": json.dumps(bad)})
        assert r.status_code == 422 and field in r.text
    assert world.api.get("/v1/namespaces/mem").json()["settings"]["gamma"] == 0.5
    # The history: who changed which setting when, old -> new; refused saves leave none.
    page = web.get("/ui/ns/mem/settings").text
    history = page[page.index('id="h-changes"') :]
    assert history.count("<tr><td>") == 1
    assert "<code>gamma</code></td><td><code>0.95</code></td><td><code>0.5</code>" in history
    assert "key:admin-env" in history
    current["ranking"]["similarity_band"] = 0.07
    r = post_form(web, "/ui/ns/mem/settings", "/ui/ns/mem/settings", {"settings": json.dumps(current)})
    history = web.get("/ui/ns/mem/settings").text.split('id="h-changes"')[1]
    assert history.count("<tr><td>") == 2 and history.index("ranking.similarity_band") < history.index("gamma")


def test_a_frozen_namespace_refuses_curation_with_a_409_page(world: UiWorld) -> None:
    assert world.api.put("/v1/namespaces/mem/freeze").status_code == 200
    web = world.web(ADMIN_KEY)
    rid = _reflection_ids(world, "active")[0]
    url = f"/ui/ns/mem/reflections/{rid}"
    r = post_form(web, url, f"{url}/status", {"status": "retired"})
    assert r.status_code == 409 and "frozen" in r.text
    assert "frozen for evaluation" in web.get("/ui/ns/mem").text


def test_nul_characters_in_a_form_are_refused_naming_the_field(world: UiWorld) -> None:
    web = world.web(ADMIN_KEY)
    rid = _reflection_ids(world, "active")[0]
    url = f"/ui/ns/mem/reflections/{rid}"
    r = post_form(web, url, f"{url}/status", {"status": "retired", "note": "a\x00b"})
    assert r.status_code == 422 and "<code>note</code>" in r.text
    assert world.api.get(f"/v1/namespaces/mem/reflections/{rid}").json()["status"] == "active"


# --- what would the agent get: the preview, and what a logged retrieval served and earned ---

CONTEXT_RE = re.compile(r'<pre class="context" id="(?:served-)?context">(.*?)</pre>', re.S)


def _context_of(page: str) -> str:
    found = CONTEXT_RE.search(page)
    assert found, "no context block on the page"
    return html.unescape(found.group(1))


def _log_and_utility(world: UiWorld) -> tuple[int, list[tuple[str, int, int, int]]]:
    """Rows of the retrieval log, and every reflection's utility counters."""
    with world.db.read() as s:
        logged = s.scalar(select(func.count()).select_from(Retrieval)) or 0
        stmt = select(Reflection.id, Reflection.uses, Reflection.successes, Reflection.failures).order_by(Reflection.pk)
        return int(logged), [tuple(r) for r in s.execute(stmt)]  # type: ignore[misc]


PREVIEWS = [  # (form, the same request as POST …/retrieve takes it)
    (
        {"state": STATES[0], "k": "5", "format": "markdown", "max_chars": "700"},
        {"state": {"observation": STATES[0]}, "k": 5, "render": {"format": "markdown", "max_chars": 700}},
    ),
    (
        {"state": STATES[1], "internal_state": "subgoal 1", "task": "reach the garden", "kinds": ["exemplar"]},
        {
            "state": {"observation": STATES[1]},
            "internal_state": "subgoal 1",
            "task": "reach the garden",
            "kinds": ["exemplar"],
            "render": {"format": "markdown", "max_chars": 4000},
        },
    ),
    (  # a textarea's line breaks come as CRLF: the agent's are LF
        {"state": f"{STATES[2]}\r\nA note.\r\n", "kinds": ["exemplar", "evidence_card"], "max_chars": "2000"},
        {
            "state": {"observation": f"{STATES[2]}\nA note.\n"},
            "kinds": ["exemplar", "evidence_card"],
            "render": {"format": "markdown", "max_chars": 2000},
        },
    ),
    (
        {"state": STATES[2], "environment": "grid", "k": "3", "format": "text", "max_chars": "400"},
        {
            "state": {"observation": STATES[2]},
            "environment": "grid",
            "k": 3,
            "render": {"format": "text", "max_chars": 400},
        },
    ),
]


def test_preview_serves_exactly_what_retrieve_renders_and_logs_nothing(world: UiWorld) -> None:
    web = world.web(world.key("operator", ["mem"]))
    before = _log_and_utility(world)
    pages = []
    for form, _ in PREVIEWS:
        r = web.get("/ui/ns/mem/preview", params=form)
        assert r.status_code == 200, r.text
        pages.append(r.text)
    check = web.get("/ui/ns/mem/preview", params={"state": STATES[2], "action": "go east"})
    assert check.status_code == 200, check.text
    assert _log_and_utility(world) == before  # no retrieval log row, no utility changed
    assert "r_" not in "".join(re.findall(r"retrieval_id\W+\w+", "".join(pages)))

    for page, (_, body) in zip(pages, PREVIEWS, strict=True):
        api = world.api.post("/v1/namespaces/mem/retrieve", json=body).json()
        assert api["context"] and _context_of(page) == api["context"]  # the very string, byte for byte
        served = re.search(r'<table class="served">.*?</table>', page, re.S).group(0)  # type: ignore[union-attr]
        assert re.findall(r'href="/ui/ns/mem/reflections/([^"]+)"', served) == [i["id"] for i in api["items"]]
        for item in api["items"]:
            assert f"{item['score']:.3f}" in served and f"{item['similarity']:.3f}" in served
        assert served.count("✓ exact") == sum(i["exact_match"] for i in api["items"])
    assert "✓ exact" in pages[3]  # a stored (active) state is an exact match, as an agent gets it

    # The pre-action check: the numbers POST …/check gives for the same state and action.
    api = world.api.post(
        "/v1/namespaces/mem/check", json={"state": {"observation": STATES[2]}, "action": "go east"}
    ).json()
    risk = api["risk"]
    assert risk["attempts"] > 0
    verdict = re.search(r'<p class="verdict" id="verdict">(.*?)</p>', check.text).group(1)  # type: ignore[union-attr]
    assert f"Failed {risk['failures']} of {risk['attempts']} credited attempts" in verdict
    assert f"{100 * risk['low']:.0f}%–{100 * risk['high']:.0f}%" in verdict
    assert check.text.count("/ui/ns/mem/trajectories/") >= len(api["evidence"]) > 0
    for alt in api["alternatives"]:
        assert f"<code>{alt['action']}</code>" in check.text


def test_preview_bad_input_is_a_4xx_naming_the_field_and_keeps_the_form(world: UiWorld) -> None:
    web = world.web(ADMIN_KEY)
    before = _log_and_utility(world)
    state = {"state": "a typed state"}
    for params, field in [
        ({**state, "k": "0"}, "k"),
        ({**state, "k": "101"}, "k"),
        ({**state, "k": "many"}, "k"),
        ({**state, "kinds": ["exemplar", "poem"]}, "kinds"),
        ({**state, "max_chars": "10"}, "max_chars"),
        ({**state, "format": "html"}, "format"),
        ({"state": "x" * 2001}, "state"),
        ({**state, "action": "y" * 2001}, "action"),
        ({"state": "  "}, "state"),
    ]:
        r = web.get("/ui/ns/mem/preview", params=params)
        assert r.status_code == 422, (params, r.status_code)
        assert f"field <code>{field}</code>" in r.text and 'role="alert"' in r.text, params
        assert 'aria-invalid="true"' in r.text, params
        if params["state"].strip() and len(params["state"]) <= 2000:
            assert "a typed state</textarea>" in r.text  # what was typed is kept
        assert 'id="context"' not in r.text
    assert _log_and_utility(world) == before
    assert web.get("/ui/ns/mem/preview").status_code == 200  # the empty form


def test_a_retrieval_page_shows_the_context_served_and_what_its_outcome_credited(world: UiWorld) -> None:
    web = world.web(ADMIN_KEY)
    base = "/v1/namespaces/mem"

    def uses(ids: list[str]) -> list[int]:
        return [world.api.get(f"{base}/reflections/{i}").json()["utility"]["uses"] for i in ids]

    def credit_column(page: str) -> list[str]:
        return re.findall(r'<td class="credit"><span class="tag[^"]*">([^<]+)</span>', page)

    # An outcome naming no items credits the top credit.unnamed_top_k: 2 here, of the 3 served.
    page = web.get("/ui/ns/mem/settings").text
    settings = json.loads(
        html.unescape(re.search(r'<textarea id="settings"[^>]*>(.*?)</textarea>', page, re.S).group(1))  # type: ignore[union-attr]
    )
    settings["credit"]["unnamed_top_k"] = 2
    r = post_form(web, "/ui/ns/mem/settings", "/ui/ns/mem/settings", {"settings": json.dumps(settings)})
    assert r.status_code == 303

    for outcome in [
        {"success": True, "item_ids": None},  # names none: the top 2 are credited
        {"success": False, "item_ids": ["second"]},  # names the second item served
    ]:
        body = {
            "state": {"observation": STATES[2]},
            "k": 5,
            "filters": {"status": ["active", "candidate"]},  # enough items to see the rank bound
            "render": {"format": "markdown", "max_chars": 600},
        }
        served = world.api.post(f"{base}/retrieve", json=body).json()
        ids = [i["id"] for i in served["items"]]
        assert len(ids) == 3
        page = web.get(f"/ui/ns/mem/retrievals/{served['retrieval_id']}").text
        assert _context_of(page) == served["context"]  # the block as it was sent
        assert credit_column(page) == []  # no outcome yet: no credit column
        if outcome["item_ids"] is not None:
            outcome["item_ids"] = [ids[1]]
        was = uses(ids)
        r = world.api.post(f"{base}/retrievals/{served['retrieval_id']}/outcome", json=outcome)
        assert r.status_code == 200, r.text
        gained = [after - b for after, b in zip(uses(ids), was, strict=True)]
        assert r.json()["credited_items"] == sum(gained)
        page = web.get(f"/ui/ns/mem/retrievals/{served['retrieval_id']}").text
        shown = credit_column(page)
        assert shown == ["✓ credited" if g else "not credited" for g in gained], (shown, gained)
        with world.db.read() as s:
            flags = s.execute(
                select(RetrievalItem.credited)
                .where(RetrievalItem.retrieval_id == served["retrieval_id"])
                .order_by(RetrievalItem.rank)
            ).scalars()
            assert list(flags) == [bool(g) for g in gained]
        assert gained == ([1, 1, 0] if outcome["item_ids"] is None else [0, 1, 0])
        assert _context_of(page) == served["context"]
    # Frozen for evaluation: the outcome is recorded, nothing credited, and the page says so.
    assert world.api.put(f"{base}/freeze").status_code == 200
    served = world.api.post(f"{base}/retrieve", json=body).json()
    was = uses([i["id"] for i in served["items"]])
    assert world.api.post(f"{base}/retrievals/{served['retrieval_id']}/outcome", json={"success": True}).is_success
    assert uses([i["id"] for i in served["items"]]) == was
    page = web.get(f"/ui/ns/mem/retrievals/{served['retrieval_id']}").text
    assert credit_column(page) == ["not credited"] * len(was)
    # A retrieval asked without render has no context to show, and says so.
    page = web.get(f"/ui/ns/mem/retrievals/{world.main.retrievals[0]}").text
    assert "None kept" in page and 'id="served-context"' not in page
    assert "/ui/ns/mem/preview?state=" in page  # ask the same again, now


def test_review_queue_filters_by_reason_kind_and_reflector_with_full_content_and_cited_steps(world: UiWorld) -> None:
    llm = add_llm_candidates(world.db, "mem", "mem-ep0")
    web = world.web(ADMIN_KEY)
    page = web.get("/ui/ns/mem/review").text
    assert "All (7)" in page and "Candidate (5)" in page and "Below baseline (2)" in page
    assert f"{LLM_REFLECTOR} (2)" in page and "llm_skills (1)" in page
    # The LLM candidates, whatever their impact: a filter by reflector.
    page = web.get(f"/ui/ns/mem/review?reflector={LLM_REFLECTOR}").text
    assert "2 waiting" in page and "All (2)" in page and "Candidate (2)" in page  # tabs count under the filter
    assert "h_llm_keys" in page and "h_llm_dark" in page and "s_llm_garden" not in page
    assert not any(rid in page for rid in world.review_ids)
    assert str(escape(LONG_GUIDELINE)) in page  # the whole guideline, not a cut
    assert "keys open doors of their colour" in page and "a locked door and a key in the room" in page
    # The cited steps inline (state, action, result), linked to the trajectory's anchor.
    assert page.count('href="/ui/ns/mem/trajectories/mem-ep0?highlight=1-2#step-1"') == 2
    assert "<dt>Step 1 state</dt><dd>You are in a hallway." in page and "<code>go left</code>" in page
    assert "<dt>Step 2 state</dt>" in page
    # Decisions keep the filters: the form sends them back.
    assert f'name="reflector" value="{LLM_REFLECTOR}"' in page
    page = web.get("/ui/ns/mem/review?reason=candidate&kind=skill").text
    assert "1 waiting" in page and "s_llm_garden" in page and "h_llm_keys" not in page
    page = web.get("/ui/ns/mem/review?reason=below_baseline").text
    assert "2 waiting" in page and all(rid in page for rid in world.review_ids[2:]) and llm[0] not in page
    assert web.get("/ui/ns/mem/review?reason=bored").status_code == 422


def test_one_decision_on_the_selected_rows_is_recorded_for_each(world: UiWorld) -> None:
    llm = add_llm_candidates(world.db, "mem", "mem-ep0")
    web = world.web(ADMIN_KEY)
    url = f"/ui/ns/mem/review?reflector={LLM_REFLECTOR}"
    token = csrf_of(web.get(url).text)
    r = web.post(
        "/ui/ns/mem/review",
        data={
            "csrf_token": token,
            "id": llm[:2],
            "decision": "approve",
            "note": "both right",
            "reflector": LLM_REFLECTOR,
        },
        follow_redirects=False,
    )
    assert r.status_code == 303
    assert r.headers["location"] == f"/ui/ns/mem/review?reflector={LLM_REFLECTOR}&done=approve&decided=2"
    page = web.get(r.headers["location"]).text
    assert "2 approved." in page and "Nothing to review under these filters" in page
    for rid in llm[:2]:
        last = world.api.get(f"/v1/namespaces/mem/reflections/{rid}/history").json()[-1]
        assert (last["action"], last["actor"], last["note"]) == ("approve", "key:admin-env", "both right")
    # A state that does not allow the decision is refused; the others go through.
    below = world.review_ids[2]
    r = web.post(
        "/ui/ns/mem/review",
        data={"csrf_token": token, "id": [llm[0], below, llm[2]], "decision": "retire"},
        follow_redirects=False,
    )
    assert "decided=3" in r.headers["location"]
    r = web.post("/ui/ns/mem/review", data={"csrf_token": token, "id": [llm[0], "no-such-id"], "decision": "keep"})
    assert r.status_code == 200 and "0 kept; 2 refused" in r.text
    assert world.api.get(f"/v1/namespaces/mem/reflections/{below}").json()["status"] == "retired"
    r = web.post("/ui/ns/mem/review", data={"csrf_token": token, "decision": "retire"}, follow_redirects=False)
    assert r.status_code == 422 and "<code>id</code>" in r.text


def test_reflection_history_folds_merges_and_lists_where_it_was_served(world: UiWorld) -> None:
    llm = add_llm_candidates(world.db, "mem", "mem-ep0")
    add_merges(world.db, "mem", llm[0], 22)
    web = world.web(ADMIN_KEY)
    url = f"/ui/ns/mem/reflections/{llm[0]}"
    content = world.api.get(f"/v1/namespaces/mem/reflections/{llm[0]}").json()["content"]
    edited = {**content, "guideline": content["guideline"].replace("look around the room", "search the room")}
    r = post_form(web, url, f"{url}/edit", {"content": json.dumps(edited), "note": "shorter"})
    assert r.status_code == 303
    page = web.get(url).text
    history = page[page.index('id="h-history"') :]
    runs = re.findall(r'<li class="votes"><details><summary>([^·<]+)', history)
    assert runs == ["22 merges, importance 1→23 "]
    # The merges are there, folded: each inside the one <details>.
    folded = history[history.index("<details>") : history.index("</details>")]
    assert folded.count("<strong>merge</strong>") == 22 and "<strong>create</strong>" not in folded
    # The edit after them: a word-level diff of the guideline, escaped.
    assert "door, <del>look around </del><ins>search </ins>the room" in history
    # Served in: the newest retrievals that served an item, linked, with the outcome.
    served = _reflection_ids(world, "active")
    for rid in served:
        page = web.get(f"/ui/ns/mem/reflections/{rid}").text
        if "Served in (the newest 0)" not in page:
            break
    section = page[page.index('id="h-served-in"') : page.index('id="h-history"')]
    assert re.search(r'href="/ui/ns/mem/retrievals/r_[0-9a-f]{32}"', section)
    assert "✓ success" in section or "✗ failure" in section
    assert re.search(r'href="/ui/ns/mem/trajectories/mem-ep0\?highlight=\d#step-\d"', section)


def test_reflections_sort_by_utility_and_uses_with_cursors_and_retrievals_follow_their_step(
    database_url: str, tmp_path: Path
) -> None:
    for world in build_world(database_url, tmp_path, page_size=2):
        with world.db.write() as s:  # varied utility counters to sort on
            rows = s.scalars(select(Reflection).where(Reflection.namespace == "mem").order_by(Reflection.pk)).all()
            for n, row in enumerate(rows):
                row.uses, row.successes, row.failures = n % 5 * 3, n % 3, n % 5 * 3 - n % 3
        listed = world.api.get("/v1/namespaces/mem/reflections", params={"limit": 200}).json()["items"]
        api = {r["id"]: r["utility"] for r in listed}
        anyone = world.api.post(
            "/v1/namespaces/mem/retrieve",
            json={"state": {"observation": "x"}, "k": 1, "filters": {"status": ["active", "candidate", "retired"]}},
        ).json()["items"][0]
        baseline = anyone["utility"]["baseline"]

        def mean(u: dict, baseline: float = baseline) -> float:
            return (2 * baseline + u["successes"]) / (2 + u["successes"] + u["failures"])

        web = world.web(ADMIN_KEY)
        for sort, value, descending in [
            ("uses", lambda u: u["uses"], True),
            ("utility", mean, True),
            ("utility_low", mean, False),
        ]:
            seen: list[str] = []
            url = f"/ui/ns/mem/reflections?sort={sort}"
            while url:
                page = web.get(url).text
                seen += re.findall(r'<td><a href="/ui/ns/mem/reflections/([^"?/]+)">', page)
                nxt = re.search(r'rel="next" href="([^"]+)"', page)
                url = nxt.group(1).replace("&amp;", "&") if nxt else ""
            assert sorted(seen) == sorted(api), sort  # every row once across the pages
            values = [value(api[rid]) for rid in seen]
            assert values == sorted(values, reverse=descending), (sort, values)
        assert web.get("/ui/ns/mem/reflections?sort=uses&cursor=" + "x").status_code == 422

        # The trajectory: each retrieval right after the step it served; the one that
        # named no step at the end of the last page; 2 steps a page.
        rids = world.main.retrievals  # steps 0, 1, 2, then none
        first = web.get("/ui/ns/mem/trajectories/mem-ep0").text
        assert 'id="step-1"' in first and 'id="step-2"' not in first and "page 1 of 2" in first
        assert first.index('id="step-0"') < first.index(rids[0]) < first.index('id="step-1"') < first.index(rids[1])
        assert rids[2] not in first and rids[3] not in first.split('id="step-1"')[1].split("<h2")[0]
        last = web.get("/ui/ns/mem/trajectories/mem-ep0?highlight=2-2").text  # an evidence link opens its page
        assert 'id="step-2" class="step highlight"' in last and 'id="step-0"' not in last
        assert (
            last.index('id="step-2"')
            < last.index(rids[2])
            < last.index("Retrievals that named no step")
            < last.index(rids[3])
        )


def test_an_item_with_a_negative_causal_effect_is_queued_and_its_page_shows_the_estimate(world: UiWorld) -> None:
    items = world.api.get("/v1/namespaces/mem/reflections", params={"status": "active", "limit": 50}).json()["items"]
    harmful = next(i["id"] for i in items if i["id"] not in world.review_ids)
    neutral = world.review_ids[0]  # a candidate: its effect reads as unclear, and it is queued for another reason
    add_holdout(world.db, "mem", harmful, served=(40, 8), withheld=(40, 32))
    add_holdout(world.db, "mem", neutral, served=(40, 20), withheld=(40, 20))
    api_effect = world.api.get(f"/v1/namespaces/mem/reflections/{harmful}/effect").json()
    assert api_effect["verdict"] == "hurts" and api_effect["served"]["units"] == 40
    assert world.api.get(f"/v1/namespaces/mem/reflections/{neutral}/effect").json()["verdict"] == "unclear"

    web = world.web(ADMIN_KEY)
    page = web.get("/ui/ns/mem/review", params={"reason": "negative_effect"}).text
    assert harmful in page and neutral not in page
    assert "Negative effect (1)" in page and f"/ui/ns/mem/reflections/{harmful}#effect" in page
    assert "5 waiting" in web.get("/ui/ns/mem/review").text  # the 4 seeded cases and this one
    # Impact: the successes it cost the episodes it was served to, -effect × 40.
    (impact,) = [float(x) for x in re.findall(r"impact (-?\d+\.\d+)", page)]
    assert impact == pytest.approx(-api_effect["effect"] * 40, abs=0.005)

    detail = web.get(f"/ui/ns/mem/reflections/{harmful}").text
    assert 'id="effect"' in detail and "hurts" in detail
    assert f"{api_effect['effect']:+.3f}" in detail and f"{api_effect['low']:+.3f}" in detail

    r = post_form(web, "/ui/ns/mem/review", f"/ui/ns/mem/review/{harmful}", {"decision": "keep", "note": "needed"})
    assert r.status_code == 303
    assert harmful not in web.get("/ui/ns/mem/review", params={"reason": "negative_effect"}).text
