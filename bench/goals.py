"""The performance goals, judged from one run's report.

Pure functions over the report ``bench.harness`` writes: every goal with its
measured figure, its target and whether it is met. A goal whose figures the
run did not measure says how to measure it instead of guessing. Figures are
taken at 16 calls in flight.

What each goal reads (rows of ``results[]`` at 16 in flight):

Coalesced appends first (``coalescing``; docs/limits.md, "Coalesced appends"):
``append_client`` is the typed Python client's ``append_run_record`` from 16
tasks of one process, which its coalescer carries in AppendRunRecordCalls.

- ``append_client``'s ``ratio_to_ceiling`` ≥ 2.0 on SQLite (``FULL``) and
  ≥ 1.6 on PostgreSQL;
- SQLite ``append_client`` ≥ 1.5 × the peer's 1-item ``add_items`` and
  PostgreSQL ``append_client`` ≥ 3 × LangGraph's step, records per second
  (``--peers``);
- PostgreSQL ``append_client``: ``db_cpu_ms_per_op`` ≤ 0.15 ms and
  ``commits_per_op`` ≤ 0.3;
- a lone append's p99 with coalescing on ÷ off ≤ 1.05 (the ``lone_append``
  section, ``bench/lone.py``);
- reported, not judged: ``append_client``'s server CPU per append, and the Go
  client's ``append_client_go`` beside it.

``start_terminal``, ``turn`` and the protections' cost are goals 5 and 6 below.
Then the goals before coalescing:

1. PostgreSQL ``append``: ``db_cpu_ms_per_op`` ≤ 0.15 ms and
   ``commits_per_op`` (``pg_stat_database.xact_commit`` delta ÷ appends) ≤ 0.3.
2. ``append``'s ``ratio_to_ceiling`` per backend (SQLite only when the run
   used ``synchronous=FULL``).
3. SQLite ``append`` against the peer's 1-item ``add_items`` and
   ``append_batch`` (4 records a call) against the peer's 4-item call, records
   per second of each (``--peers``).
4. PostgreSQL ``append`` against LangGraph's ``AsyncPostgresSaver`` step, per
   second (``--peers``).
5. ``start_terminal`` and ``turn`` against the same run's append ratio: a
   lifecycle RPC may cost 1.25 × an append, so ``start_terminal`` (2 RPCs ≈
   2.5 appends) ≥ append ÷ 2.5 and ``turn`` (10 appends + 2 lifecycle RPCs ≈
   12.5 appends) ≥ append ÷ 12.5.
6. The ``protections_cost`` section (``--protections both``: ``cost``,
   ``pairs``): at most 7 % over at least 10 pairs.
7. ``append_shared_session`` (4 runs per session appending at once) ≥ 0.8 ×
   ``append``, both as ratios to their ceilings.

Then the earlier goals, still reported: the last page of a listing does not
grow with the history (``list_run`` / ``list_session`` rows, cost ∝ 1 /
``ratio_to_ceiling``, at most 1.5 × from 10k to 1M), 100 idle watchers cost
appends at most 10 % (``append (100 idle watchers)``'s ``vs_no_watchers``),
and the scaling projection (``bench/cpu.py``), reported, not judged.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from bench.lone import GOAL as LONE_APPEND_MAX
from bench.protections import PAIRED_WORKLOAD

IN_FLIGHT = 16

DATABASE_CPU_MAX_MS = 0.15
COMMITS_MAX = 0.3
APPEND_TARGETS = {"sqlite": 0.75, "postgres": 0.65}
PROTECTIONS_MAX_COST = 0.07
PROTECTIONS_PAIRS = 10
LIFECYCLE_DIVISORS = {"start_terminal": 2.5, "turn": 12.5}
PEER = "peer:openai-agents-sqlitesession"
PEER_BATCH = "peer:openai-agents-sqlitesession (4 items)"
POSTGRES_PEER = "peer:langgraph-asyncpostgressaver"
POSTGRES_PEER_FACTOR = 2.0
SHARED_SESSION = "append_shared_session"
SHARED_SESSION_FACTOR = 0.8
PAGE_MAX_GROWTH = 1.5
PAGE_HISTORY = (10_000, 1_000_000)
WATCHERS_MAX_COST = 0.10
IDLE_WATCHERS = "append (100 idle watchers)"
NO_WATCH_ROWS = "not measured (workload idle_watchers, bench/watch.py)"

RUN_WITH_PEERS = "not measured (run with --peers)"

COALESCED = "append_client"
COALESCED_GO = "append_client_go"
COALESCED_TARGETS = {"sqlite": 2.0, "postgres": 1.6}
COALESCED_PEER_FACTOR = 1.5
COALESCED_POSTGRES_PEER_FACTOR = 3.0
COALESCING = "coalescing"
"""The label of the coalesced appends' goals in the table."""


