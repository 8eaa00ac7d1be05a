"""libpq's multi-host database URL, from the flag, the environment and the file.

``postgresql://h1:5432,h2:5432/db`` names a primary and its standbys; every
connection runstore opens for writing accepts only a read-write host, so a
host that is down or a standby is skipped (docs/failover.md).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncpg
import pytest
from sqlalchemy.engine import make_url

from runstore.client import RemoteSessionAdmin, records
from runstore.contract.errors import UnavailableError
from runstore.server import config
from runstore.server.auth.secrets import redacted, resolve_database_url
from runstore.server.db import migrate, postgres_errors, urls
from runstore.server.db import postgres as postgres_backend
from runstore.server.db.postgres import PostgresDatabase, PostgresOptions
from tests import postgres
from tests.processes import server_process
from tests.support import unique


def test_a_host_list_becomes_sqlalchemys_host_entries_each_with_its_port() -> None:
    url = urls.parse("postgresql://u:p@h1:6000,h2/db?target_session_attrs=read-write")
    assert url.query["host"] == ("h1:6000", "h2:5432")
    assert url.database == "db" and url.username == "u"
    assert url.query["target_session_attrs"] == "read-write"
    same = urls.parse("postgresql+asyncpg://u:p@/db?host=h1:6000&host=h2:5432")
    assert urls.hosts(same) == urls.hosts(url)


def test_asyncpg_gets_the_libpq_form_and_writers_only_a_read_write_host() -> None:
    dsn = urls.asyncpg_dsn("postgresql+asyncpg://u:p%40ss@h1:6000,h2:6001/db")
    assert dsn == "postgresql://u:p%40ss@h1:6000,h2:6001/db?target_session_attrs=read-write"
    # The operator's own choice stands; one host is left as it was.
    assert urls.asyncpg_dsn("postgresql://h1,h2/db?target_session_attrs=primary").endswith(
        "/db?target_session_attrs=primary"
    )
    assert urls.asyncpg_dsn("postgresql://u@h1:6000/db") == "postgresql://u@h1:6000/db"
    assert migrate.async_url("postgresql://h1,h2/db").query["target_session_attrs"] == (
        "read-write"
    )


def test_redacted_keeps_the_hosts_and_hides_the_password() -> None:
    shown = redacted("postgresql://u:secret@h1:6000,h2:6001/db")
    assert shown == "postgresql://u:***@h1:6000,h2:6001/db"
    assert make_url("sqlite:///x.db") == urls.parse("sqlite:///x.db")


def test_the_environment_and_the_file_accept_a_host_list(tmp_path: Path) -> None:
    url = "postgresql://u@h1:6000,h2:6001/db"
    from_env = resolve_database_url(config.load(env={"RUNSTORE_DATABASE_URL": url}), None)
    assert urls.hosts(urls.parse(from_env.database_url)) == ("h1:6000", "h2:6001")
    url_file = tmp_path / "url"
    url_file.write_text(url + "\n")
    from_file = resolve_database_url(
        config.load(env={"RUNSTORE_DATABASE_URL_FILE": str(url_file)}), None
    )
    assert from_file.database_url == url


def _past_a_dead_host(url: str) -> str:
    """``url`` with a host that refuses every connection listed first."""
    parsed = make_url(url)
    return (
        f"postgresql://{parsed.username}@127.0.0.1:1,{parsed.host}:{parsed.port or 5432}"
        f"/{parsed.database}"
    )


@pytest.mark.postgres
async def test_a_dead_first_host_is_skipped(tmp_path: Path) -> None:
    async with postgres.fresh_database("runstore_multihost") as single:
        url = _past_a_dead_host(single)
        await migrate.upgrade(url)
        db = PostgresDatabase(url, PostgresOptions(pool_min=1, pool_max=2))
        await db.start()
        try:
            await db.ping(within=5)
        finally:
            await db.close()

        url_file = tmp_path / "database-url"
        url_file.write_text(url + "\n")
        async with (
            server_process("--database-url-file", str(url_file)) as server,
            RemoteSessionAdmin(server.target) as admin,
        ):
            session = unique("multihost")
            await admin.create_session(session, records.now())
            assert (await admin.load_session(session)).id == session


def test_a_standbys_refusal_to_write_is_unavailable_on_a_fresh_connection() -> None:
    refusal = asyncpg.exceptions.ReadOnlySQLTransactionError("25006")
    assert type(postgres_errors.translate(refusal)) is UnavailableError
    assert not postgres_errors.connection_survives(refusal)


async def test_reconnects_are_paced_one_at_a_time_and_end_with_a_success(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """While the database refuses, attempts double their pause (jittered); a
    connect that cannot wait for the pause fails at once without an attempt,
    and connects that arrive during an attempt share its outcome; after a
    success nothing is paced."""
    attempts = 0
    up = False
    release = asyncio.Event()
    attempted = asyncio.Event()

    async def connect(*args: object, **kwargs: object) -> str:
        nonlocal attempts
        attempts += 1
        if not up:
            raise ConnectionRefusedError("down")
        attempted.set()
        await release.wait()
        return "connection"

    monkeypatch.setattr(asyncpg, "connect", connect)
    pacing = postgres_backend.ConnectPacing(first_pause=0.01, longest_pause=0.2)
    loop = asyncio.get_running_loop()
    calls = 0
    until = loop.time() + 1.0
    while loop.time() < until:  # a caller that retries every millisecond for a second
        with pytest.raises(ConnectionRefusedError):
            await pacing.connect(timeout=0.001)
        calls += 1
        await asyncio.sleep(0.001)
    # Pauses 10, 20, 40, 80, 160, then 200 ms (each at least half that): a
    # handful of attempts, not one per call.
    assert attempts <= 16 < calls / 10, (attempts, calls)

    up = True
    before = attempts
    # Callers that may wait: one attempt when the pause ends, the others wait for it.
    waiting = [asyncio.ensure_future(pacing.connect(timeout=1.0)) for _ in range(5)]
    await asyncio.wait_for(attempted.wait(), 1.0)
    assert attempts == before + 1
    release.set()
    assert await asyncio.gather(*waiting) == ["connection"] * 5
    # The four that waited connected on their own once the attempt succeeded.
    assert attempts == before + 5
    assert await asyncio.gather(*(pacing.connect() for _ in range(3))) == ["connection"] * 3
    assert attempts == before + 8
