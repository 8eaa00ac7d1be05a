"""The operator's commands: ``runstore sessions|runs|records|export|health``.

They talk to a running server over gRPC with the typed client, never to its
database, so they work against any deployment an operator can reach, with the
same TLS and tokens as any other caller. Output is a human table (``rich``) or,
with ``--json``, one JSON object per line. Exit codes: 0 ok, 1 a failed call
(its reason and message on stderr) or an unconfirmed destructive command, 2 a
usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import dataclasses
import enum
import json
import os
import sys
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TextIO

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from rich import box
from rich.console import Console
from rich.table import Table

from runstore.client import (
    NO_RETRY,
    RemoteSessionAdmin,
    RemoteStore,
    RetryPolicy,
    RunRecord,
    RunStatus,
    SessionStatus,
    TLSConfig,
    open_channel,
)
from runstore.contract.errors import RunstoreError
from runstore.contract.model import ListPage
from runstore.server.export import record_line

DEFAULT_TARGET: Final = "127.0.0.1:50051"
RECORDS_PAGE: Final = 1000
"""Records read per call when a command walks a whole run or session."""
PREVIEW_CHARS: Final = 60
FOLLOW_RETRY: Final = RetryPolicy(initial=0.1, maximum=2.0, deadline=60.0)
"""How ``records tail --follow`` rides out a server restart or a failover."""

_GENERIC_REASONS: Final = frozenset({"TRANSIENT", "RPC_ERROR", "UNKNOWN"})


class UsageError(Exception):
    """Bad options discovered after parsing (exit code 2)."""


# --- Options ---------------------------------------------------------------------


def _timestamp(text: str) -> datetime:
    """ISO 8601 (``2026-12-01``, ``2026-12-01T10:00:00Z``); no zone means UTC."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO 8601 time: {text!r} (e.g. 2026-12-01T10:00:00Z)"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def _connection_options() -> argparse.ArgumentParser:
    """Options every command takes after its name (``runstore sessions list --json``)."""
    parser = argparse.ArgumentParser(add_help=False)
    group = parser.add_argument_group("connection and output")
    group.add_argument(
        "--target",
        metavar="HOST:PORT",
        default=os.environ.get("RUNSTORE_TARGET", DEFAULT_TARGET),
        help=f"server HOST:PORT (env RUNSTORE_TARGET; default {DEFAULT_TARGET})",
    )
    group.add_argument(
        "--tls-ca", type=Path, metavar="PATH", help="CA certificate (PEM) that signed the server's"
    )
    group.add_argument(
        "--tls-cert", type=Path, metavar="PATH", help="client certificate (PEM) for mTLS"
    )
    group.add_argument(
        "--tls-key", type=Path, metavar="PATH", help="private key (PEM) of --tls-cert"
    )
    group.add_argument(
        "--token-file",
        type=Path,
        metavar="PATH",
        help="file holding the bearer token (or env RUNSTORE_TOKEN)",
    )
    group.add_argument(
        "--token",
        metavar="TOKEN",
        help="bearer token on the command line (visible to other users: avoid)",
    )
    group.add_argument("--timeout", type=float, default=10.0, help="seconds per call (10)")
    group.add_argument("--json", action="store_true", help="one JSON object per line")
    return parser


def _page_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--page-size", type=int, default=0, help="rows per page (server default)")
    parser.add_argument("--page-token", default="", help="continue from a previous page")
    parser.add_argument("--all", action="store_true", help="follow every page to the end")


def _token(args: argparse.Namespace, warn: TextIO) -> str | None:
    if args.token is not None and args.token_file is not None:
        raise UsageError("give --token or --token-file, not both")
    if args.token is not None:
        print(
            "runstore: warning: --token is visible to other users of this machine "
            "(ps, /proc); prefer --token-file or RUNSTORE_TOKEN",
            file=warn,
        )
        return str(args.token)
    if args.token_file is not None:
        try:
            return str(args.token_file.read_text().strip())
        except OSError as exc:
            raise UsageError(f"cannot read --token-file: {exc.strerror}: {exc.filename}") from None
    return os.environ.get("RUNSTORE_TOKEN") or None


