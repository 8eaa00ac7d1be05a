"""``runstore export``: every record of a run or a session as JSON Lines
(``runstore.cli.jsonlines``, ``docs/export.md``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable
from typing import Any, Final

from runstore.cli import remote
from runstore.cli.jsonlines import json_line, record_line, seed_record_object
from runstore.cli.output import Output
from runstore.cli.plugins import Command
from runstore.cli.records import RECORDS_PAGE
from runstore.cli.remote import Clients
from runstore.contract.seeds import PreparationOperation, SeedPage

SEED_PAGE: Final = 512
"""Seed records per ``ListRunSeedRecords`` / ``ListRunPreparationRecords`` page (their cap)."""


async def export(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    """Streams every record, page by page; with ``--read-database-url`` on the
    server, from its standby (an export need not see the last moment's commits)."""
    if args.seed:
        return await export_seed(args.seed, clients, out)

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


async def export_seed(run_id: str, clients: Clients, out: Output) -> int:
    """The seed a run started from: its history records, then its preparation's
    compiled-start records (docs/export.md#seeds)."""
    store = clients.lagging_store
    run = await store.load_run(run_id)
    if not run.seed_end_id:
        print(f"runstore: run {run_id} started without a seed", file=sys.stderr)
        return 1
    seed = await store.load_run_seed(run_id, run.seed_end_id)

    async def write(fetch: Callable[[str], Awaitable[SeedPage]]) -> None:
        after = ""
        while True:
            page = await fetch(after)
            out.lines(json_line(seed_record_object(run_id, r)) for r in page.records)
            after = page.next_cursor
            if not after:
                return

    await write(lambda after: store.list_run_seed_records(run_id, seed.end_id, after, SEED_PAGE))
    declared = seed.declaration
    operation = PreparationOperation(
        declared.agent_id, run_id, declared.session_id, declared.command_id
    )
    preparation = await store.find_run_preparation(operation)
    if preparation is not None:
        end = preparation.end_id
        await write(lambda after: store.list_run_preparation_records(run_id, end, after, SEED_PAGE))
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    remote.connection_options(parser)
    parser.set_defaults(handler=export)
    owner = parser.add_mutually_exclusive_group(required=True)
    owner.add_argument("--run", metavar="RUN_ID", help="a run's records in run order")
    owner.add_argument("--session", metavar="SESSION_ID", help="a session's, in commit order")
    owner.add_argument(
        "--seed", metavar="RUN_ID", help="the seed a run started from: history, then preparation"
    )


COMMAND: Final = Command(
    help="a run's or a session's records, or a run's seed, as JSON Lines",
    add_arguments=add_arguments,
    run=remote.run,
)
