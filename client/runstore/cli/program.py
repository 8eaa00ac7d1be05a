"""The ``runstore`` program: runstore-client's operator commands, and the
commands installed distributions add (``runstore.cli.plugins``).

The script comes with runstore-client itself; its commands need the ``cli``
extra (``rich``, ``tomlkit``, ``grpcio-health-checking``). Without it, each of
them says what to install instead of failing on an import.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Iterable, Mapping, Sequence
from importlib import metadata
from importlib.metadata import EntryPoint
from importlib.util import find_spec
from typing import Final, TextIO

from runstore.cli.plugins import (
    BUILTIN_NAMES,
    ENTRY_POINT_GROUP,
    Command,
    contributed,
    server_placeholders,
    unavailable,
)

CLIENT_DISTRIBUTION: Final = "runstore-client"

BUILTIN_MODULES: Final[Mapping[str, str]] = {
    "sessions": "runstore.cli.sessions",
    "runs": "runstore.cli.runs",
    "records": "runstore.cli.records",
    "export": "runstore.cli.export",
    "health": "runstore.cli.health",
    "auth": "runstore.cli.auth",
    "namespaces": "runstore.cli.namespaces",
}
"""Each built-in command (``BUILTIN_NAMES``) and the module whose ``COMMAND`` it is."""

CLI_EXTRA_MODULES: Final = ("rich", "tomlkit", "grpc_health")
"""What the ``cli`` extra installs, by import name."""


def missing_extra_modules() -> list[str]:
    return [name for name in CLI_EXTRA_MODULES if find_spec(name) is None]


def builtin_commands() -> dict[str, Command]:
    """runstore-client's own commands, or, without the ``cli`` extra, commands
    that say how to install it."""
    missing = missing_extra_modules()
    if missing:
        reason = (
            f"the operator commands need {CLIENT_DISTRIBUTION}'s cli extra "
            f'(missing: {", ".join(missing)}): pip install "{CLIENT_DISTRIBUTION}[cli]"'
        )
        return {
            name: unavailable(f"(needs {CLIENT_DISTRIBUTION}[cli])", reason)
            for name in BUILTIN_MODULES
        }
    commands: dict[str, Command] = {}
    for name, module in BUILTIN_MODULES.items():
        command = importlib.import_module(module).COMMAND
        assert isinstance(command, Command)
        commands[name] = command
    return commands


def every_command(entry_points: Iterable[EntryPoint], warn: TextIO) -> dict[str, Command]:
    """The built-in commands, then those ``entry_points`` add; runstore-server's
    names say what to install when no entry point adds them."""
    return {**builtin_commands(), **server_placeholders(), **contributed(entry_points, warn)}


def parser(commands: Mapping[str, Command], version: str) -> argparse.ArgumentParser:
    """``runstore`` with one subcommand per entry of ``commands``."""
    program = argparse.ArgumentParser(prog="runstore", description="The Goa-AI runtime store.")
    program.add_argument("--version", action="version", version=version)
    subcommands = program.add_subparsers(dest="command", required=True)
    for name, command in commands.items():
        sub = subcommands.add_parser(
            name, help=command.help, description=command.description or command.help
        )
        command.add_arguments(sub)
    return program


def quiet_grpc_core() -> None:
    """gRPC's C core logs each failed TLS handshake on stderr (a wrong server
    name even at ERROR level: "No match found for server name"); a client
    command says what failed in its own one line, so the core stays silent
    unless ``GRPC_VERBOSITY`` asks otherwise. Takes effect only before grpc is
    first imported, which the built-in commands do after this (a caller that
    imported grpc already, such as a test calling ``main``, is left alone)."""
    if "grpc" not in sys.modules:
        os.environ.setdefault("GRPC_VERBOSITY", "NONE")


def version(entry_points: Iterable[EntryPoint]) -> str:
    """``runstore (runstore-client X, <each distribution that adds commands> Y)``."""
    # Imported here, not at the top: importing runstore.client imports grpc,
    # which must wait for quiet_grpc_core().
    from runstore.client.version import __version__ as client_version

    owners = {f"{ep.dist.name} {ep.dist.version}" for ep in entry_points if ep.dist is not None}
    parts = [f"{CLIENT_DISTRIBUTION} {client_version}", *sorted(owners)]
    return "runstore (" + ", ".join(parts) + ")"


def main(
    argv: Sequence[str] | None = None, *, entry_points: Iterable[EntryPoint] | None = None
) -> int:
    """Runs ``runstore ARGV``; returns the exit code. ``entry_points`` stands in for
    the installed ``runstore.commands`` group (tests)."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments and arguments[0] in BUILTIN_NAMES:
        # A built-in command: nothing another distribution adds is needed (or imported).
        quiet_grpc_core()
        found: list[EntryPoint] = []
        commands = builtin_commands()
    else:
        found = list(
            metadata.entry_points(group=ENTRY_POINT_GROUP) if entry_points is None else entry_points
        )
        commands = every_command(found, sys.stderr)
    runstore = parser(commands, version(found))
    args, unknown = runstore.parse_known_args(arguments)
    if unknown and not commands[args.command].accepts_any_arguments:
        runstore.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.command_line = arguments  # for a command that starts copies of itself
    try:
        return commands[args.command].run(args)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return closed_pipe()


CLOSED_PIPE_EXIT: Final = 128 + signal.SIGPIPE
"""What a shell reports for a program that a closed pipe ended (141)."""


def closed_pipe() -> int:
    """The reader of stdout went away (``runstore export ... | head -1``): stop
    quietly, as ``cat`` would. Output still buffered goes to /dev/null, so
    Python's own flush at exit cannot fail with a second traceback."""
    try:
        descriptor = sys.stdout.fileno()
    except (OSError, ValueError):  # not a file (an embedding caller's stream)
        return CLOSED_PIPE_EXIT
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, descriptor)
    os.close(devnull)
    return CLOSED_PIPE_EXIT
