"""``runstore serve`` and ``runstore migrate``: thin shells over ``app`` and ``migrate``."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Sequence
from importlib import metadata

from runstore.server import app, config
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
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
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
            before = asyncio.run(migrate.upgrade(settings.database_url))
            head = migrate.head_revision()
            if before.at_head:
                print(f"schema already at {head}")
            else:
                print(f"schema upgraded from {before.current or 'empty'} to {head}")
    except (migrate.SchemaError, app.ListenError) as exc:
        print(f"runstore: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
