"""One ``runstore serve`` per SQLite file.

SQLite has one writer, and two servers on one file would each think they are
it: their group commits would queue on each other's lock and their watchers
would miss each other's commits. So ``serve`` holds an exclusive lock on
``<file>.lock`` beside the database for as long as it serves, taken before it
touches the database; a second ``serve`` is refused in one line naming the
holder. Only ``serve`` takes it: ``runstore backup`` (an online copy) and
``runstore migrate`` (a schema already at head is left alone) go on while a
server runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from runstore.contract import pid_file
from runstore.server.db import urls


class AlreadyServed(Exception):
    """Another ``runstore serve`` holds the file's lock; one line."""


def lock_path(database_url: str) -> Path | None:
    """The lock file of a SQLite ``database_url`` (None: not a SQLite file,
    or its directory is missing, which the schema check reports)."""
    url = urls.parse(database_url)
    if url.get_backend_name() != "sqlite" or not url.database or url.database == ":memory:":
        return None
    path = Path(url.database)
    if not path.parent.is_dir():
        return None
    return path.with_name(path.name + ".lock")


@contextlib.contextmanager
def serving(database_url: str) -> Iterator[None]:
    """Holds the SQLite file's serve lock for the block (nothing for PostgreSQL).

    Raises:
        AlreadyServed: another ``runstore serve`` holds it.
    """
    path = lock_path(database_url)
    if path is None:
        yield
        return
    label = f"the SQLite lock file {path}"
    try:
        with pid_file.held(path, label=label):
            yield
    except pid_file.HeldElsewhere as exc:
        holder = f" (pid {exc.pid})" if exc.pid else ""
        raise AlreadyServed(
            f"another runstore serve{holder} serves {path.with_suffix('')} (it holds {path}): "
            "one server per SQLite file; more need PostgreSQL"
        ) from None
