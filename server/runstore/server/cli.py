"""``runstore serve`` and ``runstore migrate``: thin shells over ``app`` and ``migrate``;
the operator's commands (``sessions``, ``runs``, ``records``, ``health``) are ``admin``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from importlib import metadata

from runstore.server import admin, app, config
from runstore.server.db import migrate


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="runstore", description="The Goa-AI runtime store.")
    parser.add_argument(
        "--version", action="version", version=f"runstore {metadata.version('runstore-server')}"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="serve gRPC")
    config.add_arguments(serve)
    upgrade = commands.add_parser("migrate", help="upgrade the database schema to head")
    config.add_arguments(upgrade, names=("database_url", "log_level"))
    admin.add_commands(commands)
    return parser


def _print_applied(revision: str, description: str) -> None:
    print(f"applied {revision}: {description}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
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
    logging.basicConfig(
        level=settings.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        if args.command == "serve":
            asyncio.run(app.serve(settings))
        else:
            before = asyncio.run(migrate.upgrade(settings.database_url, _print_applied))
            head = migrate.head_revision()
            if before.at_head:
                print(f"schema already at {head}")
            else:
                print(f"schema upgraded from {before.current or 'empty'} to {head}")
    except migrate.SchemaError as exc:
        print(f"runstore: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
