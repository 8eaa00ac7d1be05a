"""CPU per call and the scaling projection (bench/cpu.py)."""

from __future__ import annotations

import os
import threading

import pytest

from bench import cpu


def test_stat_fields_are_counted_after_the_command_name() -> None:
    # A command name with spaces and a parenthesis must not shift the fields.
    fields = ["S", *["0"] * 10, "250", "50", *["0"] * 30]
    line = "4242 (python3 (x) y) " + " ".join(fields)
    assert cpu.parse_stat(line) == pytest.approx(300 / cpu.TICKS_PER_SECOND)


def test_schedstat_is_nanoseconds_on_cpu() -> None:
    assert cpu.parse_schedstat("1500000000 20000 7\n") == pytest.approx(1.5)


def test_this_process_cpu_is_read_and_grows() -> None:
    before = cpu.process_cpu(os.getpid())
    total = 0
    for index in range(3_000_000):
        total += index
    after = cpu.process_cpu(os.getpid())
    assert before is not None and after is not None and after > before
    assert cpu.process_cpu(2**22 + 12345) is None  # beyond pid_max: no such process


def test_every_thread_of_a_process_is_read() -> None:
    def spin() -> None:
        total = 0
        for index in range(2_000_000):
            total += index

    before = cpu.threads_cpu(os.getpid())
    worker = threading.Thread(target=spin)
    worker.start()
    after_start = cpu.threads_cpu(os.getpid())
    worker.join()
    after = cpu.threads_cpu(os.getpid())
    assert before is not None and after_start is not None and after is not None
    assert os.getpid() in before  # the main thread's id is the process id
    assert worker.native_id in after_start
    assert cpu.cpu_delta(before, after_start) > 0
    assert cpu.threads_cpu(2**22 + 12345) is None


def test_cpu_delta_counts_new_processes_whole_and_loses_gone_ones() -> None:
    before = {1: 1.0, 2: 5.0}
    after = {1: 1.5, 3: 0.25}
    assert cpu.cpu_delta(before, after) == pytest.approx(0.75)


def test_per_op_ms() -> None:
    assert cpu.per_op_ms(0.5, 1000) == pytest.approx(0.5)
    assert cpu.per_op_ms(None, 1000) is None
    assert cpu.per_op_ms(0.5, 0) is None


def test_projection_takes_the_smaller_bound() -> None:
    # 0.5 ms of server CPU per append: 2,000/s per replica; 0.25 ms of database
    # CPU: 4,000/s per database core.
    assert cpu.project(0.5, 0.25, 1, 4) == {
        "appends_per_s": 2000,
        "bound": "server",
        "server_bound": 2000,
        "database_bound": 16000,
    }
    eight = cpu.project(0.5, 0.25, 8, 2)
    assert eight["appends_per_s"] == pytest.approx(8000) and eight["bound"] == "database"
    sqlite = cpu.project(0.4, None, 1, None)
    assert sqlite["appends_per_s"] == pytest.approx(2500) and sqlite["bound"] == "server"
    with pytest.raises(ValueError):
        cpu.project(0, 0.25, 1, 1)


def test_projection_table_from_results() -> None:
    results = [
        {
            "backend": "postgres",
            "workload": "append",
            "in_flight": 16,
            "server_cpu_ms_per_op": 0.5,
            "db_cpu_ms_per_op": 0.25,
        },
        {"backend": "postgres", "workload": "append", "in_flight": 1, "server_cpu_ms_per_op": 9},
        {
            "backend": "sqlite",
            "workload": "append",
            "in_flight": 16,
            "server_cpu_ms_per_op": 0.4,
            "db_cpu_ms_per_op": None,
        },
    ]
    rows = cpu.projection_table(results, replicas=(1, 8), database_cores=(2, 4))
    postgres = {(r["replicas"], r["db_cores"]): r for r in rows if r["backend"] == "postgres"}
    assert set(postgres) == {(1, 2), (1, 4), (8, 2), (8, 4)}
    assert postgres[(8, 2)]["appends_per_s"] == 8000 and postgres[(8, 2)]["bound"] == "database"
    assert postgres[(8, 4)]["appends_per_s"] == 16000 and postgres[(8, 4)]["bound"] == "server"
    (sqlite,) = [r for r in rows if r["backend"] == "sqlite"]
    assert sqlite["replicas"] == 1 and sqlite["appends_per_s"] == 2500
    text = cpu.render_projection(rows)
    assert "| 8 | 8,000 D | 16,000 S |" in text and "2,500 appends/s" in text
