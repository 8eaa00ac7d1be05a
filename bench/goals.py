"""The performance goals (issue 15), judged from one run's report.

Pure functions over the report ``bench.harness`` writes: every goal with its
measured ratio, its target and whether it is met. A goal whose figures the
run did not measure says how to measure it instead of guessing. Ratios are
taken at 16 calls in flight unless a goal says otherwise.

What each goal reads:

1. ``results[]`` rows ``append`` at 16 in flight, ``ratio_to_ceiling`` per
   backend (SQLite only when the run used ``synchronous=FULL``); the
   ``protections_cost`` section (``--protections both``: ``cost``, ``pairs``).
2. ``start_terminal`` and ``turn`` rows of the same run, against the
   append ratio of that backend: a lifecycle RPC may cost at most 1.25 × an
   append RPC, so ``start_terminal`` (2 RPCs) ≥ 0.8 × append ÷ 2 and ``turn``
   (12 RPCs) ≥ 0.8 × append ÷ 12.
3. The best append path on SQLite (``append``, or ``append_batch``, whose row
   may carry ``records_per_s`` when one call writes several records) against
   the peer row ``peer:openai-agents-sqlitesession`` (``--peers``), records
   per second of each at 16 in flight.
4. ``list_run`` / ``list_session`` rows (``history``: records in the
   session): the last page of the largest history costs at most 1.5 × the last
   page of the smallest (cost ∝ 1 / ``ratio_to_ceiling``); the row
   ``append (100 idle watchers)`` (``bench/watch.py``) carries
   ``vs_no_watchers``, the median of its paired ratios to appends without
   watchers: idle watchers cost appends at most 10 %.
5. The ``projection`` section (``bench/cpu.py``) is reported, not judged.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

IN_FLIGHT = 16

APPEND_TARGETS = {"sqlite": 0.75, "postgres": 0.65}
PROTECTIONS_MAX_COST = 0.10
PROTECTIONS_PAIRS = 10
LIFECYCLE_FACTOR = 0.8
LIFECYCLE_RPCS = {"start_terminal": 2, "turn": 12}
PEER = "peer:openai-agents-sqlitesession"
APPEND_PATHS = ("append", "append_batch")
PAGE_MAX_GROWTH = 1.5
PAGE_HISTORY = (10_000, 1_000_000)
WATCHERS_MAX_COST = 0.10
IDLE_WATCHERS = "append (100 idle watchers)"
NO_WATCH_ROWS = "not measured (workload idle_watchers, bench/watch.py)"

RUN_WITH_PEERS = "not measured (run with --peers)"


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


def append_goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Goal 1: append ratio per backend, and the protections' cost."""
    results = report.get("results", [])
    synchronous = str(report.get("settings", {}).get("sqlite_synchronous", "FULL")).upper()
    rows = []
    for backend in _backends(results):
        target = APPEND_TARGETS[backend]
        what = f"append ≥ {target} × ceiling" + (" (SQLite FULL)" if backend == "sqlite" else "")
        append = _row(results, backend, "append", IN_FLIGHT)
        if append is None:
            rows.append(goal("1", what, None, target, backend=backend, note="no append row"))
        elif backend == "sqlite" and synchronous != "FULL":
            rows.append(
                goal(
                    "1",
                    what,
                    append["ratio_to_ceiling"],
                    target,
                    backend=backend,
                    met=False,
                    note=f"measured at synchronous={synchronous}; the goal is for FULL",
                )
            )
        else:
            rows.append(goal("1", what, append["ratio_to_ceiling"], target, backend=backend))
    costs = {row["backend"]: row for row in report.get("protections_cost", [])}
    for backend in _backends(results) or list(costs):
        what = f"protections' cost on appends ≤ {PROTECTIONS_MAX_COST:.0%} (median of pairs)"
        cost = costs.get(backend)
        if cost is None:
            rows.append(
                goal(
                    "1",
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
                "1",
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
    """Goal 2: start_terminal and turn against the same run's append ratio."""
    results = report.get("results", [])
    rows = []
    for backend in _backends(results):
        append = _row(results, backend, "append", IN_FLIGHT)
        for workload, rpcs in LIFECYCLE_RPCS.items():
            what = f"{workload} ≥ {LIFECYCLE_FACTOR} × append ratio ÷ {rpcs}"
            row = _row(results, backend, workload, IN_FLIGHT)
            if append is None or row is None:
                rows.append(
                    goal("2", what, None, None, backend=backend, note=f"no {workload} or append")
                )
                continue
            target = LIFECYCLE_FACTOR * append["ratio_to_ceiling"] / rpcs
            rows.append(goal("2", what, row["ratio_to_ceiling"], target, backend=backend))
    return rows


def _records_per_s(row: dict[str, Any]) -> float:
    return float(row.get("records_per_s", row["ops_per_s"]))


def peer_goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Goal 3: runstore's best SQLite append path against the in-process peer."""
    results = report.get("results", [])
    what = "best SQLite append path ≥ OpenAI Agents SQLiteSession (in-process), records/s"
    peer = _row(results, None, PEER, IN_FLIGHT)
    paths = [row for name in APPEND_PATHS if (row := _row(results, "sqlite", name, IN_FLIGHT))]
    if peer is None:
        return [goal("3", what, None, 1.0, backend="sqlite", note=RUN_WITH_PEERS)]
    if not paths:
        return [goal("3", what, None, 1.0, backend="sqlite", note="no SQLite append row")]
    best = max(paths, key=_records_per_s)
    return [
        goal(
            "3",
            what,
            _records_per_s(best) / _records_per_s(peer),
            1.0,
            backend="sqlite",
            note=f"{best['workload']} {_records_per_s(best):,.0f}/s vs peer "
            f"{_records_per_s(peer):,.0f}/s",
        )
    ]


def page_goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Goal 4a: the last page does not grow with the history."""
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
                        "4",
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
                goal("4", what, growth, PAGE_MAX_GROWTH, at_most=True, backend=backend, note=note)
            )
    return rows


def watcher_goals(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Goal 4b: 100 idle watchers cost appends at most 10 %."""
    what = f"100 idle watchers cost appends ≤ {WATCHERS_MAX_COST:.0%}"
    results = report.get("results", [])
    rows = []
    for backend in _backends(results):
        row = _row(results, backend, IDLE_WATCHERS, IN_FLIGHT)
        if row is None or row.get("vs_no_watchers") is None:
            rows.append(
                goal(
                    "4",
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
                "4",
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
    """Goal 5: reported (the projection table), not judged."""
    rows = report.get("projection") or []
    note = "see the projection table" if rows else "no append row with CPU figures"
    return [
        {
            **goal("5", "scaling projection from measured CPU per call", None, None, note=note),
            "met": None,
            "reported": bool(rows),
        }
    ]


def evaluate(report: dict[str, Any]) -> list[dict[str, Any]]:
    """Every goal of issue 15, in order."""
    return [
        *append_goals(report),
        *lifecycle_goals(report),
        *peer_goals(report),
        *page_goals(report),
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
        "Goals (issue 15; 16 in flight):",
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
