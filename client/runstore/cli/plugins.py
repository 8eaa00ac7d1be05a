"""Commands of the ``runstore`` program, and those other distributions add to it.

A command is a small record (``Command``). runstore-client owns the program and
its operator commands; another distribution adds commands by naming a
``Command`` under the entry-point group ``runstore.commands``: runstore-server
adds ``serve``, ``migrate`` and ``backup`` that way. See ``docs/cli.md``.

Loading an entry point never stops the program: the client's own names cannot
be taken over (such an entry point is skipped with one line on stderr), the
same entry point found twice (a distribution visible through two paths) counts
once, and one that fails to import becomes a command that says what failed.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint
from typing import Final, TextIO

ENTRY_POINT_GROUP: Final = "runstore.commands"

BUILTIN_NAMES: Final = frozenset(
    {"sessions", "runs", "records", "export", "health", "auth", "namespaces"}
)
"""runstore-client's own commands: no entry point may take these names."""

SERVER_DISTRIBUTION: Final = "runstore-server"
SERVER_COMMANDS: Final[Mapping[str, str]] = {
    "serve": "serve gRPC",
    "migrate": "upgrade the database schema to head",
    "backup": "an online, verified copy of a SQLite database (the server may serve)",
}
"""What runstore-server adds; without it these names say what to install."""


@dataclass(frozen=True, slots=True)
class Command:
    """One ``runstore NAME`` command: its help line, its options, and what it runs.

    ``run`` returns the exit code: 0 ok, 1 a failed operation, 2 a usage error.
    Its ``args`` also carry ``command_line``, the arguments ``runstore`` was given.
    """

    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str | None = field(default=None)
    """Shown by ``runstore NAME --help`` above the options (default: ``help``)."""
    accepts_any_arguments: bool = False
    """Whether arguments ``add_arguments`` did not declare are ignored rather than
    refused (a command that cannot run takes whatever was meant for the real one)."""


def _no_arguments(parser: argparse.ArgumentParser) -> None:
    """Declares nothing: the command only says why it cannot run."""


def unavailable(help: str, reason: str) -> Command:
    """A command that cannot run here: ``--help`` and running it print ``reason``."""

    def refuse(args: argparse.Namespace) -> int:
        print(f"runstore: {reason}", file=sys.stderr)
        return 1

    return Command(
        help=help,
        add_arguments=_no_arguments,
        run=refuse,
        description=reason,
        accepts_any_arguments=True,
    )


def server_placeholders() -> dict[str, Command]:
    """``serve``, ``migrate`` and ``backup`` when runstore-server is not installed."""
    return {
        name: unavailable(
            f"{help} (needs {SERVER_DISTRIBUTION})",
            f"'{name}' comes with {SERVER_DISTRIBUTION}, which is not installed: "
            f'pip install "{SERVER_DISTRIBUTION}"',
        )
        for name, help in SERVER_COMMANDS.items()
    }


def _origin(entry_point: EntryPoint) -> str:
    dist = entry_point.dist
    owner = f"{dist.name} {dist.version}" if dist is not None else "an installed distribution"
    return f"{owner} (entry point {entry_point.name} = {entry_point.value})"


def contributed(entry_points: Iterable[EntryPoint], warn: TextIO) -> dict[str, Command]:
    """The commands the ``runstore.commands`` entry points name, in order found.

    Identical entry points count once; one that takes a built-in name or a name
    an earlier entry point took is skipped with one line on ``warn``; one that
    fails to load, or names something that is not a ``Command``, becomes an
    ``unavailable`` command saying so.
    """
    commands: dict[str, Command] = {}
    seen: dict[str, EntryPoint] = {}
    found: set[tuple[str, str]] = set()
    for entry_point in entry_points:
        name = entry_point.name
        if (name, entry_point.value) in found:
            continue
        found.add((name, entry_point.value))
        earlier = seen.get(name)
        if name in BUILTIN_NAMES:
            taken = "one of runstore-client's own"
        elif earlier is not None:
            taken = f"taken by {_origin(earlier)}"
        else:
            seen[name] = entry_point
            commands[name] = _loaded(entry_point)
            continue
        print(
            f"runstore: warning: ignoring command '{name}' from {_origin(entry_point)}: "
            f"the name is {taken}",
            file=warn,
        )
    return commands


def _loaded(entry_point: EntryPoint) -> Command:
    try:
        command = entry_point.load()
    except Exception as exc:  # any failure of a plugin's import is the plugin's
        problem = f"{type(exc).__name__}: {exc}"
    else:
        if isinstance(command, Command):
            return command
        problem = f"it names a {type(command).__name__}, not a runstore.cli.plugins.Command"
    reason = (
        f"'{entry_point.name}' from {_origin(entry_point)} is installed but failed to load: "
        f"{problem} (reinstall it, at the version of runstore-client)"
    )
    return unavailable(f"(failed to load: {problem})", reason)
