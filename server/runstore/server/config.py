"""Server configuration: flags, ``RUNSTORE_*`` environment variables, defaults.

Every setting is a field of ``ServerConfig`` with its flag and variable named
after it (``sqlite_synchronous`` is ``--sqlite-synchronous`` and
``RUNSTORE_SQLITE_SYNCHRONOUS``). A flag beats the variable, which beats the
default. The fields' defaults are the only ones: the core and the database
backends take theirs from ``DEFAULTS``, which is why this module imports
nothing but the standard library and the contract's duration syntax (every
time flag takes ``4s``, ``250ms``, ``10m``, ``2h``, ``30d`` or a bare number
of seconds: docs/configuration.md#durations). A field's ``check`` (in its metadata) is a
pure function that says what is wrong with a value; a bad value is a
``ConfigError`` naming the flag, whichever way the value came in.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import math
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Final, get_type_hints

from runstore.contract import durations

DEFAULT_DATABASE_URL = "sqlite:///var/runstore.db"

SQLITE_SYNCHRONOUS_LEVELS: Final = ("OFF", "NORMAL", "FULL", "EXTRA")
LOG_LEVELS: Final = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")
LOG_FORMATS: Final = ("TEXT", "JSON")
EVENT_LOOPS: Final = ("AUTO", "UVLOOP", "ASYNCIO")


class ConfigError(ValueError):
    """A setting the server cannot use; the message is one line that names the flag."""


# --- Value checks: each says what is wrong with a value, or None ---------------

Check = Callable[[Any], "str | None"]


def positive(value: Any) -> str | None:
    return None if value > 0 else "must be greater than 0"


def non_negative(value: Any) -> str | None:
    return None if value >= 0 else "must not be negative"


def one_of(*choices: str) -> Check:
    """Any of ``choices``, in any letter case."""

    def check(value: Any) -> str | None:
        return None if str(value).upper() in choices else f"must be one of {', '.join(choices)}"

    return check


def uvloop_installed() -> bool:
    """Whether uvloop imports here: runstore-server installs it where it builds
    (CPython, not on Windows); elsewhere ``--event-loop auto`` uses asyncio's."""
    try:
        importlib.import_module("uvloop")
    except ImportError:
        return False
    return True


def event_loop_choice(value: Any) -> str | None:
    """One of ``EVENT_LOOPS``; ``uvloop`` only where it is installed."""
    complaint = one_of(*EVENT_LOOPS)(value)
    if complaint is None and str(value).upper() == "UVLOOP" and not uvloop_installed():
        return "must be auto or asyncio where uvloop is not installed (pip install uvloop)"
    return complaint


def listen_address(value: Any) -> str | None:
    """``host:port`` (``[v6]:port`` for IPv6) with a port from 0 to 65535, or a ``unix:`` path."""
    text = str(value)
    if text.startswith(("unix:", "unix-abstract:")):
        return None if text.partition(":")[2] else "needs a path after unix:"
    host, colon, port = text.rpartition(":")
    if not colon or not host:
        return "must be host:port"
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        return "must end in a port from 0 to 65535"
    if ":" in host and not (host.startswith("[") and host.endswith("]")):
        return "must put an IPv6 host in brackets ([::1]:port)"
    return None


def optional_listen_address(value: Any) -> str | None:
    """Empty (off), or ``host:port`` as for ``--listen`` (no unix sockets)."""
    if value == "":
        return None
    if str(value).startswith("unix"):
        return "must be host:port"
    return listen_address(value)


MAX_DURATION_SECONDS: Final = 36500 * 86400
"""A hundred years: longer retention is no retention, and keeps times in range."""


def parse_duration(text: str) -> float:
    """Seconds in a retention DURATION (``durations.parse_duration``: ``90s``,
    ``30m``, ``12h``, ``30d``, a bare number of seconds), more than zero, at
    most 36500d.

    Raises:
        ConfigError: the text is not such a duration; the message says why.
    """
    try:
        seconds = durations.parse_duration(text)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if seconds == 0:
        raise ConfigError(f"must be longer than zero, not {text!r}")
    if seconds > MAX_DURATION_SECONDS:
        raise ConfigError(f"must be at most 36500d, not {text!r}")
    return seconds


