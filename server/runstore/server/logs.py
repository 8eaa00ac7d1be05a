"""The process's logs: text or one JSON object per line, each with the call's request id.

``configure`` installs one handler on the root logger, so runstore's loggers,
Alembic's, grpc's Python loggers and captured ``warnings`` all come out the
same way. With ``json`` every line on stderr is one object with ``timestamp``,
``level``, ``logger`` and ``message`` (plus ``request_id`` for a line a call
caused, ``exception`` for a traceback, and the access-log fields): whatever
else writes to file descriptor 2 (grpc's C core, a ``print`` to stderr, the
interpreter's last words) is read back from a pipe and wrapped the same way,
under the logger ``grpc.core`` for grpc's C core (its Abseil prefix names
the level) and ``stderr`` for anything else.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import queue
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, Final, TextIO

from runstore.server import call_request_id

ACCESS_LOGGER: Final = "runstore.access"
"""The logger of the one line per call."""

ACCESS_FIELDS: Final = (
    "method",
    "code",
    "reason",
    "duration_ms",
    "principal",
    "namespace",
    "peer",
    "request_id",
)
"""The fields of an access-log line, in order (JSON keys; ``key=value`` in text)."""

_STDERR_LOGGER: Final = "stderr"
_GRPC_CORE_LOGGER: Final = "grpc.core"
_TEXT_FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class RequestIdFilter(logging.Filter):
    """Stamps each record with the request id of the call that logged it."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not hasattr(record, "request_id"):
            record.request_id = call_request_id.current()
        return True


_second: tuple[int, str] = (-1, "")
"""The last whole second formatted (most lines of a busy second share it)."""


def _timestamp(created: float) -> str:
    """``created`` in UTC to the millisecond, as ``2026-12-01T12:00:00.123Z``."""
    global _second
    fraction, seconds = math.modf(created)
    whole, micro = int(seconds), round(fraction * 1e6)  # as datetime.fromtimestamp rounds
    if micro >= 1_000_000:
        whole, micro = whole + 1, micro - 1_000_000
    cached, text = _second
    if whole != cached:
        text = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole))
        _second = (whole, text)
    return f"{text}.{micro // 1000:03d}Z"


_ENCODER: Final = json.JSONEncoder(ensure_ascii=False, default=str)
"""``json.dumps(entry, ensure_ascii=False, default=str)``, made once."""


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "timestamp": _timestamp(record.created),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        access = getattr(record, "access", None)
        if isinstance(access, dict):
            entry.update(access)
        current = getattr(record, "request_id", "")
        if current:
            entry["request_id"] = current
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.stack_info:
            entry["exception"] = record.stack_info
        return _ENCODER.encode(entry)


