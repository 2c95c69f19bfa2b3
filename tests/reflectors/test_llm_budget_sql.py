"""The SQL token budget: one count per namespace and UTC day shared by every worker
process, increments never lost under concurrency, the day renews at UTC midnight."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest

from reflectors.llm_client import LLMBudgetExceeded, SqlTokenBudget
from store.database import Database
from tests.factories import make_db


@pytest.fixture
def db(database_url: str) -> Iterator[Database]:
    database = make_db(database_url, "a", "b")
    yield database
    database.dispose()


def test_two_processes_share_one_limit(db: Database) -> None:
    now = datetime(2025, 3, 1, 12, tzinfo=UTC)
    first, second = SqlTokenBudget(db, 1_000, clock=lambda: now), SqlTokenBudget(db, 1_000, clock=lambda: now)
    first.record(first.reserve("a", 600), 600)
    with pytest.raises(LLMBudgetExceeded) as caught:
        second.reserve("a", 500)  # the other process's spend counts here
    assert (caught.value.spent, caught.value.limit) == (600, 1_000)
    second.reserve("b", 900)  # namespaces are independent
    second.record(second.reserve("a", 400), 400)
    assert first.spent_today("a") == second.spent_today("a") == 1_000


def test_concurrent_records_lose_no_increment(db: Database) -> None:
    budget = SqlTokenBudget(db, 0)
    reservation = budget.reserve("a", 10)
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: budget.record(reservation, 7), range(40)))
    assert budget.spent_today("a") == 280


def test_the_day_renews_at_utc_midnight_and_a_failed_call_costs_nothing(db: Database) -> None:
    clock = {"now": datetime(2025, 3, 1, 23, 59, tzinfo=UTC)}
    budget = SqlTokenBudget(db, 100, clock=lambda: clock["now"])
    budget.record(budget.reserve("a", 100), 100)
    with pytest.raises(LLMBudgetExceeded) as caught:
        budget.reserve("a", 10)
    assert caught.value.retry_after == 60
    budget.record(budget.reserve("b", 50), 0)
    assert budget.spent_today("b") == 0
    clock["now"] += timedelta(minutes=2)
    budget.reserve("a", 100)
    assert budget.spent_today("a") == 0