def goal(
    number: str,
    what: str,
    measured: float | None,
    target: float | None,
    *,
    at_most: bool = False,
    backend: str = "",
    note: str = "",
    met: bool | None = None,
) -> dict[str, Any]:
    """One goal's row: ``met`` is None when ``measured`` is None (not measured);
    otherwise measured ≥ target (or ≤ with ``at_most``) unless given."""
    if met is None and measured is not None and target is not None:
        met = measured <= target if at_most else measured >= target
    return {
        "goal": number,
        "what": what,
        "backend": backend,
        "measured": None if measured is None else round(measured, 3),
        "target": None if target is None else round(target, 3),
        "comparison": "≤" if at_most else "≥",
        "met": met,
        "note": note,
    }


def reported(
    label: str,
    what: str,
    measured: float | None,
    *,
    present: bool,
    backend: str = "",
    note: str = "",
) -> dict[str, Any]:
    """A row reported beside the goals, not judged: ``present`` says whether
    the run measured it (``status``: reported, or not measured)."""
    return {
        **goal(label, what, measured, None, backend=backend, note=note),
        "met": None,
        "reported": present,
    }


def _row(
    results: Iterable[dict[str, Any]], backend: str | None, workload: str, in_flight: int
) -> dict[str, Any] | None:
    for row in results:
        if (
            row.get("workload") == workload
            and row.get("in_flight") == in_flight
            and (backend is None or row.get("backend") == backend)
        ):
            return row
    return None


def _backends(results: list[dict[str, Any]]) -> list[str]:
    seen: list[str] = []
    for row in results:
        backend = row.get("backend", "")
        if backend in APPEND_TARGETS and backend not in seen:
            seen.append(backend)
    return seen


def database_goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Goal 1: what one PostgreSQL append costs the database."""
    return _database_cost("1", report, "append")


def _database_cost(label: str, report: dict[str, Any], workload: str) -> list[dict[str, Any]]:
    """The database CPU and the commits per append of ``workload`` on PostgreSQL."""
    row = _row(report.get("results", []), "postgres", workload, IN_FLIGHT)
    noun = "append" if workload == "append" else f"{workload} append"
    rows = []
    for what, field, target in (
        (
            f"database CPU per {noun} ≤ {DATABASE_CPU_MAX_MS} ms",
            "db_cpu_ms_per_op",
            DATABASE_CPU_MAX_MS,
        ),
        (f"commits per {noun} ≤ {COMMITS_MAX}", "commits_per_op", COMMITS_MAX),
    ):
        measured = None if row is None else row.get(field)
        note = "" if measured is not None else f"no PostgreSQL {workload} row with {field}"
        rows.append(
            goal(label, what, measured, target, at_most=True, backend="postgres", note=note)
        )
    return rows


def append_goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Goal 2: append ratio per backend."""
    return _ratio_to_ceiling("2", report, "append", APPEND_TARGETS)


def _ratio_to_ceiling(
    label: str, report: dict[str, Any], workload: str, targets: dict[str, float]
) -> list[dict[str, Any]]:
    """``workload``'s ratio to the ceiling against each backend's target; on
    SQLite a run at another ``synchronous`` than FULL does not meet it."""
    results = report.get("results", [])
    synchronous = str(report.get("settings", {}).get("sqlite_synchronous", "FULL")).upper()
    rows = []
    for backend in _backends(results):
        target = targets[backend]
        what = f"{workload} ≥ {target} × ceiling" + (
            " (SQLite FULL)" if backend == "sqlite" else ""
        )
        row = _row(results, backend, workload, IN_FLIGHT)
        if row is None:
            note = f"not measured (workload {workload})"
            rows.append(goal(label, what, None, target, backend=backend, note=note))
        elif backend == "sqlite" and synchronous != "FULL":
            note = f"measured at synchronous={synchronous}; the goal is for FULL"
            measured = row["ratio_to_ceiling"]
            rows.append(goal(label, what, measured, target, backend=backend, met=False, note=note))
        else:
            rows.append(goal(label, what, row["ratio_to_ceiling"], target, backend=backend))
    return rows


