"""Where a command's results go: human tables (``rich``), or one JSON object per
line with ``--json``; and the rows of sessions, runs and records in those tables."""

from __future__ import annotations

import base64
import dataclasses
import enum
import json
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, TextIO

from rich import box
from rich.console import Console
from rich.table import Table

from runstore.cli.jsonlines import record_object, rfc3339_millis
from runstore.client import RunRecord
from runstore.contract.durations import format_duration

PREVIEW_CHARS: Final = 60


def iso(moment: datetime | None) -> str | None:
    """The one way the CLI writes a time, in tables, ``show`` and JSON alike:
    RFC 3339 in UTC with milliseconds (``2026-12-01T10:00:00.123Z``), as
    ``runstore export`` does."""
    return None if moment is None else rfc3339_millis(moment)


def short_time(moment: datetime | None) -> str:
    """``iso`` for a table cell: ``-`` for no time."""
    return "-" if moment is None else rfc3339_millis(moment)


def jsonable(value: Any) -> Any:
    """A client model value as JSON: times RFC 3339 UTC, bytes base64, enums by
    value, and a record as ``runstore export`` writes it (``payload`` as JSON
    when it is JSON, else ``payload_base64``)."""
    if isinstance(value, RunRecord):
        return record_object(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    return value


def preview(payload: bytes, width: int = PREVIEW_CHARS) -> str:
    """The start of a payload on one line: text as it is, other bytes in hex."""
    try:
        text = payload.decode()
    except UnicodeDecodeError:
        shown = payload[: width // 2].hex()
        return f"0x{shown}…" if len(payload) > width // 2 else f"0x{shown}"
    flat = "".join(char if char.isprintable() else " " for char in text)
    return flat if len(flat) <= width else flat[: width - 1] + "…"


class _Console(Console):
    """rich's console, but a closed stdout raises ``BrokenPipeError`` (which the
    program turns into a quiet exit) instead of rich's own ``SystemExit(1)``."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


class Output:
    """Where a command's results go: rich tables, or JSON lines with ``--json``."""

    def __init__(self, as_json: bool, out: TextIO) -> None:
        self.as_json = as_json
        self._out = out
        # Not a terminal: never wrap or cut IDs to 80 columns.
        width = None if out.isatty() else 250
        self.console: Console = _Console(file=out, width=width, highlight=False, soft_wrap=False)

    def json(self, value: Any) -> None:
        self._out.write(json.dumps(jsonable(value), ensure_ascii=False) + "\n")

    def flush(self) -> None:
        self._out.flush()

    def lines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self._out.write(line + "\n")
        self._out.flush()

    def table(
        self, title: str | None, headers: Sequence[str], rows: Iterable[Sequence[Any]]
    ) -> None:
        table = Table(
            title=title, box=box.SIMPLE_HEAD, title_justify="left", pad_edge=False, show_edge=False
        )
        for header in headers:
            table.add_column(header, overflow="fold")
        for row in rows:
            table.add_row(*("-" if cell in (None, "") else str(cell) for cell in row))
        self.console.print(table)

    def fields(self, pairs: Sequence[tuple[str, Any]]) -> None:
        table = Table.grid(padding=(0, 2))
        table.add_column(style="bold")
        table.add_column(overflow="fold")
        for name, value in pairs:
            table.add_row(name, "-" if value in (None, "") else str(value))
        self.console.print(table)


class StreamedTable:
    """A table printed a row at a time (``records tail --follow``): columns as
    wide as the header and the rows known when it starts, widened when a later
    row needs it; empty cells are ``-`` as in ``Output.table``."""

    GAP: Final = "  "

    def __init__(self, output: Output, headers: Sequence[str], rows: Iterable[Sequence[Any]]):
        self._output = output
        self.headers = list(headers)
        self.widths = [len(header) for header in self.headers]
        self._pending = [self._cells(row) for row in rows]
        for cells in self._pending:
            self._widen(cells)

    @staticmethod
    def _cells(row: Sequence[Any]) -> list[str]:
        return ["-" if cell in (None, "") else str(cell) for cell in row]

    def _widen(self, cells: Sequence[str]) -> None:
        self.widths = [
            max(width, len(cell)) for width, cell in zip(self.widths, cells, strict=True)
        ]

    def _line(self, cells: Sequence[str]) -> str:
        padded = [cell.ljust(width) for cell, width in zip(cells[:-1], self.widths, strict=False)]
        return self.GAP.join([*padded, cells[-1]]).rstrip()

    def start(self) -> None:
        """The header, a rule, and the rows given at the start."""
        rule = self.GAP.join("─" * width for width in self.widths)
        self._output.lines([self._line(self.headers), rule])
        self._output.lines(self._line(cells) for cells in self._pending)
        self._pending = []

    def row(self, row: Sequence[Any]) -> None:
        cells = self._cells(row)
        self._widen(cells)
        self._output.lines([self._line(cells)])


SESSION_HEADERS: Final = ("SESSION", "STATUS", "CREATED", "ENDED")
RUN_HEADERS: Final = (
    "RUN",
    "AGENT",
    "SESSION",
    "STATUS",
    "STARTED",
    "PARENT",
    "ENDED",
    "DURATION",
    "FAILURE",
)
RECORD_HEADERS: Final = ("ID", "TYPE", "TIMESTAMP", "RUN", "TURN", "EVENT KEY", "BYTES", "PAYLOAD")


def session_row(session: Any) -> list[Any]:
    return [
        session.id,
        session.status.value,
        short_time(session.created_at),
        short_time(session.ended_at),
    ]


def run_row(run: Any) -> list[Any]:
    return [
        run.run_id,
        run.agent_id,
        run.session_id,
        run.status.value,
        short_time(run.started_at),
        run.parent_run_id,
        short_time(run.ended_at),
        run_duration(run),
        failure_text(run.failure),
    ]


def run_duration(run: Any) -> str:
    """From start to the ending record, as a duration (empty until it ends)."""
    if run.ended_at is None:
        return ""
    return format_duration(max((run.ended_at - run.started_at).total_seconds(), 0.0))


def failure_text(failure: Any) -> str:
    """``kind/code: message`` (retryable marked) of a failed run; empty otherwise."""
    if failure is None:
        return ""
    kind = f"{failure.kind}/{failure.code}" if failure.code else failure.kind
    retry = " (retryable)" if failure.retryable else ""
    return f"{kind}: {failure.message}{retry}"


def status_counts_line(counts: Any) -> str:
    """``running 2, failed 10000+`` (``+``: the count stopped at the server's cap)."""
    return ", ".join(
        f"{count.status} {count.count}{'+' if count.estimated else ''}" for count in counts
    )


def record_row(record: RunRecord) -> list[Any]:
    return [
        record.id,
        record.type,
        short_time(record.timestamp),
        record.run_id,
        record.turn_id,
        record.event_key,
        len(record.payload),
        preview(record.payload),
    ]
