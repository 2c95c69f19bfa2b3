"""The Learning page and a reflection's utility over time, checked against numbers
computed here from what the JSON API says (episodes, reflections, what each
retrieval served and the outcomes reported)."""

from __future__ import annotations

import html
import math
import re
from collections import Counter, defaultdict
from typing import Any

from tests.conftest import ADMIN_KEY
from tests.fixtures import drain
from tests.ui.conftest import UiWorld
from tests.ui.seed import STATES, seed

NS = "learn"
PRIOR = 2.0  # the ranking's prior strength (docs/retrieval.md)


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{100 * value:.0f}%"


def _posterior(successes: int, failures: int, baseline: float) -> float:
    return (PRIOR * baseline + successes) / (PRIOR + successes + failures)


def _all(api: Any, url: str) -> list[dict[str, Any]]:
    out, cursor = [], None
    while True:
        page = api.get(url, params={"limit": 200, **({"cursor": cursor} if cursor else {})}).json()
        out += page["items"]
        cursor = page.get("next_cursor")
        if not cursor:
            return out


def _rows(page: str, first: str) -> list[list[str]]:
    """The cells of the table rows whose header cell is `first`."""
    out = []
    for row in re.findall(r"<tr><th scope=\"row\">(.*?)</tr>", page, re.S):
        cells = [html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in re.split(r"</t[hd]><td>", row)]
        if cells[0] == first:
            out.append([c.removesuffix("</td>") for c in cells])
    return out


def _learning_world(world: UiWorld) -> dict[str, Any]:
    """Nine episodes (three policy versions), its reflections, and retrievals whose
    outcomes name the first item served."""
    api = world.api
    seed(api, NS, episodes=9)
    drain(api)
    served: Counter[str] = Counter()
    credits: list[tuple[str, bool]] = []
    for i in range(8):
        r = api.post(f"/v1/namespaces/{NS}/retrieve", json={"state": {"observation": STATES[i % 2]}, "k": 3})
        assert r.status_code == 200, r.text
        items = [it["id"] for it in r.json()["items"]]
        served.update(items)
        success = i % 3 != 0
        body = {"success": success, "item_ids": items[:1]}
        reported = api.post(f"/v1/namespaces/{NS}/retrievals/{r.json()['retrieval_id']}/outcome", json=body)
        assert reported.status_code in (200, 201), reported.text
        credits.append((items[0], success))
    return {"served": served, "credits": credits}


def test_learning_curves_and_reflector_table_match_the_api(world: UiWorld) -> None:
    data = _learning_world(world)
    web = world.web(ADMIN_KEY)
    page = web.get(f"/ui/ns/{NS}/learning?block_size=4").text
    assert page.count('<svg class="chart"') == 5
    assert "episodes, in completion order (blocks of 4)" in page  # the x-axis label
    assert 'class="legend"' in page  # the line and the "all episodes" reference are named

    episodes = sorted(_all(world.api, f"/v1/namespaces/{NS}/trajectories"), key=lambda t: (t["closed_at"], t["id"]))
    assert len(episodes) == 9
    for start in range(0, 9, 4):
        block = episodes[start : start + 4]
        wins = sum(t["outcome"]["success"] is True for t in block)
        rewards = [t["outcome"]["reward"] for t in block]
        label = f"{start + 1}–{start + len(block)}" if len(block) > 1 else str(start + 1)
        row = _rows(page, label)
        assert row, label
        assert row[0][1:6] == [
            str(len(block)),
            str(len(block)),
            str(wins),
            _pct(wins / len(block)),
            f"{sum(rewards) / len(rewards):.3f}",
        ], (label, row)

    by_version: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for t in episodes:
        by_version[t["policy_version"]].append(t)
    assert list(by_version) == ["v0", "v1", "v2"]
    for version, group in by_version.items():
        wins = sum(t["outcome"]["success"] is True for t in group)
        row = _rows(page, version)
        assert row and row[0][1:5] == [str(len(group)), str(len(group)), str(wins), _pct(wins / len(group))], row

    reflections = _all(world.api, f"/v1/namespaces/{NS}/reflections")
    outcomes = data["credits"]
    baseline = (sum(s for _, s in outcomes) + 1) / (len(outcomes) + 2)
    served = data["served"]
    total_served = sum(served.values())
    for name in {r["reflector"] for r in reflections}:
        mine = [r for r in reflections if r["reflector"] == name]
        credited = [r for r in mine if r["utility"]["successes"] + r["utility"]["failures"] > 0]
        n_served = sum(served[r["id"]] for r in mine)
        utilities = [_posterior(r["utility"]["successes"], r["utility"]["failures"], baseline) for r in credited]
        expected = [
            str(len(mine)),
            str(sum(r["status"] == "active" for r in mine)),
            str(sum(served[r["id"]] > 0 for r in mine)),
            _pct(sum(served[r["id"]] > 0 for r in mine) / len(mine)),
            f"{n_served:,}",
            _pct(n_served / total_served),
            str(len(credited)),
            f"{sum(utilities) / len(utilities):.3f}" if utilities else "—",
        ]
        row = _rows(page, name)
        assert row and row[0][1:] == expected, (name, row, expected)
    assert f"{_pct(baseline)} over {len(outcomes)}" in page  # the baseline, named as what it is


def test_default_block_size_gives_about_twenty_blocks_and_a_bad_one_is_a_422(world: UiWorld) -> None:
    web = world.web(ADMIN_KEY)
    page = web.get("/ui/ns/mem/learning").text
    assert "blocks of 1)" in page  # 6 episodes: one per block
    r = web.get("/ui/ns/mem/learning?block_size=0")
    assert r.status_code == 422 and "<code>block_size</code>" in r.text


def test_a_reflections_utility_over_time_follows_its_credits(world: UiWorld) -> None:
    data = _learning_world(world)
    target = Counter(i for i, _ in data["credits"]).most_common(1)[0][0]
    outcomes = data["credits"]
    baseline = (sum(s for _, s in outcomes) + 1) / (len(outcomes) + 2)
    page = world.web(ADMIN_KEY).get(f"/ui/ns/{NS}/reflections/{target}").text
    assert "Utility over time" in page and "Posterior utility after each credited outcome" in page
    wins = losses = 0
    means = []
    for item, success in outcomes:
        if item != target:
            continue
        wins, losses = wins + success, losses + (not success)
        means.append(f"{_posterior(wins, losses, baseline):.3f}")
    section = page[page.index('id="h-utility-time"') : page.index('id="h-content"')]
    shown = re.findall(r"<tr><td>\d+</td>.*?<td>(\d\.\d{3})</td><td>\d\.\d{3}</td></tr>", section)
    assert shown == means, (shown, means)
    final = world.api.get(f"/v1/namespaces/{NS}/reflections/{target}").json()["utility"]
    assert (final["successes"], final["failures"]) == (wins, losses)
    assert math.isclose(float(means[-1]), _posterior(wins, losses, baseline), abs_tol=1e-3)
