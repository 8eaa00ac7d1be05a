"""Fixtures: one real runstore server per backend, reached through a real channel.

The contract suite takes the ``store`` fixture and runs unchanged on every
backend. Tests share a server per backend and isolate themselves with unique
session and run IDs.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator, Iterator
from contextlib import closing

import pytest

from tests import postgres
from tests.support import Store, serving

BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
]


@pytest.fixture(scope="session", params=BACKENDS)
async def database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    """An empty database of each backend for the whole test session."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'runstore.db'}"
        return
    async with postgres.fresh_database() as url:
        yield url


@pytest.fixture(scope="session")
async def store(database_url: str) -> AsyncIterator[Store]:
    """A real server on an ephemeral port over ``database_url``."""
    async with serving(database_url) as store:
        yield store


# --- PostgreSQL is mandatory where CI says so ------------------------------------

_skipped_postgres: list[str] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and "postgres" in report.keywords:
        _skipped_postgres.append(report.nodeid)


def _answers(host: str, port: int) -> bool:
    try:
        with closing(socket.create_connection((host, port), timeout=0.2)):
            return True
    except OSError:
        return False


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> Iterator[None]:
    """One line after every other summary: how many PostgreSQL tests did not
    run, and how to run them."""
    yield
    if _skipped_postgres and not postgres.REQUIRED:
        local = (
            "; a server answers at 127.0.0.1:5432, so `make test-pg` runs them there"
            if _answers("127.0.0.1", 5432)
            else "; `make test-pg` runs them against postgresql://postgres@127.0.0.1:5432/test"
        )
        terminalreporter.write_line(
            f"{len(_skipped_postgres)} PostgreSQL tests skipped: RUNSTORE_TEST_POSTGRES_URL "
            f"is not set{local}",
            yellow=True,
            bold=True,
        )


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if postgres.REQUIRED and _skipped_postgres:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                f"RUNSTORE_REQUIRE_POSTGRES: {len(_skipped_postgres)} PostgreSQL tests were "
                f"skipped (first: {_skipped_postgres[0]}); failing the run",
                red=True,
            )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
