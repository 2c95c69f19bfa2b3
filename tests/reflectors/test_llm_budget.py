"""The in-memory token budget: per namespace and UTC day, reservations held until
recorded, over-budget calls refused with a wait until the next day."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from reflectors.llm_client import InMemoryTokenBudget, LLMBudgetExceeded, estimate_tokens
from reflectors.llm_client.budget import seconds_until_next_utc_day


class Clock:
    def __init__(self, now: datetime) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now


def test_estimate_is_a_quarter_of_the_characters_rounded_up() -> None:
    assert [estimate_tokens(""), estimate_tokens("abcd"), estimate_tokens("abcde")] == [0, 1, 2]


def test_reservations_count_until_recorded_and_then_the_real_usage_counts() -> None:
    budget = InMemoryTokenBudget(1_000, clock=Clock(datetime(2025, 3, 1, 12, tzinfo=UTC)))
    first = budget.reserve("a", 600)
    with pytest.raises(LLMBudgetExceeded) as caught:
        budget.reserve("a", 500)  # 600 held + 500 > 1000
    assert (caught.value.spent, caught.value.requested, caught.value.limit) == (600, 500, 1_000)
    budget.reserve("b", 900)  # namespaces are independent
    budget.record(first, 300)  # used less than reserved: the rest is free again
    assert budget.spent_today("a") == 300
    budget.record(budget.reserve("a", 700), 700)
    assert budget.spent_today("a") == 1_000
    with pytest.raises(LLMBudgetExceeded):
        budget.reserve("a", 1)


def test_the_budget_renews_on_the_next_utc_day() -> None:
    clock = Clock(datetime(2025, 3, 1, 23, 59, tzinfo=UTC))
    budget = InMemoryTokenBudget(100, clock=clock)
    budget.record(budget.reserve("a", 100), 100)
    with pytest.raises(LLMBudgetExceeded) as caught:
        budget.reserve("a", 10)
    assert caught.value.retry_after == 60
    clock.now += timedelta(minutes=2)
    budget.reserve("a", 100)
    assert budget.spent_today("a") == 0


def test_a_call_crossing_midnight_is_settled_on_its_day() -> None:
    clock = Clock(datetime(2025, 3, 1, 23, 59, 59, tzinfo=UTC))
    budget = InMemoryTokenBudget(100, clock=clock)
    reservation = budget.reserve("a", 80)
    clock.now += timedelta(seconds=2)
    budget.reserve("a", 100)  # yesterday's reservation does not count today
    budget.record(reservation, 80)
    assert budget.spent_today("a") == 0


def test_zero_means_unlimited_but_still_counted() -> None:
    budget = InMemoryTokenBudget(0)
    budget.record(budget.reserve("a", 10**12), 42)
    assert budget.spent_today("a") == 42


def test_seconds_until_next_utc_day_counts_in_utc() -> None:
    assert seconds_until_next_utc_day(datetime(2025, 3, 1, 1, 0, tzinfo=UTC)) == 23 * 3600
    local = datetime(2025, 3, 2, 1, 0, tzinfo=timezone(timedelta(hours=2)))  # 23:00 UTC on 1 March
    assert seconds_until_next_utc_day(local) == 3600