class TextFormatter(logging.Formatter):
    """The classic line, then the access fields and the request id as ``key=value``."""

    def __init__(self) -> None:
        super().__init__(_TEXT_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        line = super().format(record)
        access = getattr(record, "access", None)
        if isinstance(access, dict):
            return f"{line} {access_message(access)}"
        current = getattr(record, "request_id", "")
        return f"{line} request_id={current}" if current else line


def access_message(fields: dict[str, Any]) -> str:
    """The access fields as ``key=value`` (the JSON form carries them as keys)."""
    return " ".join(
        f"{name}={'-' if fields.get(name) in (None, '') else fields[name]}"
        for name in ACCESS_FIELDS
        if name not in ("method", "code")
    )


_ABSL_LEVELS: Final = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL"}
"""grpc's C core logs through Abseil: ``E1201 10:00:00.000000 123 file.cc:42] text``."""


def wrapped_line(text: str) -> str:
    """A line something else wrote to stderr, as a JSON log line: at the level
    of an Abseil prefix when it has one, otherwise ERROR (what lands on stderr
    unasked is trouble: a traceback, a native library's complaint)."""
    level, logger = "ERROR", _STDERR_LOGGER
    if len(text) > 5 and text[0] in _ABSL_LEVELS and text[1:5].isdigit():
        level, logger = _ABSL_LEVELS[text[0]], _GRPC_CORE_LOGGER
    entry = {
        "timestamp": _timestamp(time.time()),
        "level": level,
        "logger": logger,
        "message": text,
    }
    return json.dumps(entry, ensure_ascii=False)


class _StderrCapture:
    """File descriptor 2 redirected into a pipe whose lines come out as JSON.

    The log handler writes to the original stderr directly; everything else
    that writes to fd 2 (grpc's C core, native libraries, ``sys.stderr``) goes
    through the pipe and a reader thread that wraps each line.
    """

    def __init__(self) -> None:
        sys.stderr.flush()
        self._original = os.dup(2)
        self.output: TextIO = io.TextIOWrapper(
            os.fdopen(os.dup(self._original), "wb", buffering=0),
            encoding="utf-8",
            errors="replace",
            line_buffering=True,
        )
        self._lock = threading.Lock()
        read_end, write_end = os.pipe()
        os.dup2(write_end, 2)
        os.close(write_end)
        self._reader = threading.Thread(
            target=self._relay, args=(read_end,), name="runstore-stderr-relay", daemon=True
        )
        self._reader.start()

    @property
    def original(self) -> int:
        return self._original

    def write_line(self, line: str) -> None:
        self.write(line + "\n")

    def write(self, text: str) -> None:
        """Whole lines, each ending in a newline, in one write."""
        with self._lock:
            self.output.write(text)

    def _relay(self, read_end: int) -> None:
        with os.fdopen(read_end, "rb") as pipe:
            for raw in pipe:
                text = raw.decode("utf-8", "replace").rstrip("\r\n")
                if text.strip():
                    self.write_line(wrapped_line(text))

    def close(self) -> None:
        """Puts fd 2 back; the relay ends once every writer of the pipe is gone."""
        sys.stderr.flush()
        os.dup2(self._original, 2)
        os.close(self._original)
        self._reader.join(timeout=2)


LINGER: Final = 0.02
"""Seconds the log writer waits after a batch's first line for the others
(what a line may be late by on stderr; a flush or close never waits it)."""


class BufferedSink(logging.Handler):
    """Log records formatted and written by a thread of their own, so a call's
    access line costs the event loop one queue put instead of JSON encoding
    and a blocking ``write``.

    One queue and one writer keep the lines in the order they were logged;
    what is queued together goes out in one write. The filters (the request
    id, read from the logging thread's context) run where the record is made;
    ``flush`` waits for every queued line, ``close`` (``logging.shutdown``, at
    exit) writes them all and stops the thread.

    The writer lingers ``linger`` seconds after the first line of a batch
    before taking the rest: woken for every line, it would take the
    interpreter lock from the event loop once per call (docs/benchmarks.md,
    "Protections' cost"). ``flush`` and ``close`` cut the linger short.
    """

    _BATCH: Final = 4096
    """Lines at most per batch (written in pipe-atomic chunks)."""

    def __init__(self, write: Any, formatter: logging.Formatter, *, linger: float = LINGER) -> None:
        super().__init__()
        self._linger = linger
        self.setFormatter(formatter)
        self._write = write
        self._queue: queue.SimpleQueue[logging.LogRecord | threading.Event | None] = (
            queue.SimpleQueue()
        )
        self._hurry = threading.Event()
        self._thread = threading.Thread(target=self._drain, name="runstore-log-writer", daemon=True)
        self._thread.start()

    def emit(self, record: logging.LogRecord) -> None:
        self._queue.put(record)

    def handle(self, record: logging.LogRecord) -> bool:
        # Handler.handle takes the handler's lock around emit: a queue needs none.
        if not self.filter(record):
            return False
        self.emit(record)
        return True

    def flush(self) -> None:
        """Returns once every line queued before the call is written."""
        if self._thread.is_alive():
            written = threading.Event()
            self._queue.put(written)
            self._hurry.set()
            written.wait()

    def close(self) -> None:
        if self._thread.is_alive():
            self._queue.put(None)
            self._hurry.set()
            self._thread.join()
        super().close()

    def _drain(self) -> None:
        while True:
            item = self._queue.get()
            if self._hurry.wait(self._linger):
                self._hurry.clear()
            lines: list[str] = []
            done: list[threading.Event] = []
            stop = False
            while True:
                if item is None:
                    stop = True
                    break
                if isinstance(item, threading.Event):
                    done.append(item)
                else:
                    line = self._format(item)
                    if line is not None:
                        lines.append(line)
                if len(lines) >= self._BATCH:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            for chunk in _chunks(lines):
                try:
                    self._write(chunk)
                except Exception:
                    self.handleError(logging.makeLogRecord({"msg": "log write failed"}))
            for event in done:
                event.set()
            if stop:
                return

    def _format(self, record: logging.LogRecord) -> str | None:
        try:
            return self.format(record)
        except Exception:
            self.handleError(record)
            return None


_ATOMIC_BYTES: Final = 4096
"""A pipe takes a write of up to PIPE_BUF (4096 bytes on Linux) whole: the
workers of ``serve --workers N`` share one stderr, and their lines must not
interleave mid-line."""


def _chunks(lines: list[str]) -> Iterator[str]:
    """Whole lines, newline-terminated, in writes of at most ``_ATOMIC_BYTES``
    (a longer line goes alone)."""
    chunk: list[str] = []
    size = 0
    for line in lines:
        length = (len(line) if line.isascii() else len(line.encode())) + 1
        if chunk and size + length > _ATOMIC_BYTES:
            yield "\n".join(chunk) + "\n"
            chunk, size = [], 0
        chunk.append(line)
        size += length
    if chunk:
        yield "\n".join(chunk) + "\n"


def _stderr_write(text: str) -> None:
    sys.stderr.write(text)
    sys.stderr.flush()


_capture: _StderrCapture | None = None


def configure(log_format: str = "text", level: str = "INFO") -> None:
    """Sends every log record (and, for JSON, every stderr line) out in ``log_format``."""
    global _capture
    json_lines = log_format.upper() == "JSON"
    if json_lines and _capture is None:
        _capture = _StderrCapture()
    write = _capture.write if json_lines and _capture else _stderr_write
    handler = BufferedSink(write, JsonFormatter() if json_lines else TextFormatter())
    handler.addFilter(RequestIdFilter())
    root = logging.getLogger()
    for existing in list(root.handlers):
        root.removeHandler(existing)
        if isinstance(existing, BufferedSink):
            existing.close()
    root.addHandler(handler)
    root.setLevel(level.upper())
    # Alembic says "Context impl SQLiteImpl" and each revision it applies at
    # INFO, on every start; runstore says in one line of its own that the
    # schema was migrated. At DEBUG everything shows.
    logging.getLogger("alembic").setLevel(
        logging.DEBUG if level.upper() == "DEBUG" else logging.WARNING
    )
    # Neither format shows the thread or the process: not looking them up makes
    # every record (one per call with the access log) cheaper to build.
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging.captureWarnings(True)
    if json_lines:
        sys.excepthook = _log_uncaught


def original_stderr() -> int | None:
    """The stderr this process was started with, while JSON logs capture fd 2
    (None otherwise): what a child process writing its own JSON lines gets,
    so they are not wrapped a second time."""
    return _capture.original if _capture is not None else None


def _log_uncaught(kind: type[BaseException], value: BaseException, tb: Any) -> None:
    logging.getLogger("runstore").critical("uncaught exception", exc_info=(kind, value, tb))


def shutdown() -> None:
    """Flushes the handlers and gives fd 2 back (the end of ``runstore``)."""
    global _capture
    logging.shutdown()
    if _capture is not None:
        _capture.close()
        _capture = None


@contextlib.contextmanager
def configured(log_format: str, level: str) -> Iterator[None]:
    configure(log_format, level)
    try:
        yield
    finally:
        shutdown()
