"""Fixtures: one real runstore server per backend, reached through a real channel.

The contract suite takes the ``store`` fixture and runs unchanged on every
backend. Tests share a server per backend and isolate themselves with unique
session and run IDs.
"""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Iterator

import pytest

from runstore.contract.namespaces import DEFAULT
from runstore.server import call_scope
from tests import needs, postgres
from tests.backends import BACKENDS, SQLITE
from tests.support import Store, serving


@pytest.fixture(scope="session", params=BACKENDS)
async def database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    """An empty database of each backend for the whole test session."""
    if request.param == SQLITE:
        yield f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'runstore.db'}"
        return
    async with postgres.fresh_database() as url:
        yield url


@pytest.fixture
def acting_in_default() -> Iterator[None]:
    """For tests that call the store core or the database directly, as a call
    in ``default`` would (``call_scope``: outside any scope, database work
    raises). Modules opt in: ``pytestmark = pytest.mark.usefixtures(...)``."""
    with call_scope.acting_in(DEFAULT):
        yield


@pytest.fixture(scope="session")
async def store(database_url: str) -> AsyncIterator[Store]:
    """A real server on an ephemeral port over ``database_url``."""
    async with serving(database_url) as store:
        yield store


# --- What ran on which backend; the run's own PostgreSQL server -------------------

_outcomes: dict[str, tuple[str, str]] = {}
"""nodeid -> (backend, outcome); a failure in any phase wins over a skip, a skip
over a pass."""
_RANK = {"passed": 0, "skipped": 1, "failed": 2}


def _backend(item: pytest.Item) -> str:
    """PostgreSQL's tests are marked; SQLite's take the parameter "sqlite" in
    any fixture (``database_url``, or a module fixture with ``params=BACKENDS``)."""
    if item.get_closest_marker("postgres") is not None:
        return "postgres"
    callspec = getattr(item, "callspec", None)
    if callspec is not None and any(
        isinstance(value, str) and value == SQLITE for value in callspec.params.values()
    ):
        return "sqlite"
    return "other"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        _outcomes[item.nodeid] = (_backend(item), "")


def pytest_runtest_setup(item: pytest.Item) -> None:
    needs.check(item)


_forced: dict[str, str] = {}
"""nodeid -> why the machine made it skip (listed before the closing line)."""


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.skipped and _skip_reason(report).startswith(needs.FORCED):
        _forced[report.nodeid] = _skip_reason(report)
    backend, outcome = _outcomes.get(report.nodeid, ("other", ""))
    if report.when != "call" and report.passed:
        return
    new = report.outcome
    if not outcome or _RANK[new] > _RANK[outcome]:
        _outcomes[report.nodeid] = (backend, new)


def _skipped_postgres() -> list[str]:
    return [
        nodeid
        for nodeid, (backend, outcome) in _outcomes.items()
        if backend == "postgres" and outcome == "skipped"
    ]


def _counts(backend: str) -> str:
    tally = {"passed": 0, "failed": 0, "skipped": 0}
    for kind, outcome in _outcomes.values():
        if kind == backend and outcome:
            tally[outcome] += 1
    shown = [f"{tally['passed']} passed"]
    shown += [f"{tally[key]} {key}" for key in ("failed", "skipped") if tally[key]]
    return f"{backend} " + ", ".join(shown)


def _where_postgres_ran() -> str:
    if postgres.EXISTING_URL:
        return "RUNSTORE_TEST_POSTGRES_URL"
    port = postgres.own_server_port()
    if port is None:
        return "no server started"
    return f"a private server on port {port}, now removed"


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> Iterator[None]:
    """After every other summary: the tests the machine made skip (no
    /dev/fuse), then one line: how many tests ran on each backend (and where
    PostgreSQL came from); PostgreSQL skips in yellow."""
    yield
    if _forced:
        terminalreporter.write_sep("=", "skipped because the machine cannot run them", yellow=True)
        for nodeid, reason in sorted(_forced.items()):
            terminalreporter.write_line(f"{nodeid}: {reason}", yellow=True)
    if not any(outcome for _, outcome in _outcomes.values()):
        return
    skipped = len(_skipped_postgres())
    terminalreporter.write_line(
        f"backends: {_counts('sqlite')}; {_counts('postgres')} ({_where_postgres_ran()}); "
        f"{_counts('other').replace('other', 'backend-independent', 1)}",
        yellow=skipped > 0,
        bold=True,
    )


def pytest_configure(config: pytest.Config) -> None:
    """SIGTERM ends the run like Ctrl-C does, so the session still finishes and
    the private PostgreSQL server is stopped (a SIGKILL is the reaper's job)."""
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _interrupt)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    skipped = _skipped_postgres()
    if postgres.REQUIRED and skipped:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.write_line(
                f"RUNSTORE_REQUIRE_POSTGRES: {len(skipped)} PostgreSQL tests were "
                f"skipped (first: {skipped[0]}); failing the run",
                red=True,
            )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    postgres.stop_own_server()
