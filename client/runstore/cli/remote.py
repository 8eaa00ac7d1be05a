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
import logging
import os
import ssl
import sys
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final, TextIO

from runstore.cli.output import Output, status_counts_line
from runstore.client import (
    NO_RETRY,
    InvalidTokenError,
    RemoteNamespaceAdmin,
    RemoteSessionAdmin,
    RemoteStore,
    RetryPolicy,
    TLSConfig,
    TLSHandshakeError,
    TLSProblem,
    clean_token,
    handshake,
    open_channel,
    read_token_file,
)
from runstore.client.retry import REFUSAL_LOGGER
from runstore.contract.durations import parse_duration
from runstore.contract.errors import RunstoreError, UnavailableError
from runstore.contract.metadata import READ_LAG_METADATA
from runstore.contract.model import ListPage
from runstore.contract.namespaces import NAME_RULE as NAMESPACE_RULE
from runstore.contract.namespaces import is_valid_name as is_valid_namespace

DEFAULT_TARGET: Final = "127.0.0.1:50051"
FOLLOW_RETRY: Final = RetryPolicy(initial=0.1, maximum=2.0, deadline=60.0, refusal_deadline=None)
"""How ``records tail --follow`` rides out a server restart or a failover (for a
minute), and a refusal such as its namespace's ``watch_streams`` quota (for as
long as it is refused, one line on stderr per wait)."""

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


def ago(text: str) -> datetime:
    """A duration (``90s``, ``30m``, ``1h``, ``7d``) back from now, in UTC."""
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return datetime.now(UTC) - timedelta(seconds=seconds)


def time_range_options(parser: argparse.ArgumentParser, what: str) -> None:
    """``--WHAT-after``/``--WHAT-before`` (ISO 8601) and ``--since`` (a duration
    back from now, for ``--WHAT-after``)."""
    lower = parser.add_mutually_exclusive_group()
    lower.add_argument(
        f"--{what}-after", type=timestamp, metavar="TIME", help="inclusive, ISO 8601"
    )
    lower.add_argument(
        "--since",
        type=ago,
        metavar="DURATION",
        dest=f"{what}_after",
        help=f"{what} within the last DURATION (90s, 30m, 1h, 7d)",
    )
    parser.add_argument(
        f"--{what}-before", type=timestamp, metavar="TIME", help="exclusive, ISO 8601"
    )


def connection_options(parser: argparse.ArgumentParser) -> None:
    """Options every command takes after its name (``runstore sessions list --json``);
    ``connection_settings`` checks them once parsed."""
    group = parser.add_argument_group("connection and output")
    group.add_argument(
        "--target",
        metavar="HOST:PORT",
        default=os.environ.get("RUNSTORE_TARGET", DEFAULT_TARGET),
        help=f"server HOST:PORT (env RUNSTORE_TARGET; default {DEFAULT_TARGET})",
    )
    for flag, variable, what in TLS_OPTIONS:
        group.add_argument(
            flag,
            metavar="PATH",
            default=os.environ.get(variable) or None,
            help=f"{what} ({variable})",
        )
    group.add_argument(
        "--token-file",
        metavar="PATH",
        help="file holding the bearer token (or env RUNSTORE_TOKEN)",
    )
    group.add_argument(
        "--token",
        metavar="TOKEN",
        help="bearer token on the command line (visible to other users: avoid)",
    )
    group.add_argument(
        "--namespace",
        metavar="NS",
        default=os.environ.get("RUNSTORE_NAMESPACE") or None,
        help="the namespace the command acts in (env RUNSTORE_NAMESPACE; default: the "
        "token's only namespace, or default; docs/namespaces.md)",
    )
    group.add_argument(
        "--timeout",
        metavar="DURATION",
        default=DEFAULT_TIMEOUT,
        help=f"per call: 10s, 500ms, 2m or seconds (default {DEFAULT_TIMEOUT})",
    )
    group.add_argument("--json", action="store_true", help="one JSON object per line")


TLS_OPTIONS: Final = (
    ("--tls-ca", "RUNSTORE_TLS_CA", "CA certificate (PEM) that signed the server's"),
    ("--tls-cert", "RUNSTORE_TLS_CERT", "client certificate (PEM) for mTLS"),
    ("--tls-key", "RUNSTORE_TLS_KEY", "private key (PEM) of --tls-cert"),
)
"""Each TLS flag, the variable it defaults to, and its help."""

DEFAULT_TIMEOUT: Final = "10s"


def page_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--newest-first", action="store_true", help="the newest first (default: the oldest)"
    )
    parser.add_argument(
        "--counts",
        action="store_true",
        help="also print how many match per status, to stderr (N+: at least N)",
    )
    parser.add_argument("--page-size", type=int, default=0, help="rows per page (server default)")
    parser.add_argument("--page-token", default="", help="continue from a previous page")
    parser.add_argument("--all", action="store_true", help="follow every page to the end")


