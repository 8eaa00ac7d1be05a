"""``runstore runs list|show|purge``: runs, one run with its records, and the
retention of finished sessionless runs."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable
from typing import Any, Final

from runstore.cli import remote
from runstore.cli.output import (
    RECORD_HEADERS,
    RUN_HEADERS,
    Output,
    failure_text,
    iso,
    jsonable,
    record_row,
    run_duration,
    run_row,
)
from runstore.cli.plugins import Command
from runstore.cli.records import every_record
from runstore.cli.remote import Clients, UsageError
from runstore.client import RunStatus
from runstore.contract.model import ListPage

PURGE_BATCH: Final = 100
"""Root runs purged per ``PurgeSessionlessRuns`` call by ``runs purge``."""


def _run_fields(run: Any) -> list[tuple[str, Any]]:
    labels = ", ".join(f"{k}={v}" for k, v in sorted(run.labels.items()))
    return [
        ("run", run.run_id),
        ("agent", run.agent_id),
        ("session", run.session_id or "(sessionless)"),
        ("parent run", run.parent_run_id),
        ("status", run.status.value),
        ("start outcome", run.start_outcome.value),
        ("started", iso(run.started_at)),
        ("updated", iso(run.updated_at)),
        ("ended", iso(run.ended_at)),
        ("duration", run_duration(run)),
        ("cancellation", run.cancellation_reason),
        ("failure", failure_text(run.failure)),
        ("labels", labels),
    ]


async def runs_list(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    if args.sessionless and args.session:
        raise UsageError("--sessionless lists runs without a session; not with --session")
    if args.parent and args.root_only:
        raise UsageError("--root-only lists runs without a parent; not with --parent")
    statuses = [RunStatus(s) for s in args.status or ()]
    labels = dict(_label(text) for text in args.label or ())

    def fetch(token: str) -> Awaitable[ListPage[Any]]:
        return clients.admin.list_runs(
            session_id=args.session or "",
            agent_id=args.agent or "",
            statuses=statuses,
            started_after=args.started_after,
            started_before=args.started_before,
            sessionless_only=args.sessionless,
            page_size=args.page_size,
            page_token=token,
            run_id=args.run or "",
            run_id_prefix=args.run_prefix or "",
            agent_id_prefix=args.agent_prefix or "",
            labels=labels,
            root_only=args.root_only,
            newest_first=args.newest_first,
            count_statuses=args.counts,
            parent_run_id=args.parent or "",
        )

    return await remote.listing(fetch, args, out, RUN_HEADERS, run_row)


def _label(text: str) -> tuple[str, str]:
    key, separator, value = text.partition("=")
    if not separator or not key:
        raise UsageError(f"--label takes KEY=VALUE, not {text!r}")
    return key, value


async def runs_show(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    run = await clients.store.load_run(args.run_id)
    records = await every_record(
        lambda cursor, limit: clients.store.list_run_records(args.run_id, cursor, limit)
    )
    if out.as_json:
        out.json({**jsonable(run), "records": jsonable(records)})
        return 0
    out.fields([*_run_fields(run), ("records", len(records))])
    if records:
        out.table(None, RECORD_HEADERS, (record_row(r) for r in records))
    return 0


async def runs_purge(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    """Retention on demand: batches of ``PurgeSessionlessRuns`` until none match,
    a batch purges nothing, or ``--limit`` root runs were purged."""
    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be at least 1")
    cut_off = iso(args.finished_before)
    question = (
        f"Delete every finished sessionless run that finished before {cut_off}, with its "
        "one-shot children? Their records are deleted for good."
    )
    if not remote.confirmed(args, question):
        return remote.not_confirmed()
    purged: list[str] = []
    roots_left: int | None = args.limit  # each call deletes at most `batch` roots
    while True:
        batch = PURGE_BATCH if roots_left is None else min(PURGE_BATCH, roots_left)
        result = await clients.admin.purge_sessionless_runs(args.finished_before, batch)
        for run_id in result.purged_ids:
            if out.as_json:
                out.json({"id": run_id, "purged": True})
        purged.extend(result.purged_ids)
        if roots_left is not None:
            roots_left -= batch
        # A batch that purged nothing although more matched examined only
        # families that do not qualify yet: calling again would find them again.
        if not result.more or not result.purged_ids or roots_left == 0:
            break
    if not out.as_json:
        for run_id in purged:
            out.console.print(f"purged run {run_id}")
        out.console.print(f"purged {len(purged)} runs finished before {cut_off}")
    return 0


def add_arguments(runs: argparse.ArgumentParser) -> None:
    actions = runs.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = remote.action(actions, "list", runs_list, "runs by start time")
    listing.add_argument("--session", help="only this session's runs")
    agents = listing.add_mutually_exclusive_group()
    agents.add_argument("--agent", help="only this agent's runs")
    agents.add_argument("--agent-prefix", metavar="PREFIX", help="only agents starting with PREFIX")
    ids = listing.add_mutually_exclusive_group()
    ids.add_argument("--run", metavar="ID", help="only the run with this exact ID")
    ids.add_argument("--run-prefix", metavar="PREFIX", help="only run IDs starting with PREFIX")
    listing.add_argument(
        "--label",
        action="append",
        metavar="KEY=VALUE",
        help="only runs with this label; repeatable",
    )
    listing.add_argument("--root-only", action="store_true", help="only runs without a parent")
    listing.add_argument("--parent", metavar="RUN_ID", help="only the children of this run")
    listing.add_argument(
        "--status", action="append", choices=[s.value for s in RunStatus], help="repeatable"
    )
    remote.time_range_options(listing, "started")
    listing.add_argument("--sessionless", action="store_true", help="only runs without a session")
    remote.page_options(listing)
    show = remote.action(actions, "show", runs_show, "a run's metadata, then its records")
    show.add_argument("run_id", metavar="RUN_ID")
    purge = remote.action(
        actions,
        "purge",
        runs_purge,
        "delete finished sessionless runs finished before --finished-before (asks first)",
    )
    purge.add_argument(
        "--finished-before",
        type=remote.timestamp,
        metavar="TIME",
        required=True,
        help="runs whose ending record is before TIME (exclusive), with their one-shot children",
    )
    purge.add_argument(
        "--limit", type=int, metavar="N", help="at most N root runs (each with its children)"
    )
    remote.add_confirmation(purge)


COMMAND: Final = Command(
    help="list runs, show one run with its records, purge old sessionless runs",
    add_arguments=add_arguments,
    run=remote.run,
)