def _duration_problem(text: str) -> str | None:
    try:
        parse_duration(text)
    except ConfigError as exc:
        # The caller adds ", not 'value'" itself.
        return str(exc).rsplit(", not ", 1)[0]
    return None


def duration(value: Any) -> str | None:
    """A retention DURATION (``parse_duration``)."""
    return _duration_problem(str(value))


def optional_duration(value: Any) -> str | None:
    """Empty (off), or a retention DURATION."""
    return None if value == "" else duration(value)


def _setting(
    default: Any, help: str, check: Check | None = None, *, is_duration: bool = False
) -> Any:
    """A ServerConfig field: its default, its help text and its value check."""
    metadata: dict[str, Any] = {"help": help}
    if check is not None:
        metadata["check"] = check
    if is_duration:
        metadata["duration"] = True
    return field(default=default, metadata=metadata)


def _time_setting(default: float, help: str, check: Check) -> Any:
    """A setting in seconds, given as a duration (``durations.parse_duration``:
    ``4s``, ``250ms``, ``10m``, or a bare number of seconds)."""
    return _setting(default, help, check, is_duration=True)


@dataclass(frozen=True, slots=True)
class ServerConfig:
    listen: str = _setting(
        "127.0.0.1:50051", "address to serve gRPC on (host:port)", listen_address
    )
    database_url: str = field(
        default=DEFAULT_DATABASE_URL,
        repr=False,  # may carry a password: never printed with the settings
        metadata={
            "help": "sqlite:///path/to/file.db or postgresql://user@host/db (keep a password "
            "out of it: use RUNSTORE_DATABASE_URL, --database-url-file or PGPASSFILE)"
        },
    )
    read_database_url: str = field(
        default="",
        repr=False,  # may carry a password, like database_url
        metadata={
            "help": "PostgreSQL URL (a standby) for the reads that may lag behind the primary: "
            "the admin listings (ListSessions, ListRuns); empty: the primary serves them too"
        },
    )
    migrate: bool = _setting(False, "upgrade the schema to head before serving")
    workers: int = _setting(
        1,
        "server processes on the listen port (PostgreSQL only; SO_REUSEPORT, the parent "
        "supervises them)",
        positive,
    )
    event_loop: str = _setting(
        "auto",
        "the event loop: uvloop (measured faster on both backends), asyncio (the standard "
        "one), or auto (uvloop where it is installed, else asyncio)",
        event_loop_choice,
    )
    sqlite_synchronous: str = _setting(
        "FULL",
        "SQLite durability: FULL or EXTRA (every acknowledged commit survives power loss), "
        "NORMAL (a power loss may drop the last commits; never corrupts) or OFF "
        "(benchmarks only: a power loss may corrupt the file)",
        one_of(*SQLITE_SYNCHRONOUS_LEVELS),
    )
    sqlite_readers: int = _setting(
        2, "SQLite reader threads, each with a read-only connection beside the one writer", positive
    )
    pg_pool_min: int = _setting(2, "PostgreSQL pool: connections kept", non_negative)
    pg_pool_max: int = _setting(16, "PostgreSQL pool: connections at most", positive)
    pg_connect_timeout: float = _time_setting(
        2.0, "PostgreSQL: seconds to open a connection (within --db-operation-timeout)", positive
    )
    pg_reconnect_pause_max: float = _time_setting(
        2.0,
        "PostgreSQL: longest pause between connection attempts while the database refuses "
        "them (doubling from 50 ms, half of it random; other calls fail UNAVAILABLE meanwhile)",
        positive,
    )
    pg_acquire_timeout: float = _time_setting(
        3.0,
        "PostgreSQL: seconds to wait for a pooled connection (within --db-operation-timeout)",
        positive,
    )
    pg_statement_timeout: float = _time_setting(
        5.0,
        "PostgreSQL: seconds a statement may run, enforced by the server "
        "(frees the locks of a call runstore already gave up on)",
        positive,
    )
    page_limit: int = _setting(1000, "most records in one ListRunRecords/Session page", positive)
    page_bytes: int = _setting(4 * 1024 * 1024, "payload bytes after which a page is cut", positive)
    context_versions_kept: int = _setting(
        10, "how many versions of each context key stay readable", positive
    )
    max_message_bytes: int = _setting(
        16 * 1024 * 1024, "largest gRPC message accepted or sent", positive
    )
    grace_seconds: float = _time_setting(
        10.0, "on SIGTERM, how long in-flight calls may finish", non_negative
    )
    log_level: str = _setting("INFO", "logging level", one_of(*LOG_LEVELS))

    # --- Watch: live record streams ------------------------------------------
    watch_heartbeat_seconds: float = _time_setting(
        15.0, "an idle Watch stream sends an empty batch this often", positive
    )
    watch_poll_seconds: float = _time_setting(
        2.0,
        "a Watch stream re-reads its cursor at least this often (bounds a lost wake-up)",
        positive,
    )
    max_watchers: int = _setting(
        1000, "Watch streams open at once; beyond, RESOURCE_EXHAUSTED/OVERLOADED", positive
    )

    # --- Operating limits: bytes in flight, timeouts, connections -------------
    max_response_bytes_in_flight: int = _setting(
        64 * 1024 * 1024,
        "bytes of responses produced but not yet delivered to their callers; a response "
        "over 64 KiB that would pass it fails RESOURCE_EXHAUSTED/OVERLOADED",
        positive,
    )
    handshake_timeout: float = _time_setting(
        3.0, "seconds a new connection has to finish the HTTP/2 preface", positive
    )
    max_connection_idle: float = _time_setting(
        300.0, "seconds without a call after which a connection is closed (GOAWAY)", positive
    )
    keepalive_time: float = _time_setting(
        60.0, "seconds between the server's pings, which find dead clients", positive
    )
    keepalive_timeout: float = _time_setting(
        20.0, "seconds a client has to answer a ping before it is disconnected", positive
    )
    keepalive_min_ping_interval: float = _time_setting(
        10.0,
        "shortest interval between a client's pings the server accepts; a client that pings "
        "more often is disconnected (GOAWAY too_many_pings)",
        non_negative,
    )
    db_operation_timeout: float = _time_setting(
        4.0,
        "seconds one call may spend on the database (queueing, connecting, running, "
        "retrying) before it answers UNAVAILABLE",
        positive,
    )
    health_probe_interval: float = _time_setting(
        1.0, "seconds between the health service's database probes", positive
    )
    commit_stall_after: float = _time_setting(
        10.0,
        "health NOT_SERVING while the database answers but the replica's heartbeat (a commit "
        "every 2 s) has not committed for this long (below 4s it sees stalls that are not)",
        positive,
    )

    # --- Retention: background purges (off by default) ------------------------
    retain_ended_sessions: str = _setting(
        "",
        "purge (tombstone kept) sessions ended longer ago than DURATION (90s, 30m, 12h, 30d) "
        "whose runs have all stopped running; off when empty",
        optional_duration,
    )
    retain_sessionless_runs: str = _setting(
        "",
        "delete finished sessionless runs (with their one-shot children and records) that "
        "finished longer ago than DURATION, leaving run tombstones; off when empty",
        optional_duration,
    )
    retain_contexts: str = _setting(
        "",
        "delete context keys no SaveContext or AppendTranscript wrote for DURATION; off when empty",
        optional_duration,
    )
    retention_interval: str = _setting(
        "10m",
        "how often the retention task wakes (a DURATION): it purges when any --retain-* is "
        "set or a namespace has a retention override, and expires stale seed attempts "
        "(--seed-attempt-ttl) on every wake",
        duration,
    )
    seed_attempt_ttl: str = _setting(
        "7d",
        "delete seed attempts begun and never published, and abandoned preparations, "
        "after DURATION; checked every --retention-interval",
        duration,
    )
    quota_recount_seconds: float = _time_setting(
        30.0,
        "how often the stored bytes of namespaces with a stored_bytes quota are recounted "
        "(by one replica at a time)",
        positive,
    )

    # --- Security: TLS, authentication ---------------------------------------
    tls_cert: str = _setting("", "PEM certificate chain to serve TLS with (re-read on SIGHUP)")
    tls_key: str = _setting("", "PEM private key of --tls-cert (re-read on SIGHUP)")
    tls_client_ca: str = _setting(
        "", "PEM CA that must have signed every client's certificate (mTLS)"
    )
    auth_file: str = _setting("", "TOML file of principals and roles; turns authentication on")
    insecure: bool = _setting(False, "serve a non-loopback address without TLS or an auth file")
    database_url_file: str = _setting(
        "", "file holding the database URL (keeps its password out of argv)"
    )

    pid_file: str = _setting(
        "",
        "file holding the server's pid while it serves, for runstore auth reload (under "
        "--workers: the parent's, which passes SIGHUP on); empty: runstore-PORT.pid in the "
        "temporary directory ($TMPDIR, else /tmp), PORT that of --listen",
    )

    # --- Operations: metrics, logs --------------------------------------------
    metrics_listen: str = _setting(
        "",
        "serve Prometheus metrics at http://HOST:PORT/metrics (off when empty)",
        optional_listen_address,
    )
    console_listen: str = _setting(
        "",
        "serve the read-only web console at http(s)://HOST:PORT/ (off when empty); it uses "
        "the server's TLS files and principals (reader, host or admin)",
        optional_listen_address,
    )
    log_format: str = _setting(
        "text",
        "text, or json: one JSON object per line for everything on stderr",
        one_of(*LOG_FORMATS),
    )
    access_log: bool | None = _setting(
        None, "one log line per call (--no-access-log turns it off); on by default with json"
    )

    def retention_seconds(self, name: str) -> float | None:
        """A ``retain_*`` setting in seconds; None when it is off."""
        text: str = getattr(self, name)
        return parse_duration(text) if text else None

    @property
    def retention_on(self) -> bool:
        return any((self.retain_ended_sessions, self.retain_sessionless_runs, self.retain_contexts))

    @property
    def access_log_on(self) -> bool:
        """Whether calls are logged: as asked, otherwise exactly with JSON logs."""
        if self.access_log is None:
            return self.log_format.upper() == "JSON"
        return self.access_log

    def __post_init__(self) -> None:
        for spec in fields(self):
            complaint = complaint_about(spec, getattr(self, spec.name))
            if complaint is not None:
                raise ConfigError(f"{flag_name(spec.name)} {complaint}")


