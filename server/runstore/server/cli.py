"""``runstore serve``, ``migrate``, ``backup`` and ``auth add-token``: thin shells over
``app``, ``migrate``, ``db.backup`` and ``auth``; the operator's commands (``sessions``,
``runs``, ``records``, ``export``, ``health``) are ``admin``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from runstore.server import admin, app, config, logs, tracing, workers
from runstore.server.auth import SecurityError
from runstore.server.auth.principals import AuthFileError, add_token
from runstore.server.auth.roles import ROLES
from runstore.server.auth.secrets import DatabaseURLError, resolve_database_url
from runstore.server.db import backup, migrate

log = logging.getLogger("runstore")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="runstore", description="The Goa-AI runtime store.")
    parser.add_argument(
        "--version", action="version", version=f"runstore {metadata.version('runstore-server')}"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve gRPC")
    config.add_arguments(serve)
    upgrade = commands.add_parser("migrate", help="upgrade the database schema to head")
    config.add_arguments(
        upgrade, names=("database_url", "database_url_file", "log_level", "log_format")
    )
    _add_auth_commands(commands)
    copy = commands.add_parser(
        "backup", help="an online, verified copy of a SQLite database (the server may serve)"
    )
    copy.add_argument("--database-url", required=True, help="sqlite:///path/to/runstore.db")
    copy.add_argument("--to", required=True, type=Path, metavar="PATH", help="a new file")
    admin.add_commands(commands)
    return parser


def _add_auth_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    auth = commands.add_parser("auth", help="manage the principals of an --auth-file")
    actions = auth.add_subparsers(dest="auth_command", required=True)
    add = actions.add_parser(
        "add-token", help="add a principal with a new bearer token (printed once)"
    )
    add.add_argument("--auth-file", required=True, help="the TOML file (created if missing)")
    add.add_argument("--name", required=True, help="the principal's unique name")
    add.add_argument("--role", required=True, choices=sorted(ROLES), help="its one role")


def _auth_command(args: argparse.Namespace) -> int:
    try:
        token = add_token(Path(args.auth_file), args.name, args.role)
    except (AuthFileError, OSError) as exc:
        print(f"runstore: {exc}", file=sys.stderr)
        return 2
    print(token)
    print(
        f"added principal {args.name!r} (role {args.role}) to {args.auth_file}; the token "
        "above is shown only now (SIGHUP a running server to load it)",
        file=sys.stderr,
    )
    return 0


def _backup_command(args: argparse.Namespace) -> int:
    try:
        result = backup.backup_sqlite(args.database_url, args.to)
    except backup.BackupError as exc:
        print(f"runstore: {exc}", file=sys.stderr)
        return 2
    print(
        f"backed up to {result.path} ({result.bytes} bytes, schema {result.schema_revision}; "
        f"verified: {result.sessions} sessions, {result.runs} runs, {result.records} records)"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "auth":
        return _auth_command(args)
    if args.command == "backup":
        return _backup_command(args)
    if args.command in admin.COMMANDS:
        try:
            return admin.run(args)
        except KeyboardInterrupt:
            return 130
    try:
        settings = config.load(args)
    except config.ConfigError as exc:
        print(f"runstore: {exc}", file=sys.stderr)
        return 2
    with logs.configured(settings.log_format, settings.log_level):
        return _run(args, settings, sys.argv[1:] if argv is None else list(argv))


def _run(args: argparse.Namespace, settings: config.ServerConfig, argv: list[str]) -> int:
    json_lines = settings.log_format.upper() == "JSON"

    def say(text: str) -> None:
        """A result line: on stdout, or a log line when every line must be JSON."""
        if json_lines:
            log.info("%s", text)
        else:
            print(text, flush=True)

    def applied(revision: str, description: str) -> None:
        say(f"applied {revision}: {description}")

    try:
        settings = resolve_database_url(settings, args.database_url)
        if args.command == "serve" and settings.workers > 1:
            return workers.supervise(settings, argv)
        if args.command == "serve":
            app.run(settings, reuse_port=workers.is_worker())
        else:
            before = asyncio.run(
                migrate.upgrade(
                    settings.database_url, lambda rev, doc: say(f"applied {rev}: {doc}")
                )
            )
            head = migrate.head_revision()
            if before.at_head:
                say(f"schema already at {head}")
            else:
                say(f"schema upgraded from {before.current or 'empty'} to {head}")
    except (
        migrate.SchemaError,
        SecurityError,
        DatabaseURLError,
        tracing.TracingUnavailable,
        app.ListenError,
        workers.WorkersError,
    ) as exc:
        if json_lines:
            log.error("%s", exc)
        else:
            print(f"runstore: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
