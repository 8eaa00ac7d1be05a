"""``runstore serve``, ``migrate`` and ``backup``: what runstore-server adds to the
``runstore`` program (runstore-client's), named under the entry-point group
``runstore.commands``. Thin shells over ``app``, ``db.migrate`` and ``db.backup``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

from runstore.cli.plugins import SERVER_COMMANDS, Command
from runstore.contract import pid_file
from runstore.server import (
    call_scope,
    config,
    listening,
    logs,
    serving,
    startup_failures,
    tracing,
    workers,
)
from runstore.server.auth import SecurityError
from runstore.server.auth.secrets import DatabaseURLError, resolve_database_url
from runstore.server.call_scope import ALL_NAMESPACES
from runstore.server.db import backup, migrate, serve_lock
from runstore.server.interceptors.handlers import ChainKindError

log = logging.getLogger("runstore")

_FAILURES: Final = (
    migrate.SchemaError,
    SecurityError,
    DatabaseURLError,
    tracing.TracingUnavailable,
    listening.ListenError,
    workers.WorkersError,
    ChainKindError,
    pid_file.PidFileError,
    serve_lock.AlreadyServed,
)
"""Start-up failures reported as one line and exit code 2."""


def _configured(
    work: Callable[[argparse.Namespace, config.ServerConfig, Callable[[str], None]], int],
) -> Callable[[argparse.Namespace], int]:
    """Runs ``work`` with the settings its options and environment give, logging
    configured, and a ``say`` for result lines; ``work`` returns the exit code."""

    def run(args: argparse.Namespace) -> int:
        try:
            settings = config.load(args)
        except config.ConfigError as exc:
            print(f"runstore: {exc}", file=sys.stderr)
            return 2
        json_lines = settings.log_format.upper() == "JSON"

        def say(text: str) -> None:
            """A result line: on stdout, or a log line when every line must be JSON."""
            if json_lines:
                log.info("%s", text)
            else:
                print(text, flush=True)

        def fail(line: str, exc: BaseException) -> int:
            """The one line of a start-up failure (the traceback only at DEBUG)."""
            log.debug("start-up failure", exc_info=exc)
            if json_lines:
                log.error("%s", line)
            else:
                print(f"runstore: {line}", file=sys.stderr)
            return 2

        with logs.configured(settings.log_format, settings.log_level):
            resolved = settings
            try:
                resolved = resolve_database_url(settings, args.database_url)
                return work(args, resolved, say)
            except KeyboardInterrupt:
                return 130
            except (migrate.SchemaBehind, migrate.SqliteDirectoryMissing) as exc:
                source = startup_failures.DatabaseSource.of(args, settings)
                line = startup_failures.explain(exc, resolved.database_url, source)
                return fail(line or str(exc), exc)
            except migrate.DatabaseOpenError as exc:
                source = startup_failures.DatabaseSource.of(args, settings)
                explained = startup_failures.explain(exc, resolved.database_url, source)
                cause = type(exc.__cause__).__name__
                return fail(explained or f"{exc}: {cause} (--log-level debug shows why)", exc)
            except _FAILURES as exc:
                return fail(str(exc), exc)

    return run


def _serve(
    args: argparse.Namespace, settings: config.ServerConfig, say: Callable[[str], None]
) -> int:
    if settings.workers > 1:
        return workers.supervise(settings, args.command_line)
    serving.run(settings, reuse_port=workers.is_worker())
    return 0


def _migrate(
    args: argparse.Namespace, settings: config.ServerConfig, say: Callable[[str], None]
) -> int:
    with call_scope.acting_in(ALL_NAMESPACES):  # the whole database (docs/namespaces.md)
        before = asyncio.run(
            migrate.upgrade(settings.database_url, lambda rev, doc: say(f"applied {rev}: {doc}"))
        )
    head = migrate.head_revision()
    if before.at_head:
        say(f"schema already at {head}")
    else:
        say(f"schema upgraded from {before.current or 'empty'} to {head}")
    return 0


def _migrate_arguments(parser: argparse.ArgumentParser) -> None:
    config.add_arguments(
        parser, names=("database_url", "database_url_file", "log_level", "log_format")
    )


def _backup_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--database-url", help="sqlite:///path/to/runstore.db")
    source.add_argument(
        "--database-url-file",
        metavar="PATH",
        help="file holding the database URL, as serve's --database-url-file",
    )
    parser.add_argument("--to", required=True, type=Path, metavar="PATH", help="a new file")


def _backup(args: argparse.Namespace) -> int:
    url = args.database_url
    try:
        if args.database_url_file is not None:
            from_file = config.ServerConfig(database_url_file=args.database_url_file)
            url = resolve_database_url(from_file, None).database_url
        with call_scope.acting_in(ALL_NAMESPACES):  # the whole database
            result = backup.backup_sqlite(url, args.to)
    except (backup.BackupError, DatabaseURLError) as exc:
        print(f"runstore: {exc}", file=sys.stderr)
        return 2
    print(
        f"backed up to {result.path} ({result.bytes} bytes, schema {result.schema_revision}; "
        f"verified: {result.sessions} sessions, {result.runs} runs, {result.records} records, "
        f"{result.seed_records} seed records)"
    )
    return 0


SERVE: Final = Command(
    help=SERVER_COMMANDS["serve"], add_arguments=config.add_arguments, run=_configured(_serve)
)
MIGRATE: Final = Command(
    help=SERVER_COMMANDS["migrate"], add_arguments=_migrate_arguments, run=_configured(_migrate)
)
BACKUP: Final = Command(
    help=SERVER_COMMANDS["backup"], add_arguments=_backup_arguments, run=_backup
)