_TYPES: Final[Mapping[str, Any]] = get_type_hints(ServerConfig)
"""Each setting's type, its annotation evaluated (this module's annotations are text)."""


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def _env_name(name: str) -> str:
    return f"RUNSTORE_{name.upper()}"


OPTIONAL_BOOL: Final[Any] = bool | None
"""A switch left unset (None) unless given: ``--access-log``/``--no-access-log``."""

_ACCEPTED: Final[Mapping[Any, tuple[type, ...]]] = {
    bool: (bool,),
    OPTIONAL_BOOL: (bool,),
    int: (int,),
    float: (int, float),
    str: (str,),
}
"""The Python values each type of setting takes (a float setting takes an int)."""

_KIND_NAMES: Final[Mapping[Any, str]] = {
    bool: "true or false",
    OPTIONAL_BOOL: "true or false",
    int: "an integer",
    float: "a number",
    str: "text",
}


def setting_type(spec: dataclasses.Field[Any]) -> Any:
    """The setting's type, resolved from its annotation (``bool``, ``int``,
    ``float``, ``str`` or ``OPTIONAL_BOOL``), however the annotation is spelled."""
    return _TYPES[spec.name]


def complaint_about(spec: dataclasses.Field[Any], value: Any) -> str | None:
    """What is wrong with ``value`` for the setting ``spec``, or None: its type
    first (a float setting takes an int), then the field's own check."""
    kind = setting_type(spec)
    if kind == OPTIONAL_BOOL and value is None:
        return None
    wanted = _ACCEPTED.get(kind)
    if wanted is not None and (
        not isinstance(value, wanted) or (bool not in wanted and isinstance(value, bool))
    ):
        return f"must be {_KIND_NAMES[kind]}, not {value!r}"
    if kind is float and not math.isfinite(value):
        return f"must be a finite number, not {value!r}"
    check: Check | None = spec.metadata.get("check")
    complaint = check(value) if check is not None else None
    return None if complaint is None else f"{complaint}, not {value!r}"


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("1", "true", "yes", "on"):
        return True
    if lowered in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def _convert(spec: dataclasses.Field[Any], text: str) -> Any:
    """``text`` (a flag's or a variable's) as the setting's type; ``ValueError``
    says why not (a duration's message is the whole complaint)."""
    kind = setting_type(spec)
    if spec.metadata.get("duration"):
        return durations.parse_duration(text)
    if kind is bool or kind == OPTIONAL_BOOL:
        return _parse_bool(text)
    if kind is int:
        return int(text)
    if kind is float:
        return float(text)
    return text


