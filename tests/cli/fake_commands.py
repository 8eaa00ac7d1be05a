"""Commands a fake distribution adds to ``runstore`` (tests/cli/test_program.py)."""

from __future__ import annotations

import argparse

from runstore.cli.plugins import Command


def _arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", required=True)


def _greet(args: argparse.Namespace) -> int:
    print(f"hello {args.name}")
    return 3


HELLO = Command(help="greet someone", add_arguments=_arguments, run=_greet)
OTHER_HELLO = Command(help="greet someone else", add_arguments=_arguments, run=_greet)
NOT_A_COMMAND = "a string"
