"""Configuration: one source of defaults, value checks as pure functions, and a
bad value answered with one line naming the flag (exit code 2), never a
traceback."""

from __future__ import annotations

import argparse
import dataclasses
import subprocess
import sys

import pytest

from runstore.cli import program
from runstore.server import config
from runstore.server.config import DEFAULTS, ConfigError, ServerConfig
from runstore.server.core import context, memory, store
from runstore.server.db.postgres import PostgresOptions
from runstore.server.db.sqlite import SqliteOptions


def _load(*argv: str, env: dict[str, str] | None = None) -> ServerConfig:
    parser = argparse.ArgumentParser()
    config.add_arguments(parser)
    return config.load(parser.parse_args(argv), env or {})


@pytest.mark.parametrize(
    ("value", "complaint"),
    [
        ("127.0.0.1:50051", None),
        ("127.0.0.1:0", None),
        ("[::1]:65535", None),
        ("0.0.0.0:1", None),
        ("localhost:8080", None),
        ("unix:/tmp/runstore.sock", None),
        ("127.0.0.1:99999", "must end in a port from 0 to 65535"),
        ("127.0.0.1:-1", "must end in a port from 0 to 65535"),
        ("127.0.0.1:http", "must end in a port from 0 to 65535"),
        ("127.0.0.1", "must be host:port"),
        (":50051", "must be host:port"),
        ("::1:50051", "must put an IPv6 host in brackets ([::1]:port)"),
        ("unix:", "needs a path after unix:"),
    ],
)
def test_listen_address(value: str, complaint: str | None) -> None:
    assert config.listen_address(value) == complaint


def test_number_and_choice_checks() -> None:
    assert config.positive(1) is None
    assert config.positive(0) == config.positive(-5) == "must be greater than 0"
    assert config.non_negative(0) is None
    assert config.non_negative(-0.5) == "must not be negative"
    assert config.one_of("FULL", "NORMAL")("normal") is None
    assert config.one_of("FULL", "NORMAL")("SOMETIMES") == "must be one of FULL, NORMAL"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--page-limit", "-5"], "--page-limit must be greater than 0, not -5"),
        (["--page-limit", "ten"], "--page-limit must be an integer, not 'ten'"),
        (
            ["--listen", "127.0.0.1:99999"],
            "--listen must end in a port from 0 to 65535, not '127.0.0.1:99999'",
        ),
        (
            ["--sqlite-synchronous", "SOMETIMES"],
            "--sqlite-synchronous must be one of OFF, NORMAL, FULL, EXTRA, not 'SOMETIMES'",
        ),
        (["--pg-connect-timeout", "-1"], "--pg-connect-timeout must not be negative, not '-1'"),
        (["--pg-acquire-timeout", "0"], "--pg-acquire-timeout must be greater than 0, not 0.0"),
        (
            ["--pg-statement-timeout", "inf"],
            "--pg-statement-timeout must be a number of seconds or a number and ms, s, m, h "
            "or d (250ms, 4s, 10m, 2h, 30d), not 'inf'",
        ),
        (["--grace-seconds", "-1"], "--grace-seconds must not be negative, not '-1'"),
        (["--grace-seconds", "-5m"], "--grace-seconds must not be negative, not '-5m'"),
        (
            ["--db-operation-timeout", "4 seconds"],
            "--db-operation-timeout must be a number of seconds or a number and ms, s, m, h "
            "or d (250ms, 4s, 10m, 2h, 30d), not '4 seconds'",
        ),
        (["--pg-pool-max", "0"], "--pg-pool-max must be greater than 0, not 0"),
        (["--sqlite-readers", "0"], "--sqlite-readers must be greater than 0, not 0"),
        (["--context-versions-kept", "0"], "--context-versions-kept must be greater than 0, not 0"),
        (
            ["--log-level", "LOUD"],
            "--log-level must be one of CRITICAL, ERROR, WARNING, INFO, DEBUG, not 'LOUD'",
        ),
    ],
)
def test_a_bad_flag_is_a_config_error_naming_the_flag(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as raised:
        _load(*argv)
    assert str(raised.value) == message


def test_a_bad_variable_names_the_variable_and_its_flag() -> None:
    with pytest.raises(ConfigError) as raised:
        _load(env={"RUNSTORE_PAGE_BYTES": "0"})
    assert str(raised.value) == "RUNSTORE_PAGE_BYTES (--page-bytes) must be greater than 0, not 0"
    with pytest.raises(ConfigError, match=r"^RUNSTORE_MIGRATE \(--migrate\) must be true or false"):
        _load(env={"RUNSTORE_MIGRATE": "perhaps"})


def test_flags_beat_variables_and_good_values_pass() -> None:
    loaded = _load("--page-limit", "7", "--listen", "[::]:0", env={"RUNSTORE_PAGE_LIMIT": "-5"})
    assert (loaded.page_limit, loaded.listen) == (7, "[::]:0")
    assert _load(env={"RUNSTORE_SQLITE_SYNCHRONOUS": "normal"}).sqlite_synchronous == "normal"


TIME_FLAGS = [
    spec.name
    for spec in dataclasses.fields(ServerConfig)
    if spec.metadata.get("duration") or spec.name.startswith("retain") or "interval" in spec.name
]


def test_every_time_flag_takes_the_one_duration_syntax() -> None:
    """Each flag whose value is a time reads ``4s``, ``250ms``, ``10m``, ``2h``,
    ``30d`` and a bare number of seconds (docs/configuration.md#durations)."""
    assert len(TIME_FLAGS) >= 18
    for name in TIME_FLAGS:
        for text, seconds in (("4s", 4), ("250ms", 0.25), ("10m", 600), ("2h", 7200), ("30", 30)):
            loaded = _load(config.flag_name(name), text)
            value = getattr(loaded, name)
            if isinstance(value, str):
                assert config.parse_duration(value) == seconds, (name, text)
            else:
                assert value == seconds, (name, text)
        assert _load(config.flag_name(name), "30d") is not None


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["--db-operation-timeout", "-4s"],
            "runstore: --db-operation-timeout must not be negative, not '-4s'",
        ),
        (
            ["--retention-interval", "soon"],
            "runstore: --retention-interval must be a number of seconds or a number and ms, s, "
            "m, h or d (250ms, 4s, 10m, 2h, 30d), not 'soon'",
        ),
    ],
)
def test_the_installed_command_refuses_a_bad_duration_in_one_line(
    argv: list[str], line: str
) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "runstore.server", "serve", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stderr) == (2, line + "\n")


