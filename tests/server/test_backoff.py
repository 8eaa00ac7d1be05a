"""The one jittered backoff: pauses double up to their ceiling, a share of each
is random (so replicas that failed together drift apart), and the retry loops
take their pauses from it."""

from __future__ import annotations

import random
from typing import Any

import pytest

from runstore.server.backoff import Backoff
from runstore.server.core.namespaces import NamespaceStore
from runstore.server.db.connect_pacing import ConnectPacing
from runstore.server.db.postgres import RETRY_BACKOFF
from runstore.server.db.wakeups import PostgresWakeups


def test_pauses_double_to_the_ceiling_with_a_random_half() -> None:
    backoff = Backoff(0.25, 30.0, uniform=random.Random(7).uniform)
    ceilings = [backoff.ceiling(n) for n in range(1, 10)]
    assert ceilings == [0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0, 30.0]
    for n, ceiling in enumerate(ceilings, start=1):
        pause = backoff.pause(n)
        assert ceiling / 2 <= pause <= ceiling


def test_replicas_failing_together_do_not_retry_together() -> None:
    """Seeded draws: each replica's sequence is reproducible, and two replicas'
    pauses after the same failures differ (no lockstep)."""

    def pauses(seed: int) -> list[float]:
        backoff = Backoff(0.25, 30.0, uniform=random.Random(seed).uniform)
        return [backoff.pause(n) for n in range(1, 8)]

    assert pauses(1) == pauses(1)
    one, other = pauses(1), pauses(2)
    assert all(a != b for a, b in zip(one, other, strict=True))
    assert len({round(p, 9) for p in one + other}) == len(one) + len(other)


@pytest.mark.parametrize(
    ("jitter", "low", "high"), [(0.0, 1.0, 1.0), (0.5, 0.5, 1.0), (1.0, 0.0, 1.0)]
)
def test_the_jitter_is_the_random_share(jitter: float, low: float, high: float) -> None:
    drawn: list[tuple[float, float]] = []

    def lowest(a: float, b: float) -> float:
        drawn.append((a, b))
        return a

    def highest(a: float, b: float) -> float:
        return b

    assert Backoff(0.5, 1.0, jitter, uniform=lowest).pause(1) == low
    assert Backoff(0.5, 1.0, jitter, uniform=highest).pause(1) == high
    assert drawn == [(0.0, jitter)]


@pytest.mark.parametrize(("base", "longest", "jitter"), [(0, 1, 0.5), (2, 1, 0.5), (1, 2, 1.5)])
def test_a_nonsense_backoff_is_refused(base: float, longest: float, jitter: float) -> None:
    with pytest.raises(ValueError):
        Backoff(base, longest, jitter)


async def test_the_reconnect_loops_pause_with_jitter() -> None:
    """Paced reconnects and the LISTEN connection: half of each pause random,
    up to their longest; a lost transaction race: all of it."""
    pacing = ConnectPacing(first_pause=0.05, longest_pause=2.0)
    wakeups = PostgresWakeups(lambda: None, lambda: None, reconnect_seconds=1.0)
    for backoff, longest, jitter in (
        (pacing._backoff, 2.0, 0.5),
        (wakeups._backoff, 1.0, 0.5),
        (RETRY_BACKOFF, 1.0, 1.0),
    ):
        assert (backoff.longest, backoff.jitter) == (longest, jitter)
    seen = {round(wakeups._pause(5), 9) for _ in range(50)}
    assert len(seen) > 1 and all(0.5 <= pause <= 1.0 for pause in seen)


class _FailingDatabase:
    """Fails the purge's first ``failures`` batches, then has nothing left to delete."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.writes = 0

    async def write(self, fn: Any) -> Any:
        self.writes += 1
        if self.writes <= self.failures:
            raise OSError("the database went away")
        return 0 if fn.__name__ == "batch" else None


async def test_a_purge_retries_its_failed_batches_after_jittered_pauses() -> None:
    """A purge whose batches fail waits after the n-th failure in a row a pause
    whose random half is drawn afresh (replicas purging one namespace drift
    apart), and the pause grows with the failures."""
    drawn: list[tuple[float, float]] = []
    rng = random.Random(3)

    def uniform(a: float, b: float) -> float:
        drawn.append((a, b))
        return rng.uniform(a, b)

    backoff = Backoff(0.0005, 0.01, uniform=uniform)
    db = _FailingDatabase(failures=3)
    finished: list[str] = []
    store = NamespaceStore(
        db,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]
        purge_delay=0.0,
        purge_backoff=backoff,
        purged=finished.append,
    )
    await store._purge("gone")
    assert finished == ["gone"]
    assert db.writes == 3 + 2  # three failed batches, the empty one, the drop
    assert drawn == [(0.0, 0.0005), (0.0, 0.001), (0.0, 0.002)]