def checked_target(text: str) -> str:
    """``HOST:PORT`` (``[v6]:PORT`` too) with a port in 1-65535, or a ``unix:`` path;
    raises ``UsageError`` rather than let gRPC pick a port or retry a typo."""
    if text.startswith("unix:"):
        return text
    host, separator, port = text.rpartition(":")
    if not separator or not host or host in ("[]",):
        raise UsageError(f"--target must be HOST:PORT (e.g. {DEFAULT_TARGET}), not {text!r}")
    if host.startswith("[") != host.endswith("]") or (":" in host and not host.startswith("[")):
        raise UsageError(f"--target: write an IPv6 host in brackets ([::1]:50051), not {text!r}")
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise UsageError(f"--target: the port must be 1-65535, not {port!r} (in {text!r})")
    return text


def checked_timeout(text: str) -> float:
    try:
        seconds = parse_duration(str(text))
    except ValueError as exc:
        raise UsageError(f"--timeout {exc}") from None
    if seconds <= 0:
        raise UsageError(f"--timeout must be more than zero, not {text!r}")
    return seconds


def _token(args: argparse.Namespace, warn: TextIO) -> str | None:
    """The bearer token of ``--token``, ``--token-file`` or ``RUNSTORE_TOKEN``,
    without surrounding whitespace; an unusable one is a usage error."""
    if args.token is not None and args.token_file is not None:
        raise UsageError("give --token or --token-file, not both")
    try:
        if args.token is not None:
            print(
                "runstore: warning: --token is visible to other users of this machine "
                "(ps, /proc); prefer --token-file or RUNSTORE_TOKEN",
                file=warn,
            )
            return clean_token(str(args.token), "--token")
        if args.token_file is not None:
            try:
                return read_token_file(args.token_file)
            except OSError as exc:
                raise UsageError(
                    f"cannot read --token-file {args.token_file}: {exc.strerror or exc}"
                ) from None
        from_environment = os.environ.get("RUNSTORE_TOKEN")
        if not from_environment:
            return None
        return clean_token(from_environment, "RUNSTORE_TOKEN")
    except InvalidTokenError as exc:
        raise UsageError(str(exc)) from None


def _pem_file(flag: str, path: str) -> bytes:
    """The PEM file ``path`` that ``flag`` names; read now, so a missing or
    non-PEM one is a usage error rather than a failed handshake."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {flag} {path}: {exc.strerror or exc}") from None
    if b"-----BEGIN" not in data:
        raise UsageError(f"{flag} {path} is not a PEM file (no -----BEGIN line)")
    return data


def _refused_password() -> bytes:
    raise UsageError("--tls-key is encrypted; gRPC needs an unencrypted key (PEM)")


def check_key_pair(cert: str, key: str) -> None:
    """``key`` is the private key of the certificate in ``cert``: loaded as a
    pair now, so a mismatch is one usage error naming both files rather than
    an unexplained failed handshake."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_cert_chain(cert, key, password=_refused_password)
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            mismatch = f"--tls-key {key} is not the private key of --tls-cert {cert}"
            raise UsageError(mismatch) from None
        raise UsageError(
            f"--tls-cert {cert} and --tls-key {key} do not load as a certificate and its "
            f"key: {exc.reason or exc}"
        ) from None


def _tls(args: argparse.Namespace) -> TLSConfig | None:
    """TLS when a CA or a client certificate is given (flags or RUNSTORE_TLS_*)."""
    if args.tls_ca is None and args.tls_cert is None and args.tls_key is None:
        return None
    if (args.tls_cert is None) != (args.tls_key is None):
        raise UsageError("--tls-cert and --tls-key go together")
    ca = _pem_file("--tls-ca", args.tls_ca) if args.tls_ca is not None else None
    cert = key = None
    if args.tls_cert is not None:
        cert, key = _pem_file("--tls-cert", args.tls_cert), _pem_file("--tls-key", args.tls_key)
        check_key_pair(args.tls_cert, args.tls_key)
    return TLSConfig(ca=ca, cert=cert, key=key)


@dataclass(frozen=True, slots=True)
class ConnectionSettings:
    """The connection options, checked: what ``Clients`` opens a channel with."""

    target: str
    timeout: float
    tls: TLSConfig | None
    token: str | None
    namespace: str | None = None


def connection_settings(args: argparse.Namespace, warn: TextIO) -> ConnectionSettings:
    """Checks the options as ``serve`` checks its own; raises ``UsageError``."""
    return ConnectionSettings(
        target=checked_target(args.target),
        timeout=checked_timeout(args.timeout),
        tls=_tls(args),
        token=_token(args, warn),
        namespace=checked_namespace(args.namespace),
    )


def checked_namespace(text: str | None) -> str | None:
    if text is not None and not is_valid_namespace(text):
        raise UsageError(f"--namespace must match {NAMESPACE_RULE}, not {text!r}")
    return text


