"""``runstore auth``: manage the principals of a server's ``--auth-file``.

It edits the file (``runstore.contract.auth_file``) on the machine it runs on
and calls no server: a running server loads the change on SIGHUP.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Final

from runstore.cli.plugins import Command
from runstore.contract.auth_file import ROLES, AuthFileError, add_token


def _add_token(args: argparse.Namespace) -> int:
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


def add_arguments(auth: argparse.ArgumentParser) -> None:
    actions = auth.add_subparsers(dest="auth_command", required=True, metavar="ACTION")
    add = actions.add_parser(
        "add-token",
        help="add a principal with a new bearer token (printed once)",
        description="add a principal with a new bearer token (printed once)",
    )
    add.add_argument("--auth-file", required=True, help="the TOML file (created if missing)")
    add.add_argument("--name", required=True, help="the principal's unique name")
    add.add_argument("--role", required=True, choices=sorted(ROLES), help="its one role")
    add.set_defaults(handler=_add_token)


def run(args: argparse.Namespace) -> int:
    handler = args.handler
    code: int = handler(args)
    return code


COMMAND: Final = Command(
    help="manage the principals of an --auth-file", add_arguments=add_arguments, run=run
)
