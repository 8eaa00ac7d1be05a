"""The performance goals judged from a report: each rule at its boundary."""

from __future__ import annotations

from typing import Any

import pytest

from bench import goals


def _row(backend: str, workload: str, ratio: float, **extra: Any) -> dict[str, Any]:
    return {
        "backend": backend,
        "workload": workload,
        "in_flight": extra.pop("in_flight", 16),
        "ops_per_s": extra.pop("ops_per_s", 1000.0 * ratio),
        "ratio_to_ceiling": ratio,
        **extra,
    }


def _report(*rows: dict[str, Any], **sections: Any) -> dict[str, Any]:
    return {"settings": {"sqlite_synchronous": "FULL"}, "results": list(rows), **sections}


def _only(rows: list[dict[str, Any]], what: str, backend: str = "") -> dict[str, Any]:
    (match,) = [r for r in rows if what in r["what"] and (not backend or r["backend"] == backend)]
    return match


RATIO_GOALS = pytest.mark.parametrize(
    ("evaluate", "workload", "sqlite_target", "postgres_target"),
    [
        (goals.append_goals, "append", 0.75, 0.65),
        (goals.coalescing_goals, "append_client", 2.0, 1.6),
    ],
    ids=["append", "append_client"],
)


@RATIO_GOALS
def test_ratio_targets_per_backend_at_16_in_flight(
    evaluate: Any, workload: str, sqlite_target: float, postgres_target: float
) -> None:
    rows = evaluate(
        _report(
            _row("sqlite", workload, sqlite_target),
            _row("sqlite", workload, 9.0, in_flight=1),  # not the goal's concurrency
            _row("postgres", workload, postgres_target - 0.001),
        )
    )
    sqlite = _only(rows, f"{workload} ≥ {sqlite_target} × ceiling", "sqlite")
    postgres = _only(rows, f"{workload} ≥ {postgres_target} × ceiling", "postgres")
    assert (sqlite["measured"], sqlite["target"], sqlite["met"]) == (
        sqlite_target,
        sqlite_target,
        True,
    )
    assert postgres["met"] is False
    assert postgres["measured"] == pytest.approx(postgres_target - 0.001)


@RATIO_GOALS
def test_sqlite_ratio_goal_is_for_full_only(
    evaluate: Any, workload: str, sqlite_target: float, postgres_target: float
) -> None:
    report = _report(_row("sqlite", workload, sqlite_target * 2))
    report["settings"]["sqlite_synchronous"] = "NORMAL"
    row = _only(evaluate(report), f"{workload} ≥ {sqlite_target} × ceiling")
    assert row["met"] is False and "FULL" in row["note"]
    (missing,) = [
        r
        for r in evaluate(_report(_row("sqlite", "ceiling", 1.0)))
        if "× ceiling" in r["what"] and workload + " ≥" in r["what"]
    ]
    assert missing["met"] is None and f"workload {workload}" in missing["note"]


def test_database_cpu_and_commits_per_postgres_append() -> None:
    rows = goals.database_goals(
        _report(
            _row("postgres", "append", 0.5, db_cpu_ms_per_op=0.15, commits_per_op=0.31),
            _row("postgres", "append", 0.9, in_flight=1, db_cpu_ms_per_op=0.01),
        )
    )
    cpu, commits = _only(rows, "database CPU"), _only(rows, "commits per append")
    assert (cpu["measured"], cpu["target"], cpu["met"]) == (0.15, 0.15, True)
    assert (commits["measured"], commits["target"], commits["met"]) == (0.31, 0.3, False)
    missing = goals.database_goals(_report(_row("sqlite", "append", 0.5)))
    assert [r["met"] for r in missing] == [None, None]


def _cost(backend: str, cost: float, pairs: int = 10, workload: str = "append") -> dict[str, Any]:
    return {
        "backend": backend,
        "workload": workload,
        "pairs": pairs,
        "cost": cost,
        "on_vs_off_min": 0.8,
        "on_vs_off_max": 1.0,
    }


def test_protections_cost_at_most_seven_percent_over_ten_pairs() -> None:
    results = (_row("sqlite", "append", 0.7), _row("postgres", "append", 0.6))
    rows = goals.protections_goals(
        _report(*results, protections_cost=[_cost("sqlite", 0.07), _cost("postgres", 0.071)])
    )
    assert _only(rows, "protections", "sqlite")["met"] is True
    assert _only(rows, "protections", "postgres")["met"] is False
    few = goals.protections_goals(
        _report(*results, protections_cost=[_cost("sqlite", 0.01, pairs=9)])
    )
    assert _only(few, "protections", "sqlite")["met"] is False
    missing = _only(few, "protections", "postgres")
    assert missing["met"] is None and "--protections both" in missing["note"]
    # The coalesced appends' cost is reported beside, never judged as the goal's.
    beside = goals.protections_goals(
        _report(
            *results,
            protections_cost=[
                _cost("sqlite", 0.2),
                _cost("sqlite", 0.01, workload="append_client"),
                _cost("postgres", 0.01, workload="append_client"),
            ],
        )
    )
    assert _only(beside, "protections", "sqlite")["measured"] == 0.2
    assert _only(beside, "protections", "postgres")["met"] is None


