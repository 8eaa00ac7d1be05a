"""Server configuration: flags, ``RUNSTORE_*`` environment variables, defaults.

Every setting is a field of ``ServerConfig`` with its flag and variable named
after it (``sqlite_synchronous`` is ``--sqlite-synchronous`` and
``RUNSTORE_SQLITE_SYNCHRONOUS``). A flag beats the variable, which beats the
default.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

DEFAULT_DATABASE_URL = "sqlite:///var/runstore.db"


@dataclass(frozen=True, slots=True)
class ServerConfig:
    listen: str = field(
        default="127.0.0.1:50051", metadata={"help": "address to serve gRPC on (host:port)"}
    )
    database_url: str = field(
        default=DEFAULT_DATABASE_URL,
        metadata={"help": "sqlite:///path/to/file.db or postgresql://user@host/db"},
    )
    migrate: bool = field(
        default=False,
        metadata={"help": "upgrade the schema to head before serving"},
    )
    sqlite_synchronous: str = field(
        default="FULL",
        metadata={
            "help": "SQLite durability: FULL (every commit survives power loss) or NORMAL "
            "(a power loss may drop the last commits; never corrupts)"
        },
    )
    sqlite_readers: int = field(default=2, metadata={"help": "SQLite reader threads"})
    pg_pool_min: int = field(default=2, metadata={"help": "PostgreSQL pool: connections kept"})
    pg_pool_max: int = field(default=16, metadata={"help": "PostgreSQL pool: connections at most"})
    pg_connect_timeout: float = field(
        default=10.0, metadata={"help": "PostgreSQL: seconds to open a connection"}
    )
    pg_acquire_timeout: float = field(
        default=10.0, metadata={"help": "PostgreSQL: seconds to wait for a pooled connection"}
    )
    pg_statement_timeout: float = field(
        default=30.0, metadata={"help": "PostgreSQL: seconds a statement may run"}
    )
    page_limit: int = field(
        default=1000, metadata={"help": "most records in one ListRunRecords/Session page"}
    )
    page_bytes: int = field(
        default=4 * 1024 * 1024, metadata={"help": "payload bytes after which a page is cut"}
    )
    context_versions_kept: int = field(
        default=10, metadata={"help": "how many versions of each context key stay readable"}
    )
    max_message_bytes: int = field(
        default=16 * 1024 * 1024, metadata={"help": "largest gRPC message accepted or sent"}
    )
    grace_seconds: float = field(
        default=10.0, metadata={"help": "on SIGTERM, how long in-flight calls may finish"}
    )
    log_level: str = field(default="INFO", metadata={"help": "logging level"})

    # --- Hardening: limits, timeouts, connections ---------------------------
    max_response_bytes_in_flight: int = field(
        default=64 * 1024 * 1024,
        metadata={
            "help": "bytes of responses produced but not yet delivered to their callers; a "
            "response over 64 KiB that would pass it fails RESOURCE_EXHAUSTED/OVERLOADED"
        },
    )
    handshake_timeout: float = field(
        default=3.0,
        metadata={"help": "seconds a new connection has to finish the HTTP/2 preface"},
    )
    max_connection_idle: float = field(
        default=300.0,
        metadata={"help": "seconds without a call after which a connection is closed (GOAWAY)"},
    )
    keepalive_time: float = field(
        default=60.0,
        metadata={"help": "seconds between the server's pings, which find dead clients"},
    )
    keepalive_timeout: float = field(
        default=20.0,
        metadata={"help": "seconds a client has to answer a ping before it is disconnected"},
    )
    keepalive_min_ping_interval: float = field(
        default=10.0,
        metadata={
            "help": "shortest interval between a client's pings the server accepts; a client "
            "that pings more often is disconnected (GOAWAY too_many_pings)"
        },
    )

    # --- Security: TLS, authentication ---------------------------------------

    # --- Operations: metrics, logs --------------------------------------------


def _env_name(name: str) -> str:
    return f"RUNSTORE_{name.upper()}"


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def _convert(kind: Any, text: str) -> Any:
    if kind in (bool, "bool"):
        return _parse_bool(text)
    if kind in (int, "int"):
        return int(text)
    if kind in (float, "float"):
        return float(text)
    return text


def add_arguments(parser: argparse.ArgumentParser, names: Sequence[str] | None = None) -> None:
    """Adds a flag for each (or each named) setting; unset flags stay None."""
    for spec in fields(ServerConfig):
        if names is not None and spec.name not in names:
            continue
        flag = "--" + spec.name.replace("_", "-")
        help_text = (
            f"{spec.metadata.get('help', '')} [env {_env_name(spec.name)}, "
            f"default {spec.default!r}]"
        )
        if spec.type in (bool, "bool"):
            parser.add_argument(
                flag, action="store_const", const=True, default=None, help=help_text
            )
        else:
            parser.add_argument(flag, default=None, help=help_text)


def load(
    args: argparse.Namespace | None = None, env: Mapping[str, str] | None = None
) -> ServerConfig:
    """The configuration from flags (``args``) over environment over defaults."""
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    for spec in fields(ServerConfig):
        flag_value = getattr(args, spec.name, None) if args is not None else None
        text = flag_value if flag_value is not None else env.get(_env_name(spec.name))
        if text is None:
            continue
        try:
            values[spec.name] = text if not isinstance(text, str) else _convert(spec.type, text)
        except ValueError as exc:
            raise SystemExit(f"invalid value for {spec.name}: {exc}") from None
    return dataclasses.replace(ServerConfig(), **values)
