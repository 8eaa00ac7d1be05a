"""Concurrent exact duplicates of every mutating method on one server (§7, §8)."""

from __future__ import annotations

import pytest

from tests.duplicates import SCENARIOS, fire_duplicates
from tests.support import Store


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
async def test_concurrent_exact_duplicates_insert_once_and_replay(
    store: Store, scenario: str
) -> None:
    await fire_duplicates(scenario, [store])
