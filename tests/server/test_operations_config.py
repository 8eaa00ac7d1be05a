"""The operations settings: metrics address, log format, the access log switch;
and ``runstore migrate`` under JSON logs."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from runstore.server import config
from runstore.server.config import ConfigError, ServerConfig


def _load(*argv: str, env: dict[str, str] | None = None) -> ServerConfig:
    parser = argparse.ArgumentParser()
    config.add_arguments(parser)
    return config.load(parser.parse_args(argv), env or {})


def test_metrics_and_logs_are_off_and_text_by_default() -> None:
    settings = _load()
    assert settings.metrics_listen == ""
    assert settings.log_format == "text"
    assert settings.access_log is None
    assert not settings.access_log_on


@pytest.mark.parametrize(
    ("argv", "env", "access"),
    [
        (["--log-format", "json"], {}, True),
        (["--log-format", "JSON", "--no-access-log"], {}, False),
        (["--log-format", "json"], {"RUNSTORE_ACCESS_LOG": "false"}, False),
        (["--access-log"], {}, True),
        ([], {"RUNSTORE_ACCESS_LOG": "yes"}, True),
        (["--no-access-log"], {"RUNSTORE_ACCESS_LOG": "true"}, False),  # the flag wins
    ],
)
def test_the_access_log_is_on_with_json_unless_turned_off(
    argv: list[str], env: dict[str, str], access: bool
) -> None:
    assert _load(*argv, env=env).access_log_on is access


@pytest.mark.parametrize(
    ("argv", "env", "message"),
    [
        (["--metrics-listen", "9464"], {}, "--metrics-listen must be host:port, not '9464'"),
        (
            ["--metrics-listen", "unix:/tmp/m.sock"],
            {},
            "--metrics-listen must be host:port, not 'unix:/tmp/m.sock'",
        ),
        (
            ["--log-format", "xml"],
            {},
            "--log-format must be one of TEXT, JSON, not 'xml'",
        ),
        (
            [],
            {"RUNSTORE_ACCESS_LOG": "sometimes"},
            "RUNSTORE_ACCESS_LOG (--access-log) must be true or false, not 'sometimes'",
        ),
    ],
)
def test_bad_operations_settings_name_the_flag(
    argv: list[str], env: dict[str, str], message: str
) -> None:
    with pytest.raises(ConfigError) as raised:
        _load(*argv, env=env)
    assert str(raised.value) == message


def test_metrics_listen_takes_host_and_port() -> None:
    assert _load("--metrics-listen", "0.0.0.0:9464").metrics_listen == "0.0.0.0:9464"
    assert _load("--metrics-listen", "[::1]:9464").metrics_listen == "[::1]:9464"


def test_migrate_with_json_logs_writes_only_json_lines(tmp_path: Path) -> None:
    database = f"sqlite:///{tmp_path / 'runstore.db'}"
    command = [sys.executable, "-m", "runstore.server", "migrate", "--database-url", database]
    done = subprocess.run(
        [*command, "--log-format", "json"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""  # the result is a log line too
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    assert not any(line["logger"].startswith("alembic") for line in lines)  # quiet at INFO
    assert any(line["logger"] == "runstore.server.db.migrate" for line in lines)
    assert lines[-1]["message"].startswith("schema upgraded from empty to ")
    assert any(line["message"].startswith("applied 0001_") for line in lines)
    again = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert again.stdout.startswith("schema already at ")