def protections_goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Goal 6: the protections' cost on appends, paired."""
    results = report.get("results", [])
    costs = {
        row["backend"]: row
        for row in report.get("protections_cost", [])
        if row.get("workload", PAIRED_WORKLOAD) == PAIRED_WORKLOAD  # others are reported only
    }
    rows = []
    for backend in _backends(results) or list(costs):
        what = f"protections' cost on appends ≤ {PROTECTIONS_MAX_COST:.0%} (median of pairs)"
        cost = costs.get(backend)
        if cost is None:
            rows.append(
                goal(
                    "6",
                    what,
                    None,
                    PROTECTIONS_MAX_COST,
                    at_most=True,
                    backend=backend,
                    note="not measured (run with --protections both)",
                )
            )
            continue
        spread = f"on/off {cost['on_vs_off_min']:.2f}–{cost['on_vs_off_max']:.2f} over "
        spread += f"{cost['pairs']} pairs"
        enough = cost["pairs"] >= PROTECTIONS_PAIRS
        rows.append(
            goal(
                "6",
                what,
                cost["cost"],
                PROTECTIONS_MAX_COST,
                at_most=True,
                backend=backend,
                met=None if enough else False,
                note=spread if enough else f"{spread}: fewer than {PROTECTIONS_PAIRS}",
            )
        )
    return rows


def lifecycle_goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Goal 5: start_terminal and turn against the same run's append ratio."""
    results = report.get("results", [])
    rows = []
    for backend in _backends(results):
        append = _row(results, backend, "append", IN_FLIGHT)
        for workload, divisor in LIFECYCLE_DIVISORS.items():
            what = f"{workload} ≥ append ratio ÷ {divisor}"
            row = _row(results, backend, workload, IN_FLIGHT)
            if append is None or row is None:
                rows.append(
                    goal("5", what, None, None, backend=backend, note=f"no {workload} or append")
                )
                continue
            target = append["ratio_to_ceiling"] / divisor
            rows.append(goal("5", what, row["ratio_to_ceiling"], target, backend=backend))
    return rows


def _records_per_s(row: dict[str, Any]) -> float:
    return float(row.get("records_per_s", row["ops_per_s"]))


def _versus(
    number: str,
    what: str,
    ours: dict[str, Any] | None,
    peer: dict[str, Any] | None,
    target: float,
    backend: str,
) -> dict[str, Any]:
    """Our row's records per second ÷ the peer row's."""
    if peer is None:
        return goal(number, what, None, target, backend=backend, note=RUN_WITH_PEERS)
    if ours is None:
        return goal(number, what, None, target, backend=backend, note="no runstore row")
    return goal(
        number,
        what,
        _records_per_s(ours) / _records_per_s(peer),
        target,
        backend=backend,
        note=f"{ours['workload']} {_records_per_s(ours):,.0f}/s vs {peer['workload']} "
        f"{_records_per_s(peer):,.0f}/s",
    )


