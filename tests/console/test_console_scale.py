"""The console's triage path in Chromium on a namespace of 1,000,000 runs
(seeded in SQL): the Runs page, its totals, the failed runs of the last hour,
an agent prefix and the next page each read one ListRuns page and capped
counts, however many runs there are. The work is asserted (store calls, rows
per page); the times the browser measured are printed."""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from runstore.server.console import views
from tests import needs
from tests.console.support import ConsoleUnderTest, console_server
from tests.support import Run

try:  # the dev group's: make install (and so .ci/run) installs it
    from playwright import async_api as playwright_api
except ImportError as error:
    NO_PLAYWRIGHT: str | None = f"cannot import playwright.async_api: {error} (make install)"
else:
    NO_PLAYWRIGHT = None

CHROMIUM = os.environ.get("RUNSTORE_CHROMIUM", "/usr/bin/chromium")
RUNS = 1_000_000
FAILED_EVERY = 997
"""One run in this many failed (a prime: failures spread over agents and hours)."""
WAIT_MS = 60_000

pytestmark = [
    needs.unless("playwright", NO_PLAYWRIGHT),
    needs.unless(
        "chromium",
        None if os.access(CHROMIUM, os.X_OK) else f"no Chromium at {CHROMIUM} (make install)",
    ),
]


def seed_runs(database: Path, model: Run, count: int) -> None:
    """``count`` sessionless runs, copies of ``model``'s row, started one
    second apart back from now, by 100 agents; every ``FAILED_EVERY``-th failed
    (its failure stored as a failed ending stores it), the rest completed."""
    now_ms = int(time.time() * 1000)
    with sqlite3.connect(database, timeout=60) as connection:
        columns = [row[1] for row in connection.execute("PRAGMA table_info(runs)")]
        chosen = {
            "run_id": "'scale-' || printf('%07d', n)",
            "agent_id": "'agent-' || printf('%02d', n % 100)",
            "started_at_ms": f"{now_ms} - n * 1000",
            "updated_at": f"({now_ms} - n * 1000 + 500) * 1000000",
            "status": f"CASE WHEN n % {FAILED_EVERY} = 0 THEN 'failed' ELSE 'completed' END",
            "finished_at_ms": f"{now_ms} - n * 1000 + 500",
            "terminal_key": "'completed'",
            "failure": (
                f"CASE WHEN n % {FAILED_EVERY} = 0 THEN "
                """'{"message":"upstream timed out","kind":"timeout","code":"E' || n || '",'"""
                """ || '"retryable":true}' END"""
            ),
        }
        picked = ", ".join(chosen.get(column, column) for column in columns)
        connection.execute(
            f"""
            WITH RECURSIVE series(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM series WHERE n < ?)
            INSERT INTO runs ({", ".join(columns)})
            SELECT {picked} FROM runs, series WHERE run_id = ?
            """,
            (count, model.id),
        )
        connection.execute("ANALYZE")


@pytest.fixture(scope="module")
async def console(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ConsoleUnderTest]:
    async with console_server(tmp_path_factory.mktemp("scale")) as under:
        model = await under.store.one_shot(agent_id="model")
        started = time.perf_counter()
        seed_runs(under.database, model, RUNS)
        print(f"seeded {RUNS:,} runs in {time.perf_counter() - started:.1f} s")
        yield under


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Any]:
    async with playwright_api.async_playwright() as playwright:
        launched = await playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield launched
        await launched.close()


async def _loaded_ms(page: Any) -> float:
    timing = await page.evaluate("performance.getEntriesByType('navigation')[0].loadEventEnd")
    return float(timing)


async def test_triage_on_a_namespace_of_a_million_runs(
    browser: Any, console: ConsoleUnderTest, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = console.running.console.console.store  # type: ignore[union-attr]
    calls: list[tuple[int, int]] = []
    original = store.list_runs

    async def counting(query: Any, size: int, token: str, count_statuses: bool = False) -> Any:
        page = await original(query, size, token, count_statuses)
        calls.append((size, len(page.items)))
        return page

    monkeypatch.setattr(store, "list_runs", counting)
    context = await browser.new_context(
        base_url=console.base,
        viewport={"width": 1280, "height": 900},
        extra_http_headers=console.bearer(),
    )
    context.set_default_timeout(WAIT_MS)
    page = await context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(str(error)))
    try:
        measured: dict[str, float] = {}
        failed = RUNS // FAILED_EVERY
        for name, query, total in (
            ("newest runs", "", f"failed {failed:,}"),
            ("failed in the last 24h", "?status=failed&range=24h", "failed 86"),
            ("agent prefix, failed", "?agent=agent-4&status=failed", "failed 100"),
            ("label, oldest first", "?label=site%3Done&order=oldest", "completed about 10,000+"),
        ):
            calls.clear()
            await page.goto(f"/runs{query}")
            await page.locator("table#runs").wait_for()
            measured[name] = await _loaded_ms(page)
            # One ListRuns page (with its capped counts) per page load.
            assert [size for size, _ in calls] == [views.LIST_PAGE_SIZE], (name, calls)
            totals = " ".join((await page.text_content("#totals") or "").split())
            assert total in totals, (name, totals)
        # The failed ones of the last day: 86,400 runs, one in 997 failed.
        await page.goto("/runs?status=failed&range=24h")
        rows = page.locator("table#runs tbody tr")
        assert await rows.count() == 86 and "upstream timed out" in (
            await rows.first.locator("td.failure").text_content() or ""
        )
        await page.goto("/runs")
        calls.clear()
        await page.locator("nav.pager a.next").click()
        await page.wait_for_url("**page_token=*")
        await page.locator("table#runs").wait_for()
        measured["next page"] = await _loaded_ms(page)
        assert calls == [(views.LIST_PAGE_SIZE, views.LIST_PAGE_SIZE)]
        await page.locator("nav.pager a.previous").first.wait_for()
        first_failed = page.locator("table#runs tbody tr td a").first
        await first_failed.wait_for()
        await page.goto("/runs?status=failed")
        await rows.first.locator("td a").first.click()
        await page.locator("#failure").wait_for()
        measured["a failed run"] = await _loaded_ms(page)
        for name, took in measured.items():
            print(f"{RUNS:,} runs: {name} opened in {took:.0f} ms (navigation start to load end)")
        assert problems == []
    finally:
        await context.close()
