"""Database URLs: SQLAlchemy's form, plus libpq's multi-host form for PostgreSQL.

``postgresql://user@h1:5432,h2:5432/db?target_session_attrs=read-write`` names
a primary and its standbys; the driver tries the hosts in order and keeps the
first that fits ``target_session_attrs``, so after a failover new connections
reach whichever host is the primary then (docs/failover.md). SQLAlchemy parses
only one host in the authority, so the hosts move to its own multi-host form
(``?host=h1:5432&host=h2:5432``) for parsing, and back for asyncpg.
"""

from __future__ import annotations

import urllib.parse
from typing import Final

from sqlalchemy.engine import URL, make_url

_POSTGRES_SCHEMES: Final = frozenset({"postgresql", "postgres"})
_DEFAULT_PORT: Final = "5432"
READ_WRITE: Final = "read-write"
"""What a writer asks of a host among several: never a standby."""


def parse(database_url: str) -> URL:
    """SQLAlchemy's URL for ``database_url``; raises ``ArgumentError`` when it
    does not parse. A libpq host list becomes SQLAlchemy's ``host`` entries,
    each with its port (5432 when the list gives none)."""
    scheme, sep, rest = database_url.partition("://")
    if not sep or scheme.split("+", 1)[0] not in _POSTGRES_SCHEMES:
        return make_url(database_url)
    netloc_end = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    netloc, tail = rest[:netloc_end], rest[netloc_end:]
    auth, at, hostspec = netloc.rpartition("@")
    if "," not in hostspec:
        return make_url(database_url)
    listed = [_with_port(host) for host in hostspec.split(",")]
    path, _, query = tail.partition("?")
    extra = urllib.parse.urlencode([("host", host) for host in listed])
    query = f"{query}&{extra}" if query else extra
    return make_url(f"{scheme}://{auth}{at}{path}?{query}")


def _with_port(host: str) -> str:
    if not host:
        raise ValueError("an empty host in the database URL's host list")
    return host if ":" in host else f"{host}:{_DEFAULT_PORT}"


def hosts(url: URL) -> tuple[str, ...]:
    """The ``host:port`` entries of a multi-host URL; () for one host."""
    entries = url.query.get("host")
    if isinstance(entries, tuple) and len(entries) > 1:
        return entries
    return ()


def render(url: URL, *, hide_password: bool) -> str:
    """``url`` as text, several hosts in libpq's form (asyncpg reads only that)."""
    listed = hosts(url)
    if not listed:
        return url.render_as_string(hide_password=hide_password)
    query = {key: value for key, value in url.query.items() if key != "host"}
    text = url.set(host=None, port=None, query=query).render_as_string(hide_password=hide_password)
    scheme, _, rest = text.partition("://")
    netloc_end = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    return f"{scheme}://{rest[:netloc_end]}{','.join(listed)}{rest[netloc_end:]}"


def for_writer(url: URL) -> URL:
    """``url`` for connections that write: with several hosts and no
    ``target_session_attrs`` of its own, only a read-write host is accepted."""
    if hosts(url) and "target_session_attrs" not in url.query:
        return url.update_query_dict({"target_session_attrs": READ_WRITE})
    return url


def asyncpg_dsn(database_url: str, *, writer: bool = True) -> str:
    """A libpq-style DSN for asyncpg from any SQLAlchemy or libpq PostgreSQL
    URL (``writer``: accepting only a read-write host among several)."""
    url = parse(database_url).set(drivername="postgresql")
    if writer:
        url = for_writer(url)
    return render(url, hide_password=False)
