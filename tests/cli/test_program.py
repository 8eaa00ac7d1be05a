"""The ``runstore`` program: its built-in commands, and what other distributions
add through the ``runstore.commands`` entry points (fake ones here)."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
from importlib import metadata
from importlib.metadata import EntryPoint
from typing import Any

import pytest

from runstore.cli import plugins, program
from runstore.cli.plugins import BUILTIN_NAMES, ENTRY_POINT_GROUP, Command
from runstore.client.version import __version__ as client_version
from runstore.server import cli as server_cli
from tests.cli import fake_commands

SERVER_NAMES = {"serve", "migrate", "backup"}


def entry_point(name: str, value: str) -> EntryPoint:
    return EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)


HELLO = entry_point("hello", "tests.cli.fake_commands:HELLO")


def subcommands(parser: argparse.ArgumentParser) -> list[str]:
    (action,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return list(action.choices)


def run(argv: list[str], entry_points: list[EntryPoint]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = program.main(argv, entry_points=entry_points)
        except SystemExit as exit_:  # argparse: --help, usage errors
            code = exit_.code if isinstance(exit_.code, int) else 2
    return code, out.getvalue(), err.getvalue()


def test_a_fake_distribution_adds_exactly_its_command() -> None:
    warn = io.StringIO()
    without = program.every_command([], warn)
    with_hello = program.every_command([HELLO], warn)
    assert set(without) == BUILTIN_NAMES | SERVER_NAMES
    assert set(with_hello) == BUILTIN_NAMES | SERVER_NAMES | {"hello"}
    assert with_hello["hello"] is fake_commands.HELLO
    assert subcommands(program.parser(with_hello, "v")) == [
        "sessions",
        "runs",
        "records",
        "export",
        "health",
        "auth",
        "namespaces",
        "serve",
        "migrate",
        "backup",
        "hello",
    ]
    assert warn.getvalue() == ""
    assert run(["hello", "--name", "ops"], [HELLO]) == (3, "hello ops\n", "")


def test_the_builtin_names_are_the_builtin_modules() -> None:
    assert frozenset(program.BUILTIN_MODULES) == BUILTIN_NAMES
    assert set(program.builtin_commands()) == BUILTIN_NAMES


def test_an_entry_point_cannot_take_a_builtin_name() -> None:
    warn = io.StringIO()
    commands = program.every_command(
        [entry_point("sessions", "tests.cli.fake_commands:HELLO"), HELLO], warn
    )
    assert commands["sessions"] is program.builtin_commands()["sessions"]
    assert commands["hello"] is fake_commands.HELLO
    (line,) = warn.getvalue().splitlines()
    assert "ignoring command 'sessions'" in line and "runstore-client's own" in line
    code, out, _ = run(["sessions", "--help"], [])
    assert code == 0 and "list, show, end and purge sessions" in out


def test_a_second_entry_point_for_a_taken_name_is_skipped_with_one_line() -> None:
    warn = io.StringIO()
    other = entry_point("hello", "tests.cli.fake_commands:OTHER_HELLO")
    commands = program.every_command([HELLO, other, other], warn)
    assert commands["hello"] is fake_commands.HELLO
    (line,) = warn.getvalue().splitlines()
    assert "ignoring command 'hello'" in line and "tests.cli.fake_commands:HELLO" in line


def test_the_same_entry_point_found_twice_counts_once() -> None:
    """A distribution visible through two paths (a lib64 symlink, a stale
    egg-info) lists its entry points twice; argparse (3.11+) refuses a
    subcommand added twice, so they must collapse."""
    warn = io.StringIO()
    twice = [HELLO, entry_point("hello", "tests.cli.fake_commands:HELLO")]
    commands = program.every_command(twice, warn)
    assert subcommands(program.parser(commands, "v")).count("hello") == 1
    assert warn.getvalue() == ""
    assert run(["hello", "--name", "x"], twice)[:2] == (3, "hello x\n")


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("tests.cli.plugin_that_fails:COMMAND", "ImportError: cannot import name 'Command'"),
        ("tests.cli.no_such_module:COMMAND", "ModuleNotFoundError"),
        ("tests.cli.fake_commands:MISSING", "AttributeError"),
        ("tests.cli.fake_commands:NOT_A_COMMAND", "names a str, not a runstore.cli.plugins"),
    ],
)
def test_a_plugin_that_fails_to_load_becomes_a_command_saying_what_failed(
    value: str, problem: str
) -> None:
    broken = entry_point("serve", value)
    code, out, err = run(["serve", "--listen", "127.0.0.1:1"], [broken])
    assert code == 1 and out == ""
    assert err.startswith("runstore: 'serve' from ") and problem in err
    assert "installed but failed to load" in err and err.count("\n") == 1
    code, out, _ = run(["serve", "--help"], [broken])
    assert code == 0 and problem in " ".join(out.split())
    # Every other command is still there and works.
    assert run(["hello", "--name", "x"], [broken, HELLO])[:2] == (3, "hello x\n")
    code, out, _ = run(["--help"], [broken])
    assert code == 0 and "failed to load" in out


def test_without_runstore_server_its_commands_say_what_to_install() -> None:
    for name in SERVER_NAMES:
        code, out, err = run([name], [])
        assert code == 1 and out == ""
        assert err == (
            f"runstore: '{name}' comes with runstore-server, which is not installed: "
            'pip install "runstore-server"\n'
        )
        code, out, _ = run([name, "--help"], [])
        assert code == 0 and 'pip install "runstore-server"' in " ".join(out.split())


def test_without_the_cli_extra_the_builtin_commands_say_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = program.find_spec
    monkeypatch.setattr(program, "find_spec", lambda name: None if name == "rich" else real(name))
    for name in BUILTIN_NAMES:
        code, out, err = run([name, "list"], [])
        assert code == 1 and out == ""
        assert err == (
            "runstore: the operator commands need runstore-client's cli extra "
            '(missing: rich): pip install "runstore-client[cli]"\n'
        )
    # What another distribution adds still works.
    assert run(["hello", "--name", "x"], [HELLO])[:2] == (3, "hello x\n")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_the_cli_extra_modules_are_what_the_extra_installs() -> None:
    """``CLI_EXTRA_MODULES`` (checked before any built-in command loads) and the
    ``cli`` extra of client/pyproject.toml name the same distributions."""
    requires = metadata.requires("runstore-client") or []
    extra = {
        normalized(re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0])
        for requirement in requires
        if re.search(r"extra\s*==\s*['\"]cli['\"]", requirement)
    }
    owners = metadata.packages_distributions()
    modules = {normalized(owner) for name in program.CLI_EXTRA_MODULES for owner in owners[name]}
    assert extra and modules == extra


def test_runstore_server_adds_serve_migrate_and_backup_and_declares_no_script() -> None:
    server = metadata.distribution("runstore-server")
    added = {ep.name: ep for ep in server.entry_points if ep.group == ENTRY_POINT_GROUP}
    assert set(added) == SERVER_NAMES
    loaded: dict[str, Any] = {name: ep.load() for name, ep in added.items()}
    assert loaded == {
        "serve": server_cli.SERVE,
        "migrate": server_cli.MIGRATE,
        "backup": server_cli.BACKUP,
    }
    assert all(isinstance(command, Command) for command in loaded.values())
    assert not [ep for ep in server.entry_points if ep.group == "console_scripts"]
    client = metadata.distribution("runstore-client")
    scripts = [ep for ep in client.entry_points if ep.group == "console_scripts"]
    assert [(ep.name, ep.value) for ep in scripts] == [("runstore", "runstore.cli.program:main")]
    # The installed program, with the installed entry points, has every command.
    assert set(program.every_command(added.values(), io.StringIO())) == (
        BUILTIN_NAMES | SERVER_NAMES
    )


def test_the_version_names_each_distribution_that_adds_commands() -> None:
    client = client_version  # its one source, not the installed metadata
    assert program.version([HELLO]) == f"runstore (runstore-client {client})"
    server = metadata.distribution("runstore-server")
    added = [ep for ep in server.entry_points if ep.group == ENTRY_POINT_GROUP]
    assert program.version(added) == (
        f"runstore (runstore-client {client}, runstore-server {server.version})"
    )


def test_placeholders_are_only_for_runstore_servers_commands() -> None:
    assert set(plugins.server_placeholders()) == SERVER_NAMES
    assert not SERVER_NAMES & BUILTIN_NAMES
