"""Every page renders what it promises, and every curation form does what it says
(recorded with actor and note), on SQLite and PostgreSQL, through the real app."""

from __future__ import annotations

import json
import re
from pathlib import Path

from sqlalchemy import select

from store.models import Reflection
from tests.conftest import ADMIN_KEY
from tests.ui.conftest import UiWorld, build_world
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
    assert '<span class="add">+  &#34;action&#34;: &#34;open the door gently&#34;' in page
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
