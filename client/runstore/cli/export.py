"""``runstore export``: every record of a run or a session as JSON Lines
(``runstore.cli.jsonlines``, ``docs/export.md``)."""

from __future__ import annotations

import argparse
from typing import Any, Final

from runstore.cli import remote
from runstore.cli.jsonlines import record_line
from runstore.cli.output import Output
from runstore.cli.plugins import Command
from runstore.cli.records import RECORDS_PAGE
from runstore.cli.remote import Clients


async def export(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    """Streams every record, page by page; with ``--read-database-url`` on the
    server, from its standby (an export need not see the last moment's commits)."""

    async def fetch(cursor: str) -> Any:
        store = clients.lagging_store
        if args.run:
            return await store.list_run_records(args.run, cursor, RECORDS_PAGE)
        return await store.list_session_run_records(args.session, cursor, RECORDS_PAGE)

    cursor = ""
    while True:
        page = await fetch(cursor)
        out.lines(record_line(record) for record in page.events)
        cursor = page.next_cursor
        if not cursor:
            return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    remote.connection_options(parser)
    parser.set_defaults(handler=export)
    owner = parser.add_mutually_exclusive_group(required=True)
    owner.add_argument("--run", metavar="RUN_ID", help="a run's records in run order")
    owner.add_argument("--session", metavar="SESSION_ID", help="a session's, in commit order")


COMMAND: Final = Command(
    help="a run's or a session's records as JSON Lines", add_arguments=add_arguments, run=remote.run
)