def _tls(args: argparse.Namespace) -> TLSConfig | None:
    """TLS when a CA or a client certificate is given; files are read here, so a
    missing one is a usage error rather than a failed call."""
    if args.tls_ca is None and args.tls_cert is None and args.tls_key is None:
        return None
    try:
        pem = {
            name: path.read_bytes() if path is not None else None
            for name, path in (("ca", args.tls_ca), ("cert", args.tls_cert), ("key", args.tls_key))
        }
        return TLSConfig(**pem)
    except OSError as exc:
        raise UsageError(f"cannot read {exc.filename}: {exc.strerror}") from None
    except ValueError:
        raise UsageError("--tls-cert and --tls-key go together") from None


class Clients:
    """One channel to the server and the typed clients over it."""

    def __init__(self, args: argparse.Namespace, warn: TextIO) -> None:
        token = _token(args, warn)
        tls = _tls(args)
        self.channel = open_channel(
            args.target,
            credentials=tls.credentials() if tls is not None else None,
            keepalive=None,
            options=tls.channel_options() if tls is not None else (),
        )
        options: dict[str, Any] = {
            "channel": self.channel,
            "timeout": args.timeout,
            "retry": NO_RETRY,
            "token": token,
        }
        self.admin = RemoteSessionAdmin(**options)
        self.store = RemoteStore(**options)
        self.follower = RemoteStore(**{**options, "retry": FOLLOW_RETRY})
        """For ``--follow``: reconnects (resuming its cursor) for up to a minute."""
        self.timeout: float = args.timeout

    async def close(self) -> None:
        await self.channel.close()