def test_constructing_a_bad_config_directly_fails_the_same_way() -> None:
    with pytest.raises(ConfigError, match=r"^--page-limit must be greater than 0, not -5$"):
        ServerConfig(page_limit=-5)
    with pytest.raises(ConfigError, match=r"^--page-limit must be an integer, not '5'$"):
        ServerConfig(page_limit="5")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^--listen "):
        dataclasses.replace(ServerConfig(), listen="127.0.0.1:70000")


def test_every_default_comes_from_server_config() -> None:
    assert SqliteOptions().synchronous == DEFAULTS.sqlite_synchronous
    assert SqliteOptions().readers == DEFAULTS.sqlite_readers
    pg = PostgresOptions()
    assert (
        pg.pool_min,
        pg.pool_max,
        pg.connect_timeout,
        pg.acquire_timeout,
        pg.statement_timeout,
    ) == (
        DEFAULTS.pg_pool_min,
        DEFAULTS.pg_pool_max,
        DEFAULTS.pg_connect_timeout,
        DEFAULTS.pg_acquire_timeout,
        DEFAULTS.pg_statement_timeout,
    )
    assert store.PageLimits() == store.PageLimits(DEFAULTS.page_limit, DEFAULTS.page_bytes)
    assert memory.DEFAULT_MEMORY_PAGE == context.DEFAULT_TRANSCRIPT_PAGE == DEFAULTS.page_limit
    assert DEFAULTS.context_versions_kept == context.DEFAULT_VERSIONS_KEPT


def test_cli_prints_one_line_and_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert program.main(["serve", "--page-limit", "-5"]) == 2
    captured = capsys.readouterr()
    assert captured.err == "runstore: --page-limit must be greater than 0, not -5\n"
    assert captured.out == ""


def test_the_installed_command_has_no_traceback() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "runstore.server", "serve", "--listen", "127.0.0.1:99999"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr == (
        "runstore: --listen must end in a port from 0 to 65535, not '127.0.0.1:99999'\n"
    )


def test_every_setting_has_a_type_its_flag_and_variable_parse() -> None:
    """A setting's type is read from its evaluated annotation: one of the
    types a flag or variable is converted to and checked as (a new type would
    otherwise pass as text, unchecked)."""
    known = {bool, config.OPTIONAL_BOOL, int, float, str}
    unknown = {
        spec.name: config.setting_type(spec)
        for spec in dataclasses.fields(ServerConfig)
        if config.setting_type(spec) not in known
    }
    assert unknown == {}
    assert config.setting_type(_field("access_log")) == bool | None
    assert config.setting_type(_field("migrate")) is bool


def _field(name: str) -> dataclasses.Field[object]:
    return next(spec for spec in dataclasses.fields(ServerConfig) if spec.name == name)