class Clients:
    """One channel to the server and the typed clients over it."""

    def __init__(self, settings: ConnectionSettings) -> None:
        tls = settings.tls
        self.settings = settings
        self.channel = open_channel(
            settings.target,
            credentials=tls.credentials() if tls is not None else None,
            keepalive=None,
            options=tls.channel_options() if tls is not None else (),
        )
        options: dict[str, Any] = {
            "channel": self.channel,
            "timeout": settings.timeout,
            "retry": NO_RETRY,
            "token": settings.token,
            "namespace": settings.namespace,
        }
        self.admin = RemoteSessionAdmin(**options)
        self.namespaces = RemoteNamespaceAdmin(**options)
        """NamespaceAdmin (it ignores the namespace the options name)."""
        self.store = RemoteStore(**options)
        self.follower = RemoteStore(**{**options, "retry": FOLLOW_RETRY})
        """For ``--follow``: reconnects (resuming its cursor) for up to a minute."""
        self.lagging_store = RemoteStore(**{**options, "metadata": READ_LAG_METADATA})
        """For ``export``: its listings may be served by a standby (docs/failover.md)."""
        self.timeout: float = settings.timeout

    async def close(self) -> None:
        await self.channel.close()

    async def tls_problem(self, error: UnavailableError) -> TLSProblem | None:
        """The TLS mistake behind a failed connection, if one is (the channel
        is shared, so the clients cannot tell on their own)."""
        tls = self.settings.tls
        return await asyncio.to_thread(
            handshake.diagnose,
            error.message,
            self.settings.target,
            uses_tls=tls is not None,
            has_ca=tls is not None and tls.ca is not None,
            cert=tls.cert if tls is not None and isinstance(tls.cert, bytes) else None,
            key=tls.key if tls is not None and isinstance(tls.key, bytes) else None,
        )


CLI_HINTS: Final = {
    TLSProblem.SERVER_EXPECTS_TLS: "pass --tls-ca (RUNSTORE_TLS_CA), the CA of its certificate",
    TLSProblem.CLIENT_CERTIFICATE_REQUIRED: (
        "pass --tls-cert and --tls-key (RUNSTORE_TLS_CERT, RUNSTORE_TLS_KEY)"
    ),
    TLSProblem.CLIENT_CERTIFICATE_REFUSED: (
        "use a --tls-cert signed by the server's --tls-client-ca"
    ),
    TLSProblem.SERVER_NOT_TRUSTED: "pass the CA that signed the server's certificate as --tls-ca",
    TLSProblem.SERVER_NOT_TRUSTED_BY_SYSTEM: (
        "pass the CA that signed the server's certificate as --tls-ca"
    ),
    TLSProblem.WRONG_SERVER_NAME: "connect by a name the server's certificate holds",
    TLSProblem.SERVER_IS_PLAINTEXT: "drop --tls-ca/--tls-cert/--tls-key (and RUNSTORE_TLS_*)",
}
"""``handshake.CLIENT_HINTS`` in the CLI's words."""


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


async def _run(args: argparse.Namespace, handler: Action, settings: ConnectionSettings) -> int:
    clients = Clients(settings)
    try:
        try:
            return await handler(args, clients, Output(args.json, sys.stdout))
        except UnavailableError as error:
            problem = (
                error.problem
                if isinstance(error, TLSHandshakeError)
                else await clients.tls_problem(error)
            )
            if problem is None:
                raise
            raise TLSHandshakeError(problem, error.message, CLI_HINTS[problem]) from error
    finally:
        await clients.close()


class RefusalLines(logging.Handler):
    """Every refusal a command retries, as one line on stderr: the client's
    WARNING record (the quota and the wait), so no retry is silent."""

    def emit(self, record: logging.LogRecord) -> None:
        print(f"runstore: {record.getMessage()}", file=sys.stderr, flush=True)


def report_refusals() -> None:
    """Puts ``RefusalLines`` on the client's refusal logger, once."""
    logger = logging.getLogger(REFUSAL_LOGGER)
    if not any(isinstance(handler, RefusalLines) for handler in logger.handlers):
        logger.addHandler(RefusalLines(logging.WARNING))


def run(args: argparse.Namespace) -> int:
    """Runs the action ``args`` names (set by ``action``); returns the exit code."""
    report_refusals()
    try:
        settings = connection_settings(args, sys.stderr)
        return asyncio.run(_run(args, args.handler, settings))
    except UsageError as exc:
        print(f"runstore: {exc}", file=sys.stderr)
        return 2
    except TLSHandshakeError as exc:
        print(f"runstore: {exc.problem.value}: {exc.hint} ({exc.cause})", file=sys.stderr)
        return 1
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
    if counts := page.status_counts:
        print(f"counts: {status_counts_line(counts)}", file=sys.stderr)
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