_NEGATIVE_VALUE: Final = re.compile(r"^-[0-9.]+[a-z]*$")


def add_arguments(parser: argparse.ArgumentParser, names: Sequence[str] | None = None) -> None:
    """Adds a flag for each (or each named) setting; unset flags stay None."""
    for spec in fields(ServerConfig):
        if names is not None and spec.name not in names:
            continue
        flag = flag_name(spec.name)
        default: Any = spec.default
        if spec.metadata.get("duration"):
            default = durations.format_duration(float(default))
        help_text = (
            f"{spec.metadata.get('help', '')} [env {_env_name(spec.name)}, default {default!r}]"
        )
        kind = setting_type(spec)
        if kind is bool:
            parser.add_argument(
                flag, action="store_const", const=True, default=None, help=help_text
            )
        elif kind == OPTIONAL_BOOL:
            parser.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=None, help=help_text
            )
        elif spec.metadata.get("duration") or spec.metadata.get("check") in (
            duration,
            optional_duration,
        ):
            parser.add_argument(flag, default=None, metavar="DURATION", help=help_text)
        else:
            parser.add_argument(flag, default=None, help=help_text)
    # "--retain-contexts -5m" is a negative value to refuse with the flag's own
    # message, not a flag "-5m" and argparse's usage: values that look like
    # negative durations are values, as "-5" already is.
    parser._negative_number_matcher = _NEGATIVE_VALUE


