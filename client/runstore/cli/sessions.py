"""``runstore sessions list|show|end|purge``: the sessions of a running server."""

from __future__ import annotations

import argparse
from collections.abc import Awaitable
from datetime import UTC, datetime
from typing import Any, Final

from runstore.cli import remote
from runstore.cli.output import (
    RUN_HEADERS,
    SESSION_HEADERS,
    Output,
    iso,
    jsonable,
    run_row,
    session_row,
)
from runstore.cli.plugins import Command
from runstore.cli.remote import Clients, UsageError
from runstore.client import SessionStatus
from runstore.contract.model import ListPage

PURGE_BATCH: Final = 100
"""Sessions purged per ``PurgeEndedSessions`` call by ``sessions purge --ended-before``."""


async def sessions_list(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    statuses = [SessionStatus(s) for s in args.status or ()]

    def fetch(token: str) -> Awaitable[ListPage[Any]]:
        return clients.admin.list_sessions(
            statuses=statuses,
            created_after=args.created_after,
            created_before=args.created_before,
            page_size=args.page_size,
            page_token=token,
            session_id=args.session or "",
            session_id_prefix=args.session_prefix or "",
            newest_first=args.newest_first,
            count_statuses=args.counts,
        )

    return await remote.listing(fetch, args, out, SESSION_HEADERS, session_row)


async def sessions_show(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    session = await clients.admin.load_session(args.session_id)
    runs = await clients.admin.list_runs_by_session(args.session_id)
    if out.as_json:
        out.json({**jsonable(session), "runs": jsonable(runs)})
        return 0
    out.fields(
        [
            ("session", session.id),
            ("status", session.status.value),
            ("created", iso(session.created_at)),
            ("ended", iso(session.ended_at)),
            ("runs", len(runs)),
        ]
    )
    if runs:
        out.table(None, RUN_HEADERS, (run_row(run) for run in runs))
    return 0


async def sessions_end(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    question = f"End session {args.session_id}? It will refuse new runs; running runs continue."
    if not remote.confirmed(args, question):
        return remote.not_confirmed()
    ended_at = args.at or datetime.now(UTC)
    session = await clients.admin.end_session(args.session_id, ended_at)
    if out.as_json:
        out.json(session)
    else:
        out.table(None, SESSION_HEADERS, [session_row(session)])
    return 0


async def sessions_purge(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    if (args.session_id is None) == (args.ended_before is None):
        raise UsageError("give a SESSION_ID or --ended-before TIME (not both)")
    if args.limit is not None and args.session_id is not None:
        raise UsageError("--limit goes with --ended-before")
    if args.ended_before is not None:
        return await _purge_ended_sessions(args, clients, out)
    question = f"Purge session {args.session_id}? Its runs and records are deleted for good."
    if not remote.confirmed(args, question):
        return remote.not_confirmed()
    await clients.admin.purge_session(args.session_id)
    if out.as_json:
        out.json({"id": args.session_id, "purged": True})
    else:
        out.console.print(f"purged session {args.session_id}")
    return 0


async def _purge_ended_sessions(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    """Retention on demand: batches of ``PurgeEndedSessions`` until none match or
    ``--limit`` sessions were purged."""
    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be at least 1")
    cut_off = iso(args.ended_before)
    question = (
        f"Purge every ended session that ended before {cut_off} and has no running run? "
        "Their runs and records are deleted for good."
    )
    if not remote.confirmed(args, question):
        return remote.not_confirmed()
    purged: list[str] = []
    while args.limit is None or len(purged) < args.limit:
        batch = PURGE_BATCH if args.limit is None else min(PURGE_BATCH, args.limit - len(purged))
        result = await clients.admin.purge_ended_sessions(args.ended_before, batch)
        for session_id in result.purged_ids:
            if out.as_json:
                out.json({"id": session_id, "purged": True})
        purged.extend(result.purged_ids)
        if not result.more:
            break
    if not out.as_json:
        for session_id in purged:
            out.console.print(f"purged session {session_id}")
        out.console.print(f"purged {len(purged)} sessions ended before {cut_off}")
    return 0


def add_arguments(sessions: argparse.ArgumentParser) -> None:
    actions = sessions.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = remote.action(actions, "list", sessions_list, "sessions by creation time")
    listing.add_argument(
        "--status", action="append", choices=[s.value for s in SessionStatus], help="repeatable"
    )
    remote.time_range_options(listing, "created")
    ids = listing.add_mutually_exclusive_group()
    ids.add_argument("--session", metavar="ID", help="only the session with this exact ID")
    ids.add_argument("--session-prefix", metavar="PREFIX", help="only IDs starting with PREFIX")
    remote.page_options(listing)
    show = remote.action(actions, "show", sessions_show, "a session and its runs")
    show.add_argument("session_id", metavar="SESSION_ID")
    end = remote.action(actions, "end", sessions_end, "end a session (asks first)")
    end.add_argument("session_id", metavar="SESSION_ID")
    end.add_argument("--at", type=remote.timestamp, metavar="TIME", help="ended_at (default: now)")
    remote.add_confirmation(end)
    purge = remote.action(
        actions,
        "purge",
        sessions_purge,
        "delete an ended session, or every one ended before --ended-before (asks first)",
    )
    purge.add_argument("session_id", metavar="SESSION_ID", nargs="?")
    purge.add_argument(
        "--ended-before",
        type=remote.timestamp,
        metavar="TIME",
        help="purge every ended session without running runs ended before TIME (exclusive)",
    )
    purge.add_argument(
        "--limit", type=int, metavar="N", help="with --ended-before: at most N sessions"
    )
    remote.add_confirmation(purge)


COMMAND: Final = Command(
    help="list, show, end and purge sessions", add_arguments=add_arguments, run=remote.run
)
