"""What every command that calls a server shares: its connection options, the
clients over one channel, and how a command's outcome becomes an exit code.

The commands talk to a running server over gRPC with the typed client, never to
its database, so they work against any deployment an operator can reach, with
the same TLS and tokens as any other caller. Exit codes: 0 ok, 1 a failed call
(its reason and message on stderr) or an unconfirmed destructive command, 2 a
usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, TextIO

from runstore.cli.output import Output
from runstore.client import (
    NO_RETRY,
    RemoteSessionAdmin,
    RemoteStore,
    RetryPolicy,
    TLSConfig,
    open_channel,
)
from runstore.contract.errors import RunstoreError
from runstore.contract.metadata import READ_LAG_METADATA
from runstore.contract.model import ListPage

DEFAULT_TARGET: Final = "127.0.0.1:50051"
FOLLOW_RETRY: Final = RetryPolicy(initial=0.1, maximum=2.0, deadline=60.0)
"""How ``records tail --follow`` rides out a server restart or a failover."""

_GENERIC_REASONS: Final = frozenset({"TRANSIENT", "RPC_ERROR", "UNKNOWN"})


class UsageError(Exception):
    """Bad options discovered after parsing (exit code 2)."""


def timestamp(text: str) -> datetime:
    """ISO 8601 (``2026-12-01``, ``2026-12-01T10:00:00Z``); no zone means UTC."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not an ISO 8601 time: {text!r} (e.g. 2026-12-01T10:00:00Z)"
        ) from None
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def connection_options(parser: argparse.ArgumentParser) -> None:
    """Options every command takes after its name (``runstore sessions list --json``)."""
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


def page_options(parser: argparse.ArgumentParser) -> None:
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
        self.lagging_store = RemoteStore(**{**options, "metadata": READ_LAG_METADATA})
        """For ``export``: its listings may be served by a standby (docs/failover.md)."""
        self.timeout: float = args.timeout

    async def close(self) -> None:
        await self.channel.close()


Action = Callable[[argparse.Namespace, Clients, Output], Awaitable[int]]
"""One command's work, given its options, the clients and where output goes."""


def action(parent: Any, name: str, handler: Action, help: str) -> argparse.ArgumentParser:
    """Adds ``name`` to ``parent``'s subcommands, taking the connection options, to run
    ``handler``."""
    parser: argparse.ArgumentParser = parent.add_parser(name, help=help, description=help)
    connection_options(parser)
    parser.set_defaults(handler=handler)
    return parser


def _failure(error: RunstoreError) -> str:
    reason = error.reason if error.reason not in _GENERIC_REASONS else error.status_code
    field = f" (field {error.field})" if error.field else ""
    return f"runstore: {reason}: {error.message}{field}"


async def _run(args: argparse.Namespace, handler: Action) -> int:
    clients = Clients(args, sys.stderr)
    try:
        return await handler(args, clients, Output(args.json, sys.stdout))
    finally:
        await clients.close()


def run(args: argparse.Namespace) -> int:
    """Runs the action ``args`` names (set by ``action``); returns the exit code."""
    try:
        return asyncio.run(_run(args, args.handler))
    except UsageError as exc:
        print(f"runstore: {exc}", file=sys.stderr)
        return 2
    except RunstoreError as exc:
        print(_failure(exc), file=sys.stderr)
        return 1


async def listing(
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


def confirmed(args: argparse.Namespace, question: str) -> bool:
    """``--yes``, or the operator answered yes to ``question`` on stdin."""
    if args.yes:
        return True
    print(f"{question} [y/N] ", end="", file=sys.stderr, flush=True)
    answer = sys.stdin.readline()
    if not sys.stdin.isatty():
        print(file=sys.stderr)  # the answer was not echoed: end the prompt's line
    return answer.strip().lower() in ("y", "yes")


def not_confirmed() -> int:
    print("runstore: not confirmed; nothing was changed", file=sys.stderr)
    return 1


def add_confirmation(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