def test_lifecycle_targets_follow_the_same_runs_append_ratio() -> None:
    # A lifecycle RPC may cost 1.25 appends: 2 of them are 2.5 appends, a turn
    # (10 appends and 2 lifecycle RPCs) 12.5.
    append = 0.6
    rows = goals.lifecycle_goals(
        _report(
            _row("sqlite", "append", append),
            _row("sqlite", "start_terminal", append / 2.5),
            _row("sqlite", "turn", append / 12.5 - 0.001),
        )
    )
    start = _only(rows, "start_terminal")
    turn = _only(rows, "turn")
    assert start["target"] == pytest.approx(0.24) and start["met"] is True
    assert turn["target"] == pytest.approx(0.048) and turn["met"] is False


def test_peer_goals_compare_like_for_like() -> None:
    """One record a call against the peer's one item, 4 against its 4: a batch
    never stands in for the single append."""
    peer = _row("in-process", goals.PEER, 0, ops_per_s=1500.0)
    peer_batch = _row("in-process", goals.PEER_BATCH, 0, ops_per_s=5000.0)
    plain = _row("sqlite", "append", 0.6, ops_per_s=1400.0)
    batch = _row("sqlite", "append_batch", 0.3, ops_per_s=5200.0)
    single, four = goals.peer_goals(_report(plain, batch, peer, peer_batch))
    assert single["met"] is False and single["measured"] == pytest.approx(1400 / 1500, abs=1e-3)
    assert four["met"] is True and four["measured"] == pytest.approx(5200 / 5000, abs=1e-3)
    assert "append_batch" in four["note"] and "(4 items)" in four["note"]


def test_peer_goal_without_peers_says_how_to_measure() -> None:
    rows = goals.peer_goals(_report(_row("sqlite", "append", 0.6)))
    assert [r["note"] for r in rows] == ["not measured (run with --peers)"] * 2
    (postgres,) = goals.postgres_peer_goals(_report(_row("postgres", "append", 0.6)))
    assert postgres["met"] is None and postgres["note"] == "not measured (run with --peers)"


def test_postgres_append_twice_the_langgraph_saver() -> None:
    peer = _row("in-process", goals.POSTGRES_PEER, 0, ops_per_s=600.0)
    (row,) = goals.postgres_peer_goals(
        _report(_row("postgres", "append", 0.4, ops_per_s=1199.0), peer)
    )
    assert row["target"] == 2.0 and row["met"] is False
    (met,) = goals.postgres_peer_goals(
        _report(_row("postgres", "append", 0.4, ops_per_s=1200.0), peer)
    )
    assert met["met"] is True


def test_four_runs_per_session_against_the_plain_append() -> None:
    rows = goals.shared_session_goals(
        _report(
            _row("sqlite", "append", 0.5),
            _row("sqlite", goals.SHARED_SESSION, 0.4),
            _row("postgres", "append", 0.5),
            _row("postgres", goals.SHARED_SESSION, 0.39),
        )
    )
    assert [(r["backend"], r["met"]) for r in rows] == [("sqlite", True), ("postgres", False)]
    assert rows[1]["measured"] == pytest.approx(0.78)
    (missing,) = goals.shared_session_goals(_report(_row("sqlite", "append", 0.5)))
    assert missing["met"] is None


def _page(backend: str, workload: str, history: int, ratio: float) -> dict[str, Any]:
    return _row(backend, f"{workload} (last page of {history:,})", ratio, history=history)


def test_last_page_may_cost_at_most_one_and_a_half_times_more() -> None:
    # Cost is the inverse of the ratio to the ceiling: 0.30 → 0.20 is 1.5 × the cost.
    rows = goals.page_goals(
        _report(
            _row("sqlite", "append", 0.6),
            _page("sqlite", "list_run", 10_000, 0.30),
            _page("sqlite", "list_run", 1_000_000, 0.20),
            _page("sqlite", "list_session", 10_000, 0.30),
            _page("sqlite", "list_session", 1_000_000, 0.19),
        )
    )
    run, session = _only(rows, "list_run"), _only(rows, "list_session")
    assert run["measured"] == pytest.approx(1.5) and run["met"] is True and run["note"] == ""
    assert session["met"] is False


def test_page_goal_names_other_history_sizes() -> None:
    rows = goals.page_goals(
        _report(
            _row("sqlite", "append", 0.6),
            _page("sqlite", "list_run", 10_000, 0.30),
            _page("sqlite", "list_run", 100_000, 0.30),
        )
    )
    assert "100,000" in _only(rows, "list_run")["note"]
    assert _only(rows, "list_session")["met"] is None