def peer_goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Goal 3: like for like against OpenAI Agents' SQLiteSession (in-process):
    one record a call against one item a call, 4 against 4."""
    results = report.get("results", [])
    return [
        _versus(
            "3",
            "SQLite append ≥ SQLiteSession.add_items([item]), records/s",
            _row(results, "sqlite", "append", IN_FLIGHT),
            _row(results, None, PEER, IN_FLIGHT),
            1.0,
            "sqlite",
        ),
        _versus(
            "3",
            "SQLite append_batch (4) ≥ SQLiteSession.add_items (4 items), records/s",
            _row(results, "sqlite", "append_batch", IN_FLIGHT),
            _row(results, None, PEER_BATCH, IN_FLIGHT),
            1.0,
            "sqlite",
        ),
    ]


def postgres_peer_goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Goal 4: PostgreSQL appends against LangGraph's AsyncPostgresSaver steps."""
    results = report.get("results", [])
    return [
        _versus(
            "4",
            f"PostgreSQL append ≥ {POSTGRES_PEER_FACTOR:g} × LangGraph AsyncPostgresSaver",
            _row(results, "postgres", "append", IN_FLIGHT),
            _row(results, None, POSTGRES_PEER, IN_FLIGHT),
            POSTGRES_PEER_FACTOR,
            "postgres",
        )
    ]


def shared_session_goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Goal 7: 4 runs per session appending at once against one run per session."""
    results = report.get("results", [])
    rows = []
    for backend in _backends(results):
        what = f"4 runs per session ≥ {SHARED_SESSION_FACTOR} × append (ratios to ceiling)"
        append = _row(results, backend, "append", IN_FLIGHT)
        shared = _row(results, backend, SHARED_SESSION, IN_FLIGHT)
        if append is None or shared is None or not append["ratio_to_ceiling"]:
            rows.append(
                goal(
                    "7",
                    what,
                    None,
                    SHARED_SESSION_FACTOR,
                    backend=backend,
                    note=f"no {SHARED_SESSION} or append row",
                )
            )
            continue
        rows.append(
            goal(
                "7",
                what,
                shared["ratio_to_ceiling"] / append["ratio_to_ceiling"],
                SHARED_SESSION_FACTOR,
                backend=backend,
            )
        )
    return rows


def page_goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The last page does not grow with the history."""
    results = report.get("results", [])
    rows = []
    for backend in _backends(results):
        for workload in ("list_run", "list_session"):
            pages = {
                row["history"]: row
                for row in results
                if row.get("backend") == backend
                and str(row.get("workload", "")).startswith(f"{workload} ")
                and row.get("in_flight") == IN_FLIGHT
                and "history" in row
            }
            what = f"{workload}: last page of 1M ≤ {PAGE_MAX_GROWTH} × last page of 10k"
            if len(pages) < 2:
                rows.append(
                    goal(
                        "pages",
                        what,
                        None,
                        PAGE_MAX_GROWTH,
                        at_most=True,
                        backend=backend,
                        note=f"no two histories of {workload}",
                    )
                )
                continue
            small, large = min(pages), max(pages)
            growth = pages[small]["ratio_to_ceiling"] / pages[large]["ratio_to_ceiling"]
            note = ""
            if (small, large) != PAGE_HISTORY:
                note = f"histories {small:,} and {large:,} (the goal's are 10,000 and 1,000,000)"
            rows.append(
                goal(
                    "pages",
                    what,
                    growth,
                    PAGE_MAX_GROWTH,
                    at_most=True,
                    backend=backend,
                    note=note,
                )
            )
    return rows


def watcher_goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """100 idle watchers cost appends at most 10 %."""
    what = f"100 idle watchers cost appends ≤ {WATCHERS_MAX_COST:.0%}"
    results = report.get("results", [])
    rows = []
    for backend in _backends(results):
        row = _row(results, backend, IDLE_WATCHERS, IN_FLIGHT)
        if row is None or row.get("vs_no_watchers") is None:
            rows.append(
                goal(
                    "watchers",
                    what,
                    None,
                    WATCHERS_MAX_COST,
                    at_most=True,
                    backend=backend,
                    note=NO_WATCH_ROWS,
                )
            )
            continue
        spread = row.get("vs_no_watchers_range")
        note = f"with/without {spread[0]:.2f}–{spread[1]:.2f}" if spread else ""
        rows.append(
            goal(
                "watchers",
                what,
                1 - row["vs_no_watchers"],
                WATCHERS_MAX_COST,
                at_most=True,
                backend=backend,
                note=note,
            )
        )
    return rows