# --- Output ----------------------------------------------------------------------


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    return moment.astimezone(UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")


def _short_time(moment: datetime | None) -> str:
    if moment is None:
        return "-"
    return (
        moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
    )


def _jsonable(value: Any) -> Any:
    """A client model value as JSON: times RFC 3339 UTC, bytes base64, enums by value."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return _iso(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    return value


def preview(payload: bytes, width: int = PREVIEW_CHARS) -> str:
    """The start of a payload on one line: text as it is, other bytes in hex."""
    try:
        text = payload.decode()
    except UnicodeDecodeError:
        shown = payload[: width // 2].hex()
        return f"0x{shown}…" if len(payload) > width // 2 else f"0x{shown}"
    flat = "".join(char if char.isprintable() else " " for char in text)
    return flat if len(flat) <= width else flat[: width - 1] + "…"


class Output:
    """Where a command's results go: rich tables, or JSON lines with ``--json``."""

    def __init__(self, as_json: bool, out: TextIO) -> None:
        self.as_json = as_json
        self._out = out
        # Not a terminal: never wrap or cut IDs to 80 columns.
        width = None if out.isatty() else 250
        self.console = Console(file=out, width=width, highlight=False, soft_wrap=False)

    def json(self, value: Any) -> None:
        self._out.write(json.dumps(_jsonable(value), ensure_ascii=False) + "\n")

    def flush(self) -> None:
        self._out.flush()

    def lines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self._out.write(line + "\n")
        self._out.flush()

    def table(
        self, title: str | None, headers: Sequence[str], rows: Iterable[Sequence[Any]]
    ) -> None:
        table = Table(
            title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False, show_edge=False
        )
        for header in headers:
            table.add_column(header, overflow="fold")
        for row in rows:
            table.add_row(*("-" if cell in (None, "") else str(cell) for cell in row))
        self.console.print(table)

    def fields(self, pairs: Sequence[tuple[str, Any]]) -> None:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column(overflow="fold")
        for name, value in pairs:
            table.add_row(name, "-" if value in (None, "") else str(value))
        self.console.print(table)


def _session_row(session: Any) -> list[Any]:
    return [
        session.id,
        session.status.value,
        _short_time(session.created_at),
        _short_time(session.ended_at),
    ]


_SESSION_HEADERS: Final = ("SESSION", "STATUS", "CREATED", "ENDED")
_RUN_HEADERS: Final = ("RUN", "AGENT", "SESSION", "STATUS", "STARTED", "PARENT")
_RECORD_HEADERS: Final = ("ID", "TYPE", "TIMESTAMP", "RUN", "TURN", "EVENT KEY", "BYTES", "PAYLOAD")


def _run_row(run: Any) -> list[Any]:
    return [
        run.run_id,
        run.agent_id,
        run.session_id,
        run.status.value,
        _short_time(run.started_at),
        run.parent_run_id,
    ]


def _record_row(record: RunRecord) -> list[Any]:
    return [
        record.id,
        record.type,
        _short_time(record.timestamp),
        record.run_id,
        record.turn_id,
        record.event_key,
        len(record.payload),
        preview(record.payload),
    ]


def _run_fields(run: Any) -> list[tuple[str, Any]]:
    labels = ", ".join(f"{k}={v}" for k, v in sorted(run.labels.items()))
    return [
        ("run", run.run_id),
        ("agent", run.agent_id),
        ("session", run.session_id or "(sessionless)"),
        ("parent run", run.parent_run_id),
        ("status", run.status.value),
        ("start outcome", run.start_outcome.value),
        ("started", _iso(run.started_at)),
        ("updated", _iso(run.updated_at)),
        ("cancellation", run.cancellation_reason),
        ("labels", labels),
    ]


# --- Commands ----------------------------------------------------------------------

Command = Callable[[argparse.Namespace, Clients, Output], Awaitable[int]]


async def _list(
    fetch: Callable[[str], Awaitable[ListPage[Any]]],
    args: argparse.Namespace,
    out: Output,
    headers: Sequence[str],
    row: Callable[[Any], list[Any]],
) -> int:
    """One page from ``--page-token`` on, or every page with ``--all``."""
    rows: list[Any] = []
    token = args.page_token
    while True:
        page = await fetch(token)
        if out.as_json:
            for item in page.items:
                out.json(item)
        rows.extend(page.items)
        token = page.next_page_token
        if not token or not args.all:
            break
    if not out.as_json:
        out.table(None, headers, (row(item) for item in rows))
    if token:
        print(f"more: continue with --page-token {token} (or --all)", file=sys.stderr)
    return 0


async def sessions_list(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    statuses = [SessionStatus(s) for s in args.status or ()]

    def fetch(token: str) -> Awaitable[ListPage[Any]]:
        return clients.admin.list_sessions(
            statuses=statuses,
            created_after=args.created_after,
            created_before=args.created_before,
            page_size=args.page_size,
            page_token=token,
        )

    return await _list(fetch, args, out, _SESSION_HEADERS, _session_row)


async def sessions_show(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    session = await clients.admin.load_session(args.session_id)
    runs = await clients.admin.list_runs_by_session(args.session_id)
    if out.as_json:
        out.json({**_jsonable(session), "runs": _jsonable(runs)})
        return 0
    out.fields(
        [
            ("session", session.id),
            ("status", session.status.value),
            ("created", _iso(session.created_at)),
            ("ended", _iso(session.ended_at)),
            ("runs", len(runs)),
        ]
    )
    if runs:
        out.table(None, _RUN_HEADERS, (_run_row(run) for run in runs))
    return 0


def _confirmed(args: argparse.Namespace, question: str) -> bool:
    if args.yes:
        return True
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline()
    if not sys.stdin.isatty():
        print(file=sys.stderr)  # the answer was not echoed: end the prompt's line
    return answer.strip().lower() in ("y", "yes")


async def sessions_end(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    question = f"End session {args.session_id}? It will refuse new runs; running runs continue."
    if not _confirmed(args, question):
        print("runstore: not confirmed; nothing was changed", file=sys.stderr)
        return 1
    ended_at = args.at or datetime.now(UTC)
    session = await clients.admin.end_session(args.session_id, ended_at)
    if out.as_json:
        out.json(session)
    else:
        out.table(None, _SESSION_HEADERS, [_session_row(session)])
    return 0


PURGE_BATCH: Final = 100
"""Sessions purged per ``PurgeEndedSessions`` call by ``sessions purge --ended-before``."""


async def sessions_purge(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    if (args.session_id is None) == (args.ended_before is None):
        raise UsageError("give a SESSION_ID or --ended-before TIME (not both)")
    if args.limit is not None and args.session_id is not None:
        raise UsageError("--limit goes with --ended-before")
    if args.ended_before is not None:
        return await _purge_ended_sessions(args, clients, out)
    question = f"Purge session {args.session_id}? Its runs and records are deleted for good."
    if not _confirmed(args, question):
        print("runstore: not confirmed; nothing was changed", file=sys.stderr)
        return 1
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
    cut_off = _iso(args.ended_before)
    question = (
        f"Purge every ended session that ended before {cut_off} and has no running run? "
        "Their runs and records are deleted for good."
    )
    if not _confirmed(args, question):
        print("runstore: not confirmed; nothing was changed", file=sys.stderr)
        return 1
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


async def runs_purge(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    """Retention on demand: batches of ``PurgeSessionlessRuns`` until none match,
    a batch purges nothing, or ``--limit`` root runs were purged."""
    if args.limit is not None and args.limit < 1:
        raise UsageError("--limit must be at least 1")
    cut_off = _iso(args.finished_before)
    question = (
        f"Delete every finished sessionless run that finished before {cut_off}, with its "
        "one-shot children? Their records are deleted for good."
    )
    if not _confirmed(args, question):
        print("runstore: not confirmed; nothing was changed", file=sys.stderr)
        return 1
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


async def runs_list(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    if args.sessionless and args.session:
        raise UsageError("--sessionless lists runs without a session; not with --session")
    statuses = [RunStatus(s) for s in args.status or ()]

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
        )

    return await _list(fetch, args, out, _RUN_HEADERS, _run_row)


async def _every_record(
    fetch: Callable[[str, int], Awaitable[Any]], cursor: str = ""
) -> list[RunRecord]:
    records: list[RunRecord] = []
    while True:
        page = await fetch(cursor, RECORDS_PAGE)
        records.extend(page.events)
        cursor = page.next_cursor
        if not cursor:
            return records


async def runs_show(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    run = await clients.store.load_run(args.run_id)
    records = await _every_record(
        lambda cursor, limit: clients.store.list_run_records(args.run_id, cursor, limit)
    )
    if out.as_json:
        out.json({**_jsonable(run), "records": _jsonable(records)})
        return 0
    out.fields([*_run_fields(run), ("records", len(records))])
    if records:
        out.table(None, _RECORD_HEADERS, (_record_row(r) for r in records))
    return 0


async def records_list(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    limit = args.page_size or 100
    if limit < 0:
        raise UsageError("--page-size must not be negative")

    async def fetch(cursor: str) -> ListPage[RunRecord]:
        if args.run:
            page = await clients.store.list_run_records(args.run, cursor, limit)
        else:
            page = await clients.store.list_session_run_records(args.session, cursor, limit)
        return ListPage(page.events, page.next_cursor)

    return await _list(fetch, args, out, _RECORD_HEADERS, _record_row)


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
    if out.as_json:
        for record in last:
            out.json(record)
    elif last:
        out.table(None, _RECORD_HEADERS, (_record_row(r) for r in last))
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
            out.console.print("  ".join(str(cell) for cell in _record_row(record)))
        out.flush()
    return 0


async def export(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    """Streams every record, page by page, as JSON Lines (``docs/export.md``)."""

    async def fetch(cursor: str) -> Any:
        if args.run:
            return await clients.store.list_run_records(args.run, cursor, RECORDS_PAGE)
        return await clients.store.list_session_run_records(args.session, cursor, RECORDS_PAGE)

    cursor = ""
    while True:
        page = await fetch(cursor)
        out.lines(record_line(record) for record in page.events)
        cursor = page.next_cursor
        if not cursor:
            return 0


async def health(args: argparse.Namespace, clients: Clients, out: Output) -> int:
    stub: Any = health_pb2_grpc.HealthStub(clients.channel)
    try:
        response = await stub.Check(
            health_pb2.HealthCheckRequest(service=args.service), timeout=clients.timeout
        )
    except grpc.aio.AioRpcError as error:
        print(f"runstore: {error.code().name}: {error.details()}", file=sys.stderr)
        return 1
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)
    if out.as_json:
        out.json({"service": args.service, "status": status})
    else:
        out.console.print(status)
    return 0 if response.status == health_pb2.HealthCheckResponse.SERVING else 1


# --- Parser and dispatch ------------------------------------------------------------

COMMANDS: Final = ("sessions", "runs", "records", "export", "health")


def add_commands(commands: Any) -> None:
    """Adds the operator's commands to ``runstore``'s subcommands."""
    connection = _connection_options()

    def leaf(parent: Any, name: str, handler: Command, help: str) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = parent.add_parser(
            name, parents=[connection], help=help, description=help
        )
        parser.set_defaults(handler=handler)
        return parser

    sessions = commands.add_parser("sessions", help="list, show, end and purge sessions")
    session_actions = sessions.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = leaf(session_actions, "list", sessions_list, "sessions by creation time")
    listing.add_argument(
        "--status", action="append", choices=[s.value for s in SessionStatus], help="repeatable"
    )
    listing.add_argument(
        "--created-after", type=_timestamp, metavar="TIME", help="inclusive, ISO 8601"
    )
    listing.add_argument(
        "--created-before", type=_timestamp, metavar="TIME", help="exclusive, ISO 8601"
    )
    _page_options(listing)
    show = leaf(session_actions, "show", sessions_show, "a session and its runs")
    show.add_argument("session_id", metavar="SESSION_ID")
    end = leaf(session_actions, "end", sessions_end, "end a session (asks first)")
    end.add_argument("session_id", metavar="SESSION_ID")
    end.add_argument("--at", type=_timestamp, metavar="TIME", help="ended_at (default: now)")
    end.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    purge = leaf(
        session_actions,
        "purge",
        sessions_purge,
        "delete an ended session, or every one ended before --ended-before (asks first)",
    )
    purge.add_argument("session_id", metavar="SESSION_ID", nargs="?")
    purge.add_argument(
        "--ended-before",
        type=_timestamp,
        metavar="TIME",
        help="purge every ended session without running runs ended before TIME (exclusive)",
    )
    purge.add_argument(
        "--limit", type=int, metavar="N", help="with --ended-before: at most N sessions"
    )
    purge.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")

    runs = commands.add_parser(
        "runs", help="list runs, show one run with its records, purge old sessionless runs"
    )
    run_actions = runs.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = leaf(run_actions, "list", runs_list, "runs by start time")
    listing.add_argument("--session", help="only this session's runs")
    listing.add_argument("--agent", help="only this agent's runs")
    listing.add_argument(
        "--status", action="append", choices=[s.value for s in RunStatus], help="repeatable"
    )
    listing.add_argument(
        "--started-after", type=_timestamp, metavar="TIME", help="inclusive, ISO 8601"
    )
    listing.add_argument(
        "--started-before", type=_timestamp, metavar="TIME", help="exclusive, ISO 8601"
    )
    listing.add_argument("--sessionless", action="store_true", help="only runs without a session")
    _page_options(listing)
    show = leaf(run_actions, "show", runs_show, "a run's metadata, then its records")
    show.add_argument("run_id", metavar="RUN_ID")
    purge_runs = leaf(
        run_actions,
        "purge",
        runs_purge,
        "delete finished sessionless runs finished before --finished-before (asks first)",
    )
    purge_runs.add_argument(
        "--finished-before",
        type=_timestamp,
        metavar="TIME",
        required=True,
        help="runs whose ending record is before TIME (exclusive), with their one-shot children",
    )
    purge_runs.add_argument(
        "--limit", type=int, metavar="N", help="at most N root runs (each with its children)"
    )
    purge_runs.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")

    records = commands.add_parser(
        "records", help="list, tail or follow a run's or a session's records"
    )
    record_actions = records.add_subparsers(dest="action", required=True, metavar="ACTION")
    listing = leaf(record_actions, "list", records_list, "records of a run or a session, in order")
    owner = listing.add_mutually_exclusive_group(required=True)
    owner.add_argument("--run", metavar="RUN_ID", help="a run's records in run order")
    owner.add_argument("--session", metavar="SESSION_ID", help="a session's, in commit order")
    _page_options(listing)
    tail = leaf(
        record_actions, "tail", records_tail, "the last records of a session or run, then follow"
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

    archive = leaf(commands, "export", export, "a run's or a session's records as JSON Lines")
    owner = archive.add_mutually_exclusive_group(required=True)
    owner.add_argument("--run", metavar="RUN_ID", help="a run's records in run order")
    owner.add_argument("--session", metavar="SESSION_ID", help="a session's, in commit order")

    check = commands.add_parser(
        "health", parents=[connection], help="the server's gRPC health status"
    )
    check.add_argument("--service", default="", help="a service name (default: the server)")
    check.set_defaults(handler=health)


def _failure(error: RunstoreError) -> str:
    reason = error.reason if error.reason not in _GENERIC_REASONS else error.status_code
    field = f" (field {error.field})" if error.field else ""
    return f"runstore: {reason}: {error.message}{field}"


async def _run(args: argparse.Namespace, handler: Command) -> int:
    clients = Clients(args, sys.stderr)
    try:
        return await handler(args, clients, Output(args.json, sys.stdout))
    finally:
        await clients.close()


def run(args: argparse.Namespace) -> int:
    """Runs the command ``args`` names; returns the exit code."""
    try:
        return asyncio.run(_run(args, args.handler))
    except UsageError as exc:
        print(f"runstore: {exc}", file=sys.stderr)
        return 2
    except RunstoreError as exc:
        print(_failure(exc), file=sys.stderr)
        return 1