def test_idle_watchers_may_cost_appends_at_most_ten_percent() -> None:
    rows = goals.watcher_goals(
        _report(
            _row("sqlite", "append", 0.6),
            _row("sqlite", "append (100 idle watchers)", 0.55, vs_no_watchers=0.9),
            _row("postgres", "append", 0.6),
            _row(
                "postgres",
                "append (100 idle watchers)",
                0.5,
                vs_no_watchers=0.899,
                vs_no_watchers_range=[0.8, 0.95],
            ),
        )
    )
    assert [(r["backend"], r["met"]) for r in rows] == [("sqlite", True), ("postgres", False)]
    assert rows[1]["measured"] == pytest.approx(0.101) and "0.80–0.95" in rows[1]["note"]
    (missing,) = goals.watcher_goals(_report(_row("sqlite", "append", 0.6)))
    assert missing["met"] is None and "idle_watchers" in missing["note"]


def test_coalesced_appends_against_the_peers_and_the_database() -> None:
    rows = goals.coalescing_goals(
        _report(
            _row("sqlite", "append_client", 1.0, ops_per_s=1500.0),
            _row("", goals.PEER, 1.0, ops_per_s=1000.0),
            _row(
                "postgres",
                "append_client",
                1.0,
                ops_per_s=2999.0,
                db_cpu_ms_per_op=0.15,
                commits_per_op=0.31,
            ),
            _row("", goals.POSTGRES_PEER, 1.0, ops_per_s=1000.0),
        )
    )
    assert _only(rows, "1.5 × SQLiteSession")["met"] is True
    assert _only(rows, "3 × LangGraph")["met"] is False
    assert _only(rows, "database CPU per append_client")["met"] is True
    assert _only(rows, "commits per append_client")["met"] is False
    bare = goals.coalescing_goals(_report(_row("sqlite", "append", 0.5)))
    assert _only(bare, "SQLiteSession")["note"] == goals.RUN_WITH_PEERS


def test_a_lone_append_p99_with_coalescing_at_most_five_percent_over_without() -> None:
    section = [
        {
            "backend": "sqlite",
            "p99_on_over_off": 1.05,
            "p99_on_ms": 2.1,
            "p99_off_ms": 2.0,
            "pairs": 10,
        },
        {
            "backend": "postgres",
            "p99_on_over_off": 1.051,
            "p99_on_ms": 3.2,
            "p99_off_ms": 3.0,
            "pairs": 10,
        },
    ]
    rows = goals.coalescing_goals(
        _report(_row("sqlite", "append", 0.5), _row("postgres", "append", 0.5), lone_append=section)
    )
    lone = [r for r in rows if "lone append" in r["what"]]
    assert [(r["backend"], r["met"]) for r in lone] == [("sqlite", True), ("postgres", False)]
    (missing,) = [
        r
        for r in goals.coalescing_goals(_report(_row("sqlite", "append", 0.5)))
        if "lone" in r["what"]
    ]
    assert missing["met"] is None and "lone_append" in missing["note"]


def test_coalesced_server_cpu_and_the_go_client_are_reported_not_judged() -> None:
    rows = goals.coalescing_goals(
        _report(
            _row("sqlite", "append_client", 1.0, server_cpu_ms_per_op=0.35),
            _row("sqlite", "append_client_go", 0.9),
        )
    )
    cpu = _only(rows, "server CPU ms per append_client")
    go = _only(rows, "append_client_go")
    assert (cpu["measured"], goals.status(cpu)) == (0.35, "reported")
    assert (go["measured"], goals.status(go)) == (0.9, "reported")
    (absent,) = [
        r
        for r in goals.coalescing_goals(_report(_row("sqlite", "append", 0.5)))
        if "append_client_go" in r["what"]
    ]
    assert goals.status(absent) == "not measured"


def test_every_goal_is_reported_in_order_and_rendered() -> None:
    report = _report(_row("sqlite", "append", 0.8), _row("sqlite", "ceiling", 1.0))
    rows = goals.evaluate(report)
    labels = [r["goal"] for r in rows]
    first = labels.index("1")
    assert set(labels[:first]) == {goals.COALESCING}
    numbered = [label for label in labels if label.isdigit()]
    assert numbered == sorted(numbered) and set(numbered) == {str(n) for n in range(1, 8)}
    assert labels[first + len(numbered) :] == [
        "pages",
        "pages",
        "watchers",
        "projection",
    ]
    text = goals.render(rows)
    assert "| 2 | sqlite | append ≥ 0.75 × ceiling (SQLite FULL) | 0.800 | ≥ 0.750 | met |" in text
    assert "not measured" in text