def projection_goal(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The projection table: reported, not judged."""
    rows = report.get("projection") or []
    note = "see the projection table" if rows else "no append row with CPU figures"
    what = "scaling projection from measured CPU per call"
    return [reported("projection", what, None, present=bool(rows), note=note)]


def triage_goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Opening a triage page of 1,000,000 runs takes at most a second (bench/triage.py)."""
    from bench import triage

    return triage.goal_rows(report)


def coalescing_goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The coalesced appends' goals (``append_client``, ``lone_append``), then
    what is reported beside them to explain a miss."""
    results = report.get("results", [])
    rows = _ratio_to_ceiling(COALESCING, report, COALESCED, COALESCED_TARGETS)
    for backend, title, peer, factor, against in (
        (
            "sqlite",
            "SQLite",
            PEER,
            COALESCED_PEER_FACTOR,
            "SQLiteSession.add_items([item]), records/s",
        ),
        (
            "postgres",
            "PostgreSQL",
            POSTGRES_PEER,
            COALESCED_POSTGRES_PEER_FACTOR,
            "LangGraph AsyncPostgresSaver",
        ),
    ):
        ours = _row(results, backend, COALESCED, IN_FLIGHT)
        theirs = _row(results, None, peer, IN_FLIGHT)
        what = f"{title} {COALESCED} ≥ {factor:g} × {against}"
        rows.append(_versus(COALESCING, what, ours, theirs, factor, backend))
    rows.extend(_database_cost(COALESCING, report, COALESCED))
    rows.extend(_lone_append_goals(report))
    for backend in _backends(results):
        for workload, field, what in (
            (COALESCED, "server_cpu_ms_per_op", f"server CPU ms per {COALESCED} append"),
            (COALESCED_GO, "ratio_to_ceiling", f"{COALESCED_GO} (the Go client) × ceiling"),
        ):
            row = _row(results, backend, workload, IN_FLIGHT)
            measured = None if row is None else row.get(field)
            present = measured is not None
            rows.append(reported(COALESCING, what, measured, present=present, backend=backend))
    return rows


def _lone_append_goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """A lone append is never delayed: its p99 with coalescing on ÷ off."""
    what = f"lone append p99, coalescing on ÷ off ≤ {LONE_APPEND_MAX}"
    sections = {row["backend"]: row for row in report.get("lone_append") or []}
    rows = []
    for backend in _backends(report.get("results", [])) or list(sections):
        section = sections.get(backend)
        if section is None:
            note = "not measured (workload lone_append)"
            rows.append(
                goal(
                    COALESCING,
                    what,
                    None,
                    LONE_APPEND_MAX,
                    at_most=True,
                    backend=backend,
                    note=note,
                )
            )
            continue
        note = f"{section['p99_on_ms']} / {section['p99_off_ms']} ms, {section['pairs']} pairs"
        rows.append(
            goal(
                COALESCING,
                what,
                section["p99_on_over_off"],
                LONE_APPEND_MAX,
                at_most=True,
                backend=backend,
                note=note,
            )
        )
    return rows


def evaluate(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every goal in order (the coalesced appends' first), then the earlier
    goals still reported."""
    return [
        *coalescing_goals(report),
        *database_goals(report),
        *append_goals(report),
        *peer_goals(report),
        *postgres_peer_goals(report),
        *lifecycle_goals(report),
        *protections_goals(report),
        *shared_session_goals(report),
        *page_goals(report),
        *triage_goals(report),
        *watcher_goals(report),
        *projection_goal(report),
    ]


def status(row: dict[str, Any]) -> str:
    if row.get("reported") is not None:
        return "reported" if row["reported"] else "not measured"
    if row["met"] is None:
        return "not measured"
    return "met" if row["met"] else "not met"


def render(rows: list[dict[str, Any]]) -> str:
    lines = [
        "Goals (16 in flight):",
        "",
        "| goal | backend | what | measured | target | status | note |",
        "|---|---|---|---:|---:|---|---|",
    ]
    for row in rows:
        measured = "–" if row["measured"] is None else f"{row['measured']:.3f}"
        target = "–" if row["target"] is None else f"{row['comparison']} {row['target']:.3f}"
        lines.append(
            f"| {row['goal']} | {row['backend'] or '–'} | {row['what']} | {measured} "
            f"| {target} | {status(row)} | {row['note']} |"
        )
    return "\n".join(lines)