def load(
    args: argparse.Namespace | None = None, env: Mapping[str, str] | None = None
) -> ServerConfig:
    """The configuration from flags (``args``) over environment over defaults.

    Raises:
        ConfigError: a value is not of the setting's type or fails its check;
            the message names the flag, or the variable and the flag.
    """
    env = os.environ if env is None else env
    values: dict[str, Any] = {}
    for spec in fields(ServerConfig):
        flag_value = getattr(args, spec.name, None) if args is not None else None
        if flag_value is not None:
            text, source = flag_value, flag_name(spec.name)
        else:
            text = env.get(_env_name(spec.name))
            source = f"{_env_name(spec.name)} ({flag_name(spec.name)})"
        if text is None:
            continue
        try:
            value = text if not isinstance(text, str) else _convert(spec, text)
        except ValueError as exc:
            if spec.metadata.get("duration"):
                raise ConfigError(f"{source} {exc}") from None
            raise ConfigError(
                f"{source} must be {_KIND_NAMES.get(setting_type(spec), 'valid')}, not {text!r}"
            ) from None
        complaint = complaint_about(spec, value)
        if complaint is not None:
            raise ConfigError(f"{source} {complaint}")
        values[spec.name] = value
    return dataclasses.replace(ServerConfig(), **values)


DEFAULTS: Final = ServerConfig()
"""Every default in one value; the core and the backends take theirs from here."""
