"""CPU per call, and what it projects for many replicas and a bigger database.

During each timed window the driver reads the CPU time of every thread of
the server process and, on PostgreSQL, of every backend connected
to the benchmark's database (``pg_stat_activity``; PostgreSQL's shared
background processes, the WAL writer and the checkpointer, are not counted).
On SQLite the database runs inside the server process, so its CPU is in the
server's figure. Divided by the calls made, that is CPU-ms per call.

The projection is on paper: appends per second for N server replicas over
one PostgreSQL of M cores is bounded by the smaller of

* the servers: N × (one core) / server CPU per append. A replica is one
  Python process whose event loop holds the GIL, so it uses about one core
  whatever the machine has (grpc's C threads add a little beyond it);
* the database: M cores / database CPU per append;

at full use of those cores. Neither bound counts commit latency: every append
is one commit that waits for its WAL flush (``synchronous_commit = on``), and
PostgreSQL flushes concurrent commits together (group commit), so the flush
rate of the disk bounds appends only when too few are in flight to fill a
flush; with enough in flight the CPU bounds above are the ones that bind.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

REPLICAS = (1, 2, 4, 8, 16)
DATABASE_CORES = (2, 4, 8, 16, 32)


def parse_stat(text: str) -> float:
    """Seconds of CPU (utime + stime) in a ``/proc/<pid>/stat`` line. The
    command name (field 2) is in parentheses and may hold spaces or ``)``,
    so fields are counted from the last ``)``."""
    fields = text[text.rindex(")") + 2 :].split()
    # After the name: state is field 3, utime field 14 and stime field 15.
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / TICKS_PER_SECOND


def process_cpu(pid: int) -> float | None:
    """A process's CPU seconds so far, every thread's (exited ones too), in
    clock ticks; None when it is gone or unreadable."""
    try:
        return parse_stat(Path(f"/proc/{pid}/stat").read_text())
    except (OSError, ValueError, IndexError):
        return None


def parse_schedstat(text: str) -> float:
    """Seconds on CPU in a ``/proc/<pid>/schedstat`` line (its first field, ns)."""
    return int(text.split()[0]) / 1e9


def _cpu_of(directory: Path) -> float | None:
    """CPU seconds of the task whose ``/proc`` directory is ``directory``: from
    schedstat (ns) when the kernel keeps it, otherwise from stat (clock ticks)."""
    try:
        return parse_schedstat((directory / "schedstat").read_text())
    except (OSError, ValueError, IndexError):
        pass
    try:
        return parse_stat((directory / "stat").read_text())
    except (OSError, ValueError, IndexError):
        return None


def backend_cpu(pid: int) -> float | None:
    """A single-threaded process's CPU seconds, to the nanosecond where the
    kernel keeps schedstat: sixteen PostgreSQL backends each spend a few ms in
    a short window, which whole clock ticks per process would round away."""
    return _cpu_of(Path(f"/proc/{pid}"))


def threads_cpu(pid: int) -> dict[int, float] | None:
    """CPU seconds of each thread of a process (``/proc/<pid>/task``), as
    precise as ``backend_cpu``; None when the process is gone. A window's CPU
    is ``cpu_delta`` of two readings: a thread that ended inside the window
    loses its share (the server's threads live as long as it does)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return None
    readings = {int(task.name): _cpu_of(task) for task in tasks if task.name.isdigit()}
    return {tid: seconds for tid, seconds in readings.items() if seconds is not None}


def processes_cpu(pids: Iterable[int]) -> dict[int, float]:
    """CPU seconds of each readable single-threaded process of ``pids``."""
    readings = {pid: backend_cpu(pid) for pid in pids}
    return {pid: seconds for pid, seconds in readings.items() if seconds is not None}


def cpu_delta(before: Mapping[int, float], after: Mapping[int, float]) -> float:
    """CPU seconds spent between two readings of a set of processes: a process
    that appeared in between counts whole (it started within the window); one
    that disappeared is lost (a pooled connection rarely closes under load)."""
    return sum(seconds - before.get(pid, 0.0) for pid, seconds in after.items())


def per_op_ms(seconds: float | None, ops: int) -> float | None:
    """CPU-ms per operation, or None when not measured."""
    if seconds is None or ops <= 0:
        return None
    return 1000 * seconds / ops


def project(
    server_cpu_ms: float,
    database_cpu_ms: float | None,
    replicas: int,
    database_cores: int | None,
    *,
    cores_per_replica: float = 1.0,
) -> dict[str, Any]:
    """Appends per second for ``replicas`` servers over a database of
    ``database_cores`` cores, from measured CPU-ms per append, and which side
    bounds it. ``database_cpu_ms`` None: the database is inside the server
    (SQLite), so only the server bound applies."""
    if server_cpu_ms <= 0:
        raise ValueError("server CPU per call must be positive")
    server_bound = replicas * cores_per_replica * 1000 / server_cpu_ms
    if database_cpu_ms is None or database_cores is None:
        return {"appends_per_s": server_bound, "bound": "server", "server_bound": server_bound}
    if database_cpu_ms <= 0:
        raise ValueError("database CPU per call must be positive")
    database_bound = database_cores * 1000 / database_cpu_ms
    return {
        "appends_per_s": min(server_bound, database_bound),
        "bound": "server" if server_bound <= database_bound else "database",
        "server_bound": server_bound,
        "database_bound": database_bound,
    }


def projection_table(
    results: list[dict[str, Any]],
    *,
    workload: str = "append",
    in_flight: int = 16,
    replicas: Iterable[int] = REPLICAS,
    database_cores: Iterable[int] = DATABASE_CORES,
) -> list[dict[str, Any]]:
    """The projection for every measured backend's ``workload`` row at
    ``in_flight`` that has CPU figures: PostgreSQL for each (N, M), SQLite
    for one replica (one process owns the file)."""
    rows = []
    for row in results:
        if row.get("workload") != workload or row.get("in_flight") != in_flight:
            continue
        server_ms = row.get("server_cpu_ms_per_op")
        if not server_ms:
            continue
        database_ms = row.get("db_cpu_ms_per_op")
        base = {
            "backend": row["backend"],
            "server_cpu_ms": round(server_ms, 3),
            "db_cpu_ms": None if database_ms is None else round(database_ms, 3),
        }
        if row["backend"] != "postgres" or not database_ms:
            result = project(server_ms, None, 1, None)
            rows.append(
                {**base, "replicas": 1, "db_cores": None, **_rounded(result)}
                | {"bound": "server (the database is in the server process)"}
            )
            continue
        for count in replicas:
            for cores in database_cores:
                result = project(server_ms, database_ms, count, cores)
                rows.append({**base, "replicas": count, "db_cores": cores, **_rounded(result)})
    return rows


def _rounded(result: dict[str, Any]) -> dict[str, Any]:
    return {k: round(v) if isinstance(v, float) else v for k, v in result.items()}


def render_projection(rows: list[dict[str, Any]]) -> str:
    """One line per SQLite figure; for PostgreSQL a grid of replicas × database
    cores, each cell the projected appends/s and its bound (S: the servers,
    D: the database)."""
    lines = [
        "Scaling projection on paper from CPU per append at 16 in flight (appends/s at full "
        "use of the cores, one core per replica; S: bound by the servers, D: by the "
        "database; bench/cpu.py says what it leaves out):",
    ]
    for backend in dict.fromkeys(row["backend"] for row in rows):
        mine = [row for row in rows if row["backend"] == backend]
        first = mine[0]
        if first["db_cores"] is None:
            lines += [
                "",
                f"{backend}: server CPU {first['server_cpu_ms']:.3f} ms/append (the database "
                f"runs inside the server process): one replica, {first['appends_per_s']:,} "
                "appends/s.",
            ]
            continue
        cores = sorted({row["db_cores"] for row in mine})
        lines += [
            "",
            f"{backend}: server CPU {first['server_cpu_ms']:.3f} ms/append, database CPU "
            f"{first['db_cpu_ms']:.3f} ms/append:",
            "",
            "| replicas | " + " | ".join(f"{c} database cores" for c in cores) + " |",
            "|---:|" + "---:|" * len(cores),
        ]
        for count in sorted({row["replicas"] for row in mine}):
            cells = {
                row["db_cores"]: f"{row['appends_per_s']:,} {row['bound'][0].upper()}"
                for row in mine
                if row["replicas"] == count
            }
            lines.append(f"| {count} | " + " | ".join(cells[c] for c in cores) + " |")
    return "\n".join(lines)
