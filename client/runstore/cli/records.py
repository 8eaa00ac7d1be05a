"""``runstore records list|tail``: a run's or a session's records, and following
them as they commit."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any, Final

from runstore.cli import remote
from runstore.cli.output import RECORD_HEADERS, Output, StreamedTable, record_row
from runstore.cli.plugins import Command
from runstore.cli.remote import Clients, UsageError
from runstore.client import RunRecord
from runstore.contract.model import ListPage

RECORDS_PAGE: Final = 1000
"""Records read per call when a command walks a whole run or session."""


async def every_record(
    fetch: Callable[[str, int], Awaitable[Any]], cursor: str = ""
) -> list[RunRecord]:
    """Every record ``fetch`` pages through, from ``cursor`` on."""
    records: list[RunRecord] = []
    while True:
        page = await fetch(cursor, RECORDS_PAGE)
        records.extend(page.events)
        cursor = page.next_cursor
        if not cursor:
            return records


async def records_list(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    limit = args.page_size or 100
    if limit < 0:
        raise UsageError("--page-size must not be negative")
    types = args.type or ()
    if types and not args.run:
        raise UsageError("--type filters a run's records: give --run")

    async def fetch(cursor: str) -> ListPage[RunRecord]:
        if args.run:
            page = await clients.store.list_run_records(args.run, cursor, limit, types=types)
            # A filtered page examines a bounded stretch of the run and may hold
            # none of the types: read on until it does or the run ends.
            while types and not page.events and page.next_cursor:
                page = await clients.store.list_run_records(
                    args.run, page.next_cursor, limit, types=types
                )
        else:
            page = await clients.store.list_session_run_records(args.session, cursor, limit)
        return ListPage(page.events, page.next_cursor)

    return await remote.listing(fetch, args, out, RECORD_HEADERS, record_row)


async def records_tail(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    """The last ``--lines`` records; with ``--follow`` then each new one as it
    commits (a Watch stream), until interrupted or, for a run, until it ends."""
    if args.lines < 0:
        raise UsageError("--lines must not be negative")
    last: list[RunRecord] = []
    position = 0
    cursor = ""
    while True:
        if args.run:
            page = await clients.store.list_run_records(args.run, cursor, RECORDS_PAGE)
        else:
            page = await clients.store.list_session_run_records(args.session, cursor, RECORDS_PAGE)
        position += len(page.events)
        last = [*last, *page.events][-args.lines :] if args.lines else []
        cursor = page.next_cursor
        if not cursor:
            break
    table = StreamedTable(out, RECORD_HEADERS, (record_row(r) for r in last))
    if out.as_json:
        for record in last:
            out.json(record)
    elif args.follow:
        table.start()  # the rows that follow line up with this header
    elif last:
        out.table(None, RECORD_HEADERS, (record_row(r) for r in last))
    if not args.follow:
        return 0
    start = str(position) if position else ""
    watch = (
        clients.follower.watch_run_records(args.run, start)
        if args.run
        else clients.follower.watch_session_run_records(args.session, start)
    )
    async for record in watch:
        if out.as_json:
            out.json(record)
        else:
            table.row(record_row(record))
        out.flush()
    return 0


def add_arguments(records: argparse.ArgumentParser) -> None:
    actions = records.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = remote.action(
        actions, "list", records_list, "records of a run or a session, in order"
    )
    owner = listing.add_mutually_exclusive_group(required=True)
    owner.add_argument("--run", metavar="RUN_ID", help="a run's records in run order")
    owner.add_argument("--session", metavar="SESSION_ID", help="a session's, in commit order")
    listing.add_argument(
        "--type",
        action="append",
        metavar="TYPE",
        help="only records of this type (with --run); repeatable",
    )
    remote.page_options(listing)
    tail = remote.action(
        actions, "tail", records_tail, "the last records of a session or run, then follow"
    )
    owner = tail.add_mutually_exclusive_group(required=True)
    owner.add_argument("--session", metavar="SESSION_ID", help="a session's, in commit order")
    owner.add_argument("--run", metavar="RUN_ID", help="a run's (--follow ends with the run)")
    tail.add_argument(
        "--lines", "-n", type=int, default=10, help="how many of the last records (default 10)"
    )
    tail.add_argument(
        "--follow", "-f", action="store_true", help="then print each new record as it commits"
    )


COMMAND: Final = Command(
    help="list, tail or follow a run's or a session's records",
    add_arguments=add_arguments,
    run=remote.run,
)
